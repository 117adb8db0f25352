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

/// `UPDATE tasks SET updated_ms, last_sequence, budget WHERE id`: a task of
/// which nothing else changed (a tool call recorded: its history's end, its
/// time and the budget's count of calls).
#[derive(Debug)]
pub(super) struct TaskCounters {
    pub id: String,
    pub updated_ms: i64,
    pub last_sequence: i64,
    /// JSON of `TaskBudget`.
    pub budget: String,
}

impl TaskCounters {
    /// Runs it; returns how many rows it changed.
    pub fn run(self, conn: &mut AnyConnection) -> QueryResult<usize> {
        match conn {
            AnyConnection::Sqlite(c) => RunQueryDsl::execute(self, c),
            AnyConnection::Pg(c) => RunQueryDsl::execute(self, c),
        }
    }
}

impl QueryId for TaskCounters {
    type QueryId = Self;
    // One text whatever the values: safe to keep prepared.
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl<DB> QueryFragment<DB> for TaskCounters
where
    DB: Backend + HasSqlType<BigInt> + HasSqlType<Text>,
    i64: ToSql<BigInt, DB>,
    String: ToSql<Text, DB>,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
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

impl RunQueryDsl<diesel::SqliteConnection> for TaskCounters {}
impl RunQueryDsl<diesel::PgConnection> for TaskCounters {}

/// Both backends take it (checked when built).
const _: fn() = || {
    fn takes<Q: QueryFragment<Sqlite> + QueryFragment<Pg>>() {}
    takes::<TaskCounters>();
};
