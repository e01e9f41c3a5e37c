//! The work queue of the Browser reconciles (`workqueue::WorkQueue`, pure) behind a lock:
//! keys added by the watches and by reconciles that asked to be looked at again, taken by
//! `--max-workers` workers as the lanes and their caps allow, and moved in by a timer when a
//! delayed key is due. A waiting Browser costs its key, nothing more.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::index::Key;
use crate::lifecycle::lane::Lane;
use crate::metrics::Metrics;
use crate::workqueue::WorkQueue;

pub struct Queue {
    workers: usize,
    state: Mutex<WorkQueue<Key, Instant>>,
    /// A worker may find work.
    work: Notify,
    /// A delayed key is due sooner than the timer sleeps.
    sooner: Notify,
    stopped: AtomicBool,
    metrics: Arc<Metrics>,
}

impl Queue {
    pub fn new(workers: usize, metrics: Arc<Metrics>) -> Self {
        let workers = workers.max(1);
        Self {
            workers,
            state: Mutex::new(WorkQueue::new(workers)),
            work: Notify::new(),
            sooner: Notify::new(),
            stopped: AtomicBool::new(false),
            metrics,
        }
    }

    /// `--max-workers`.
    pub fn workers(&self) -> usize {
        self.workers
    }

    fn state(&self) -> MutexGuard<'_, WorkQueue<Key, Instant>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Publishes how many keys wait in each lane; called under the lock, so that the gauges
    /// follow the order of the changes.
    fn count(&self, state: &WorkQueue<Key, Instant>) {
        for (lane, waiting) in Lane::ALL.into_iter().zip(state.waiting()) {
            self.metrics.waiting(lane, waiting);
        }
    }

    /// `key` needs a reconcile now, in `lane`.
    pub fn add(&self, key: Key, lane: Lane) {
        let mut state = self.state();
        state.add(key, lane);
        self.count(&state);
        drop(state);
        self.work.notify_one();
    }

    /// Adds every key of `keys`, each in its lane.
    pub fn add_all(&self, keys: impl IntoIterator<Item = (Key, Lane)>) {
        let mut state = self.state();
        for (key, lane) in keys {
            state.add(key, lane);
        }
        self.count(&state);
        drop(state);
        self.work.notify_one();
    }

    /// The next key a worker reconciles, with the lane it is counted in; `None` once the
    /// queue is stopped.
    pub async fn take(&self) -> Option<(Key, Lane)> {
        loop {
            let notified = self.work.notified();
            if self.stopped.load(Ordering::SeqCst) {
                return None;
            }
            let taken = {
                let mut state = self.state();
                let taken = state.take();
                let more = state.has_work();
                self.count(&state);
                taken.map(|work| (work, more))
            };
            if let Some((work, more)) = taken {
                // One wake-up may stand for several adds: pass it on.
                if more {
                    self.work.notify_one();
                }
                return Some(work);
            }
            notified.await;
        }
    }

    /// The reconcile of `key` is done; it is looked at again after `again`, if given.
    pub fn done(&self, key: &Key, again: Option<Duration>) {
        let mut state = self.state();
        let due_before = state.next_due();
        state.done(key, again.map(|wait| Instant::now() + wait));
        let sooner = state
            .next_due()
            .is_some_and(|due| due_before.is_none_or(|d| due < d));
        self.count(&state);
        drop(state);
        if sooner {
            self.sooner.notify_one();
        }
        // Its worker is free, and its lane has room again.
        self.work.notify_one();
    }

    /// Counts a failure of `key`'s reconcile; how long until it is tried again.
    pub fn backoff(&self, key: &Key) -> Duration {
        self.state().backoff(key)
    }

    /// `key`'s reconcile succeeded.
    pub fn forget(&self, key: &Key) {
        self.state().forget(key);
    }

    /// Every backoff starts anew.
    pub fn forget_all(&self) {
        self.state().forget_all();
    }

    /// Whether reconciles run or wait for a worker now.
    pub fn busy(&self) -> bool {
        let state = self.state();
        state.working() > 0 || state.waiting().iter().any(|&n| n > 0)
    }

    /// Takes no more work: workers waiting for some end.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.work.notify_waiters();
    }

    /// Moves delayed keys in as they come due, each in the lane `lane_of` says it needs then,
    /// until the queue stops.
    pub async fn run_timer(&self, lane_of: impl Fn(&Key) -> Lane) {
        while !self.stopped.load(Ordering::SeqCst) {
            let sooner = self.sooner.notified();
            let due = self.state().next_due();
            match due {
                Some(due) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(due.into()) => {}
                        () = sooner => continue,
                    }
                }
                None => {
                    sooner.await;
                    continue;
                }
            }
            let keys = self.state().due(Instant::now());
            self.add_all(keys.into_iter().map(|key| {
                let lane = lane_of(&key);
                (key, lane)
            }));
        }
    }
}
