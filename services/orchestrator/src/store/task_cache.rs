//! Tasks as last read, so that reading a task again costs no query (GetTask
//! is the call dashboards and clients poll).
//!
//! Only where this process is the only writer: SQLite, which serves one
//! orchestrator (enforced at start). With PostgreSQL another replica may have
//! changed a task a moment ago, and a reader sent there must see it: every
//! read goes to the database.
//!
//! Never stale: the functions that write a task row ([`touched`]: `save_task`,
//! `delete_task`) name it while their transaction runs, and when the call that
//! ran them ends, on the same thread, the task is dropped from the cache and
//! the cache's generation moves on. A read that missed stores what it read
//! only if no task was written since it began (the generation it saw before
//! its query is still current), so a row read before a commit is never kept
//! after it. A call's caller gets its answer only after the drop, so it reads
//! its own writes.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};

use crate::domain::{Task, TaskId};

/// How many bytes of tasks (descriptions, plans, reports) the cache holds at
/// most; past it the longest-held tasks are dropped.
pub(super) const CACHE_BYTES: usize = 16 * 1024 * 1024;

thread_local! {
    /// Tasks written by the store call running on this thread.
    static TOUCHED: RefCell<Vec<TaskId>> = const { RefCell::new(Vec::new()) };
}

/// Notes that the running store call writes `task`'s row.
pub(super) fn touched(task: TaskId) {
    TOUCHED.with(|t| t.borrow_mut().push(task));
}

/// The tasks written by the store call that just ended on this thread.
pub(super) fn take_touched() -> Vec<TaskId> {
    TOUCHED.with(|t| std::mem::take(&mut *t.borrow_mut()))
}

/// See the module documentation. Disabled ([`TaskCache::disabled`]) it
/// holds nothing and every read misses.
#[derive(Debug)]
pub(super) struct TaskCache {
    enabled: bool,
    limit: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Moves on with every write of a task.
    generation: u64,
    tasks: HashMap<TaskId, Entry>,
    /// Ids in the order they were stored, with the stamp they were stored
    /// under (a place whose task was dropped or stored again is skipped).
    order: VecDeque<(TaskId, u64)>,
    next_stamp: u64,
    bytes: usize,
}

#[derive(Debug)]
struct Entry {
    task: Task,
    bytes: usize,
    stamp: u64,
}

/// What a reader that missed saw before its query.
#[derive(Debug, Clone, Copy)]
pub(super) struct Generation(u64);

impl TaskCache {
    pub(super) fn enabled(limit: usize) -> Self {
        Self {
            enabled: true,
            limit,
            inner: Mutex::new(Inner::default()),
        }
    }

    pub(super) fn disabled() -> Self {
        Self {
            enabled: false,
            limit: 0,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// The task as last read, or the generation to pass to [`Self::store`]
    /// after reading it from the database.
    pub(super) fn get(&self, id: TaskId) -> Result<Task, Generation> {
        if !self.enabled {
            return Err(Generation(0));
        }
        let inner = self.lock();
        match inner.tasks.get(&id) {
            Some(entry) => Ok(entry.task.clone()),
            None => Err(Generation(inner.generation)),
        }
    }

    /// Keeps `task`, read from the database by a reader that saw `seen`,
    /// unless a task was written since.
    pub(super) fn store(&self, seen: Generation, task: &Task, bytes: usize) {
        if !self.enabled || bytes > self.limit {
            return;
        }
        let mut inner = self.lock();
        if inner.generation != seen.0 {
            return;
        }
        let stamp = inner.next_stamp;
        inner.next_stamp += 1;
        let entry = Entry {
            task: task.clone(),
            bytes,
            stamp,
        };
        if let Some(old) = inner.tasks.insert(task.id, entry) {
            inner.bytes -= old.bytes;
        }
        inner.bytes += bytes;
        inner.order.push_back((task.id, stamp));
        while inner.bytes > self.limit {
            let Some((oldest, stamp)) = inner.order.pop_front() else {
                break;
            };
            inner.drop_if(oldest, Some(stamp));
        }
        // Places of dropped tasks are skipped when reached; bound them.
        if inner.order.len() > 2 * inner.tasks.len() + 64 {
            let Inner { order, tasks, .. } = &mut *inner;
            order.retain(|(id, stamp)| tasks.get(id).is_some_and(|e| e.stamp == *stamp));
        }
    }

    /// Drops `written` (their rows changed or are gone) and moves the
    /// generation on. Called after the transaction that wrote them ended.
    pub(super) fn written(&self, written: &[TaskId]) {
        if !self.enabled || written.is_empty() {
            return;
        }
        let mut inner = self.lock();
        inner.generation += 1;
        for id in written {
            inner.drop_if(*id, None);
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Inner {
    /// Drops `id`'s task (only if it was stored under `stamp`, when given).
    fn drop_if(&mut self, id: TaskId, stamp: Option<u64>) {
        if let Some(entry) = self.tasks.get(&id)
            && stamp.is_none_or(|s| s == entry.stamp)
        {
            self.bytes -= entry.bytes;
            self.tasks.remove(&id);
        }
    }
}
