//! The lease writes' own thread. A heartbeat that went through tokio's
//! blocking pool would wait in its queue behind every database call the
//! replica's runs make: a replica that admitted a thousand runs at once
//! could not renew its leases, its fence would fall, and the load it took on
//! would stop every run it drives. On a thread of their own, with a
//! connection of their own, lease writes wait for nothing but the database.

use std::panic::AssertUnwindSafe;
use std::sync::mpsc;

use super::StoreError;
use super::connection::{AnyConnection, ConnectionPool};

type Job = Box<dyn FnOnce(&ConnectionPool) + Send>;

/// A thread that runs lease writes one after the other on its pool's
/// connection; it ends when the last handle goes.
#[derive(Debug)]
pub(super) struct LeaseThread {
    jobs: mpsc::Sender<Job>,
}

impl LeaseThread {
    /// Starts the thread with `pool` (of one connection).
    pub(super) fn start(pool: ConnectionPool) -> std::io::Result<Self> {
        let (jobs, queue) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("chorus-leases".into())
            .spawn(move || {
                for job in queue {
                    job(&pool);
                }
            })?;
        Ok(Self { jobs })
    }

    /// Runs `f` on the lease connection and returns its result. A panic in
    /// `f` is resumed here (it is a bug, not a database error).
    pub(super) async fn run<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut AnyConnection) -> Result<T, StoreError> + Send + 'static,
    {
        let (answer, answered) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move |pool| {
            let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
                let mut session = pool.get().map_err(|e| {
                    StoreError::Database(format!("no database connection for the leases: {e}"))
                })?;
                session.run(f)
            }));
            let _ = answer.send(result);
        });
        self.jobs
            .send(job)
            .map_err(|_| StoreError::Database("the lease thread has stopped".into()))?;
        match answered.await {
            Ok(Ok(result)) => result,
            Ok(Err(panic)) => std::panic::resume_unwind(panic),
            Err(_) => Err(StoreError::Database(
                "the lease thread stopped before it answered".into(),
            )),
        }
    }
}
