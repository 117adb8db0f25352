//! Replicas and run leases: which orchestrator process drives each run.
//!
//! Every run a replica drives carries the replica's id and a lease expiry; the
//! replica's heartbeat extends the leases of the runs it still drives, in one
//! statement. A run whose lease ran out belongs to a replica that died, lost
//! the database or shut down: a live replica claims it (resumes it, or
//! records it interrupted) in one transaction under its task's lock, so two
//! replicas never both take it. A claim bumps the run's epoch; each driver
//! writes only as the epoch it started with, so a replica that lost a run
//! writes nothing more for it.

use std::time::Duration;

use diesel::prelude::*;

use super::connection::AnyConnection;
use super::rows::RunRow;
use super::schema::{replicas, runs};
use super::tasks::{EventDraft, lock_task, notify_task, save_task};
use super::{Db, Store, StoreError};
use crate::domain::{DomainError, Event, Run, RunId, RunState, Task, TaskId, fence_span, now_ms};

/// Which replica this process is.
#[derive(Debug, Clone)]
pub struct ReplicaIdentity {
    /// Stable across restarts of the same replica (`--replica-id`).
    pub id: String,
    /// This process: a new one at every start.
    pub instance: String,
    /// How long a lease lasts without a heartbeat.
    pub lease: Duration,
}

impl ReplicaIdentity {
    /// The replica `id`, as a new process, with leases of `lease`.
    pub fn new(id: impl Into<String>, lease: Duration) -> Self {
        Self {
            id: id.into(),
            instance: uuid::Uuid::new_v4().to_string(),
            lease,
        }
    }
}

impl Default for ReplicaIdentity {
    fn default() -> Self {
        Self::new("local", Duration::from_secs(30))
    }
}

/// A replica as the database knows it.
#[derive(Debug, Clone, PartialEq, Eq, Queryable, Selectable)]
#[diesel(table_name = replicas)]
pub struct ReplicaRecord {
    pub id: String,
    pub instance: String,
    pub started_ms: i64,
    pub heartbeat_ms: i64,
    pub lease_expires_ms: i64,
    pub stopped_ms: Option<i64>,
}

impl ReplicaRecord {
    /// Whether it heartbeats (its lease holds at `now`) and has not stopped.
    pub fn is_live(&self, now: i64) -> bool {
        self.stopped_ms.is_none() && self.lease_expires_ms >= now
    }

    /// Whether its fence has fallen by `now` (by the clock of its host): it
    /// stopped, or its last heartbeat is older than the fence's span
    /// ([`fence_span`] of the lease that heartbeat wrote; each heartbeat
    /// began before the time it writes, so the fence fell by then or
    /// sooner).
    pub fn fence_fallen(&self, now: i64) -> bool {
        let lease = self
            .lease_expires_ms
            .saturating_sub(self.heartbeat_ms)
            .max(0);
        let span = fence_span(std::time::Duration::from_millis(lease.unsigned_abs()));
        let span = i64::try_from(span.as_millis()).unwrap_or(i64::MAX);
        self.stopped_ms.is_some() || now >= self.heartbeat_ms.saturating_add(span)
    }
}

/// What a heartbeat found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Heartbeat {
    /// Runs this replica was driving that it drives no more: ended by someone
    /// else, or taken over. Their processes must stop; nothing more of theirs
    /// is recorded.
    pub lost: Vec<RunId>,
}

/// How a claim treats the runs it took: what [`Store::claim_runs`]'s closure
/// gets besides the task.
#[derive(Debug)]
pub struct Claim<'a> {
    /// The task's unfinished runs, oldest first.
    pub runs: &'a mut [Run],
    /// Which of them were claimed (their lease ran out); the closure changes
    /// only those (and what ending them takes with them).
    pub claimed: Vec<RunId>,
    /// The claiming replica.
    pub replica: &'a str,
}

/// The PostgreSQL channel on which a replica says it handed runs on (it is
/// shutting down): the others claim them at once.
pub const HANDED_ON_CHANNEL: &str = "chorus_handed_on";

/// Most ids per `IN (...)` list.
pub(super) const CHUNK: usize = 500;

impl Store {
    /// Records this process as its replica: a replica row with this instance,
    /// a fresh heartbeat and no stop. The caller holds the replica's lock (a
    /// PostgreSQL advisory lock, a lock file for SQLite): no other live
    /// process has the same id.
    pub async fn register_replica(&self) -> Result<(), StoreError> {
        let me = self.replica.as_ref().clone();
        let lease_end = self.lease_end();
        self.write_lease(move |conn| {
            let now = now_ms();
            let updated = diesel::update(replicas::table.find(&me.id))
                .set((
                    replicas::instance.eq(&me.instance),
                    replicas::started_ms.eq(now),
                    replicas::heartbeat_ms.eq(now),
                    replicas::lease_expires_ms.eq(lease_end),
                    replicas::stopped_ms.eq(None::<i64>),
                ))
                .execute(conn)
                .db()?;
            // Replicas gone for a day that hold no run are forgotten (a
            // Deployment's pods get new names at every rollout).
            let gone = now - 24 * 60 * 60 * 1000;
            let holding: Vec<Option<String>> = runs::table
                .filter(runs::replica.is_not_null())
                .select(runs::replica)
                .distinct()
                .load(conn)
                .db()?;
            let holding: Vec<String> = holding.into_iter().flatten().collect();
            diesel::delete(
                replicas::table
                    .filter(replicas::lease_expires_ms.lt(gone))
                    .filter(replicas::id.ne_all(&holding)),
            )
            .execute(conn)
            .db()?;
            if updated == 0 {
                diesel::insert_into(replicas::table)
                    .values((
                        replicas::id.eq(&me.id),
                        replicas::instance.eq(&me.instance),
                        replicas::started_ms.eq(now),
                        replicas::heartbeat_ms.eq(now),
                        replicas::lease_expires_ms.eq(lease_end),
                    ))
                    .execute(conn)
                    .db()?;
            }
            Ok(())
        })
        .await
    }

    /// Extends this replica's lease and those of `live` (the runs it drives,
    /// with the epoch each driver writes as), in one transaction, and says
    /// which of them it drives no more.
    ///
    /// # Errors
    /// [`StoreError::ReplicaTaken`] when another process holds this replica's
    /// row now; database errors.
    pub async fn heartbeat(&self, live: Vec<(RunId, u32)>) -> Result<Heartbeat, StoreError> {
        let me = self.replica.as_ref().clone();
        let lease_end = self.lease_end();
        self.write_lease(move |conn| {
            let now = now_ms();
            let updated = diesel::update(
                replicas::table
                    .filter(replicas::id.eq(&me.id))
                    .filter(replicas::instance.eq(&me.instance)),
            )
            .set((
                replicas::heartbeat_ms.eq(now),
                replicas::lease_expires_ms.eq(lease_end),
            ))
            .execute(conn)
            .db()?;
            if updated == 0 {
                return Err(StoreError::ReplicaTaken { id: me.id.clone() });
            }
            let mut lost = Vec::new();
            for chunk in live.chunks(CHUNK) {
                let ids: Vec<String> = chunk.iter().map(|(id, _)| id.to_string()).collect();
                extend_leases(conn, &ids, &me.id, lease_end)?;
                let rows: Vec<(String, Option<String>, i64, String)> = runs::table
                    .filter(runs::id.eq_any(&ids))
                    .select((runs::id, runs::replica, runs::epoch, runs::state))
                    .load(conn)
                    .db()?;
                for (id, epoch) in chunk {
                    let key = id.to_string();
                    let mine = rows.iter().any(|(row_id, replica, row_epoch, state)| {
                        *row_id == key
                            && replica.as_deref() == Some(me.id.as_str())
                            && *row_epoch == i64::from(*epoch)
                            && state != RunState::Finished.as_str()
                    });
                    if !mine {
                        lost.push(*id);
                    }
                }
            }
            Ok(Heartbeat { lost })
        })
        .await
    }

    /// Ends the leases of `runs` (with the epochs their drivers wrote as) now,
    /// so a live replica claims them at once (a replica shutting down hands
    /// its runs on); each of their tasks is announced as changed.
    pub async fn release_runs(&self, runs_to_release: Vec<(RunId, u32)>) -> Result<(), StoreError> {
        let me = self.replica.id.clone();
        self.write(move |conn| {
            for (id, epoch) in runs_to_release {
                let task: Option<String> = runs::table
                    .find(id.to_string())
                    .filter(runs::replica.eq(&me))
                    .filter(runs::epoch.eq(i64::from(epoch)))
                    .select(runs::task_id)
                    .first(conn)
                    .optional()
                    .db()?;
                let Some(task) = task else { continue };
                diesel::update(runs::table.find(id.to_string()))
                    .set(runs::lease_expires_ms.eq(0_i64))
                    .execute(conn)
                    .db()?;
                if let Ok(task) = TaskId::parse(&task) {
                    notify_task(conn, task, 0)?;
                }
                if let AnyConnection::Pg(c) = conn {
                    diesel::sql_query(format!("NOTIFY {HANDED_ON_CHANNEL}"))
                        .execute(c)
                        .db()?;
                }
            }
            Ok(())
        })
        .await
    }

    /// Records that this replica stopped (its lease ends now).
    pub async fn stop_replica(&self) -> Result<(), StoreError> {
        let me = self.replica.as_ref().clone();
        self.write(move |conn| {
            let now = now_ms();
            diesel::update(
                replicas::table
                    .filter(replicas::id.eq(&me.id))
                    .filter(replicas::instance.eq(&me.instance)),
            )
            .set((
                replicas::stopped_ms.eq(Some(now)),
                replicas::lease_expires_ms.eq(now),
            ))
            .execute(conn)
            .db()?;
            Ok(())
        })
        .await
    }

    /// Every replica the database knows, by id.
    pub async fn list_replicas(&self) -> Result<Vec<ReplicaRecord>, StoreError> {
        self.with_conn(|conn| {
            replicas::table
                .select(ReplicaRecord::as_select())
                .order(replicas::id.asc())
                .load(conn)
                .db()
        })
        .await
    }

    /// The runs whose lease ran out — and, with `own`, every run leased to
    /// this replica id (at start-up: an earlier process of this replica left
    /// them, and it is gone since this one holds the replica's lock) — by
    /// task, oldest first. Ended ones are among them when their replica never
    /// released them.
    pub async fn claimable_runs(&self, own: bool) -> Result<Vec<(TaskId, Vec<Run>)>, StoreError> {
        let me = self.replica.id.clone();
        self.with_conn(move |conn| {
            let now = now_ms();
            let mut query = runs::table.filter(runs::replica.is_not_null()).into_boxed();
            query = if own {
                query.filter(
                    runs::lease_expires_ms
                        .lt(now)
                        .or(runs::lease_expires_ms.is_null())
                        .or(runs::replica.eq(me)),
                )
            } else {
                // A leased run always has a lease end (index `runs_leased`).
                query.filter(runs::lease_expires_ms.lt(now))
            };
            let rows: Vec<RunRow> = query
                .select(RunRow::as_select())
                .order((runs::task_id.asc(), runs::started_ms.asc(), runs::id.asc()))
                .load(conn)
                .db()?;
            let mut by_task: Vec<(TaskId, Vec<Run>)> = Vec::new();
            for row in rows {
                let run = row.into_domain()?;
                match by_task.last_mut() {
                    Some((task, runs)) if *task == run.task_id => runs.push(run),
                    _ => by_task.push((run.task_id, vec![run])),
                }
            }
            Ok(by_task)
        })
        .await
    }

    /// Claims those of `candidates` (runs of the task) whose lease ran out
    /// (with `own`, also those leased to this replica id), in one transaction
    /// under the task's lock:
    /// ended ones are only released (their processes died with their
    /// replica); `f` decides what happens to the unfinished ones it is given
    /// as claimed — resumed (it sets their replica to this one and bumps
    /// their epoch: they are leased from now) or ended. Nothing is written
    /// when `f` fails; nothing is claimed when another replica got there
    /// first. Returns the task, the claimed runs as saved, and the events.
    pub async fn claim_runs<F>(
        &self,
        task_id: TaskId,
        own: bool,
        candidates: Vec<RunId>,
        f: F,
    ) -> Result<(Task, Vec<Run>, Vec<Event>), StoreError>
    where
        F: FnOnce(&mut Task, Claim<'_>) -> Result<Vec<EventDraft>, DomainError> + Send + 'static,
    {
        let me = self.replica.id.clone();
        let lease_end = self.lease_end();
        self.write_events(move |conn| {
            // A task another session holds locked (a replica paused or cut
            // mid-write) is claimed at a later round; the others now.
            if let AnyConnection::Pg(c) = conn {
                diesel::sql_query(format!("SET LOCAL lock_timeout = {CLAIM_LOCK_WAIT_MS}"))
                    .execute(c)
                    .db()?;
            }
            let before_task = lock_task(conn, task_id)?;
            let claimed = lapsed_runs(conn, task_id, own.then_some(me.as_str()), &candidates)?;
            if claimed.is_empty() {
                return Ok((before_task, Vec::new(), Vec::new()));
            }
            let before_runs = super::runs::load_unfinished(conn, Some(task_id))?;
            let mut task = before_task.clone();
            let mut changed = before_runs.clone();
            let drafts = f(
                &mut task,
                Claim {
                    runs: &mut changed,
                    claimed: claimed.clone(),
                    replica: &me,
                },
            )?;
            let saved = save_claimed(conn, &before_runs, &changed, &claimed, &me, lease_end)?;
            let events = save_task(conn, &before_task, &mut task, drafts)?;
            Ok((task, saved, events))
        })
        .await
    }
}

/// How long a claim waits for its task's lock before it leaves the task to
/// a later round.
const CLAIM_LOCK_WAIT_MS: u64 = 500;

/// Extends the leases of the runs `ids` that replica `me` holds to
/// `lease_end`. On PostgreSQL a run whose row another transaction holds
/// locked is passed over (its lease is extended at the next heartbeat, a
/// third of a lease later): a heartbeat never waits for another session,
/// which may be a paused or cut replica's.
fn extend_leases(
    conn: &mut AnyConnection,
    ids: &[String],
    me: &str,
    lease_end: i64,
) -> Result<(), StoreError> {
    let unfinished = RunState::Finished.as_str();
    match conn {
        AnyConnection::Pg(c) => {
            use diesel::sql_types::{Array, BigInt, Text};
            diesel::sql_query(
                "UPDATE runs SET lease_expires_ms = $1 WHERE id IN \
                 (SELECT id FROM runs WHERE id = ANY($2) AND replica = $3 AND state <> $4 \
                 FOR UPDATE SKIP LOCKED)",
            )
            .bind::<BigInt, _>(lease_end)
            .bind::<Array<Text>, _>(ids)
            .bind::<Text, _>(me)
            .bind::<Text, _>(unfinished)
            .execute(c)
            .db()?;
        }
        AnyConnection::Sqlite(_) => {
            diesel::update(
                runs::table
                    .filter(runs::id.eq_any(ids))
                    .filter(runs::replica.eq(me))
                    .filter(runs::state.ne(unfinished)),
            )
            .set(runs::lease_expires_ms.eq(lease_end))
            .execute(conn)
            .db()?;
        }
    }
    Ok(())
}

/// Drops an ended run's replica and lease: nothing of it runs anywhere.
fn release_ended(conn: &mut AnyConnection, run: &str) -> Result<(), StoreError> {
    diesel::update(runs::table.find(run))
        .set((
            runs::replica.eq(None::<String>),
            runs::lease_expires_ms.eq(None::<i64>),
        ))
        .execute(conn)
        .db()?;
    Ok(())
}

/// The candidates among the task's leased runs whose lease ran out (or, with
/// `own`, that this replica id held before): ended ones are released here;
/// the ids of the others, to be claimed.
fn lapsed_runs(
    conn: &mut AnyConnection,
    task_id: TaskId,
    own: Option<&str>,
    candidates: &[RunId],
) -> Result<Vec<RunId>, StoreError> {
    let now = now_ms();
    let leased: Vec<RunRow> = runs::table
        .filter(runs::task_id.eq(task_id.to_string()))
        .filter(runs::replica.is_not_null())
        .select(RunRow::as_select())
        .order((runs::started_ms.asc(), runs::id.asc()))
        .load(conn)
        .db()?;
    let over = |row: &RunRow| {
        (row.lease_expires_ms.is_none_or(|end| end < now)
            || (own.is_some() && row.replica.as_deref() == own))
            && candidates.iter().any(|c| c.to_string() == row.id)
    };
    let mut claimed = Vec::new();
    for row in leased.into_iter().filter(over) {
        if row.state == RunState::Finished.as_str() {
            release_ended(conn, &row.id)?;
            notify_task(conn, task_id, 0)?;
        } else {
            claimed.push(row.into_domain()?.id);
        }
    }
    Ok(claimed)
}

/// Saves the runs `f` changed; the claimed ones are released when they
/// ended, or resumed here (a new driver, a new epoch, a fresh lease until
/// `lease_end`). The claimed runs, as saved.
fn save_claimed(
    conn: &mut AnyConnection,
    before_runs: &[Run],
    changed: &[Run],
    claimed: &[RunId],
    me: &str,
    lease_end: i64,
) -> Result<Vec<Run>, StoreError> {
    let mut saved = Vec::new();
    for (before, run) in before_runs.iter().zip(changed) {
        let is_claimed = claimed.contains(&run.id);
        if is_claimed && run.state != RunState::Finished {
            // Resumed here: a new driver, a new epoch, a fresh lease.
            if run.replica.as_deref() != Some(me) || run.epoch <= before.epoch {
                return Err(DomainError::Transition(format!(
                    "run {} was claimed but neither ended nor taken over",
                    run.id
                ))
                .into());
            }
        }
        let run = super::runs::save_run(conn, before, run)?;
        if is_claimed {
            if run.state == RunState::Finished {
                release_ended(conn, &run.id.to_string())?;
            } else {
                diesel::update(runs::table.find(run.id.to_string()))
                    .set(runs::lease_expires_ms.eq(lease_end))
                    .execute(conn)
                    .db()?;
            }
            saved.push(run);
        }
    }
    Ok(saved)
}

#[cfg(test)]
mod tests {
    use super::ReplicaRecord;

    fn replica(heartbeat_ms: i64, lease_expires_ms: i64) -> ReplicaRecord {
        ReplicaRecord {
            id: "r0".to_owned(),
            instance: "i".to_owned(),
            started_ms: 0,
            heartbeat_ms,
            lease_expires_ms,
            stopped_ms: None,
        }
    }

    #[test]
    fn a_replicas_fence_falls_two_thirds_of_a_lease_after_its_last_heartbeat() {
        // A 3 s lease written at 10 s: the fence it held falls by 12 s.
        let r = replica(10_000, 13_000);
        assert!(!r.fence_fallen(10_000));
        assert!(!r.fence_fallen(11_999));
        assert!(r.fence_fallen(12_000));
        // And it stays down until another heartbeat.
        assert!(r.fence_fallen(13_000));
    }

    #[test]
    fn a_stopped_replica_has_no_fence() {
        let mut r = replica(10_000, 13_000);
        r.stopped_ms = Some(10_500);
        assert!(r.fence_fallen(10_600));
    }
}
