//! Tool calls that start processes (bash, git), from the orchestrator's yes to
//! their record. A run's end waits for them: until each is recorded (its
//! processes are gone) or its fence has fallen (its launcher killed them).

use diesel::prelude::*;

use super::replicas::CHUNK;
use super::schema::{calls_in_flight, runs};
use super::{Db, Store, StoreError};
use crate::domain::{RunId, RunState, now_ms};

impl Store {
    /// Notes call `id` of `run`, just authorized; noting it again changes
    /// nothing.
    pub async fn call_started(&self, id: String, run: RunId) -> Result<(), StoreError> {
        self.write(move |conn| {
            let known: i64 = calls_in_flight::table
                .filter(calls_in_flight::id.eq(&id))
                .count()
                .get_result(conn)
                .db()?;
            if known == 0 {
                diesel::insert_into(calls_in_flight::table)
                    .values((
                        calls_in_flight::id.eq(&id),
                        calls_in_flight::run_id.eq(run.to_string()),
                        calls_in_flight::started_ms.eq(now_ms()),
                    ))
                    .execute(conn)
                    .db()?;
            }
            Ok(())
        })
        .await
    }

    /// Forgets call `id`: it has ended (an unknown id changes nothing).
    pub async fn call_ended(&self, id: String) -> Result<(), StoreError> {
        self.write(move |conn| {
            diesel::delete(calls_in_flight::table.filter(calls_in_flight::id.eq(&id)))
                .execute(conn)
                .db()?;
            Ok(())
        })
        .await
    }

    /// How many calls of `of` are in flight.
    pub async fn calls_in_flight(&self, of: Vec<RunId>) -> Result<usize, StoreError> {
        self.with_conn(move |conn| {
            let mut total = 0;
            for chunk in of.chunks(CHUNK) {
                let ids: Vec<String> = chunk.iter().map(ToString::to_string).collect();
                let n: i64 = calls_in_flight::table
                    .filter(calls_in_flight::run_id.eq_any(&ids))
                    .count()
                    .get_result(conn)
                    .db()?;
                total += usize::try_from(n).unwrap_or(0);
            }
            Ok(total)
        })
        .await
    }

    /// Forgets the calls of runs that ended before `before_ms`: their fences
    /// have fallen, so their processes are dead whether or not they were ever
    /// recorded (a tool-exec that died mid-call records nothing). Returns how
    /// many were forgotten.
    pub async fn forget_calls_of_runs_ended_before(
        &self,
        before_ms: i64,
    ) -> Result<usize, StoreError> {
        self.write(move |conn| {
            let ended = runs::table
                .filter(runs::state.eq(RunState::Finished.as_str()))
                .filter(runs::finished_ms.lt(before_ms))
                .select(runs::id);
            diesel::delete(calls_in_flight::table.filter(calls_in_flight::run_id.eq_any(ended)))
                .execute(conn)
                .db()
        })
        .await
    }
}
