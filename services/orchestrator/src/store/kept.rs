//! Statements the connections keep prepared where diesel would prepare them
//! again on every call: diesel never caches an `UPDATE`, so the hottest
//! update — what a recorded tool call changes in its task — is written here
//! as a statement of a fixed text, which each connection prepares once (on
//! SQLite, compiling it is as much work as running it; on PostgreSQL it is a
//! named prepared statement).

use diesel::backend::Backend;
use diesel::pg::Pg;
use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::serialize::ToSql;
use diesel::sql_types::{BigInt, HasSqlType, Text};
use diesel::sqlite::Sqlite;
use diesel::{QueryResult, RunQueryDsl};

use super::connection::AnyConnection;
use super::tasks::TASK_CHANNEL;

/// `UPDATE tasks SET updated_ms, last_sequence, budget WHERE id`: a task of
/// which nothing else changed (a tool call recorded: its history's end, its
/// time and the budget's count of calls). On PostgreSQL the same statement
/// announces the change on [`TASK_CHANNEL`] (what `notify_task` sends), in the
/// one round trip.
#[derive(Debug)]
pub(super) struct TaskCounters {
    pub id: String,
    pub updated_ms: i64,
    pub last_sequence: i64,
    /// JSON of `TaskBudget`.
    pub budget: String,
}

impl TaskCounters {
    /// Runs it (and on PostgreSQL announces the change).
    pub fn run(self, conn: &mut AnyConnection) -> QueryResult<usize> {
        match conn {
            AnyConnection::Sqlite(c) => RunQueryDsl::execute(self, c),
            AnyConnection::Pg(c) => RunQueryDsl::execute(Announced(self), c),
        }
    }

    fn walk_update<'b, DB>(&'b self, out: &mut AstPass<'_, 'b, DB>) -> QueryResult<()>
    where
        DB: Backend + HasSqlType<BigInt> + HasSqlType<Text>,
        i64: ToSql<BigInt, DB>,
        String: ToSql<Text, DB>,
    {
        out.push_sql("UPDATE tasks SET updated_ms = ");
        out.push_bind_param::<BigInt, _>(&self.updated_ms)?;
        out.push_sql(", last_sequence = ");
        out.push_bind_param::<BigInt, _>(&self.last_sequence)?;
        out.push_sql(", budget = ");
        out.push_bind_param::<Text, _>(&self.budget)?;
        out.push_sql(" WHERE id = ");
        out.push_bind_param::<Text, _>(&self.id)?;
        Ok(())
    }
}

/// [`TaskCounters`] with the `NOTIFY` of the task's change, on PostgreSQL.
struct Announced(TaskCounters);

impl QueryId for TaskCounters {
    type QueryId = Self;
    // One text whatever the values: safe to keep prepared.
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl QueryFragment<Sqlite> for TaskCounters {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Sqlite>) -> QueryResult<()> {
        self.walk_update(&mut out)
    }
}

impl QueryId for Announced {
    type QueryId = Self;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl QueryFragment<Pg> for Announced {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        out.push_sql("WITH changed AS (");
        self.0.walk_update(&mut out)?;
        out.push_sql(" RETURNING id, last_sequence) SELECT pg_notify('");
        out.push_sql(TASK_CHANNEL);
        out.push_sql("', id || ' ' || last_sequence) FROM changed");
        Ok(())
    }
}

impl RunQueryDsl<diesel::SqliteConnection> for TaskCounters {}
impl RunQueryDsl<diesel::PgConnection> for Announced {}

/// A recorded tool call in one statement, on PostgreSQL: the task's counters
/// ([`TaskCounters`]) updated only if its history's end, budget and usage are
/// still those the caller read, its event inserted with the next sequence,
/// and the change announced on [`TASK_CHANNEL`] — one round trip and, as one
/// statement, one transaction. Executed, it returns 1 when it was written
/// and 0 when the task had changed meanwhile (nothing written).
#[derive(Debug)]
pub(super) struct RecordCall {
    pub counters: TaskCounters,
    /// What the caller read, the update's condition.
    pub read_sequence: i64,
    pub read_budget: Option<String>,
    pub read_usage: Option<String>,
    /// The event: its kind and data (its sequence is `counters.last_sequence`,
    /// its time `counters.updated_ms`).
    pub kind: String,
    pub data: String,
}

impl RecordCall {
    pub fn run(self, conn: &mut diesel::PgConnection) -> QueryResult<usize> {
        RunQueryDsl::execute(self, conn)
    }
}

impl QueryId for RecordCall {
    type QueryId = Self;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl QueryFragment<Pg> for RecordCall {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        use diesel::sql_types::Nullable;
        out.push_sql("WITH changed AS (");
        self.counters.walk_update(&mut out)?;
        out.push_sql(" AND last_sequence = ");
        out.push_bind_param::<BigInt, _>(&self.read_sequence)?;
        out.push_sql(" AND budget IS NOT DISTINCT FROM ");
        out.push_bind_param::<Nullable<Text>, _>(&self.read_budget)?;
        out.push_sql(" AND usage IS NOT DISTINCT FROM ");
        out.push_bind_param::<Nullable<Text>, _>(&self.read_usage)?;
        out.push_sql(
            " RETURNING id, last_sequence, updated_ms), added AS (\
             INSERT INTO task_events (task_id, sequence, kind, data, at_ms) \
             SELECT id, last_sequence, ",
        );
        out.push_bind_param::<Text, _>(&self.kind)?;
        out.push_sql(", ");
        out.push_bind_param::<Text, _>(&self.data)?;
        out.push_sql(", updated_ms FROM changed) SELECT pg_notify('");
        out.push_sql(TASK_CHANNEL);
        out.push_sql("', id || ' ' || last_sequence) FROM changed");
        Ok(())
    }
}

impl RunQueryDsl<diesel::PgConnection> for RecordCall {}
