//! The workers reconciles wait for (`--max-workers`), granted by lane (`lifecycle::lane`):
//! a status a client waits on first, then Browsers without their pod, then the cleanup of
//! ended sessions, each lane first come first served and the lanes sharing the grants by
//! weight. A waiting reconcile's lane is judged again when its pod changes
//! ([`Workers::rejudge`]), so the grant goes by what the Browser needs now, not by what it
//! needed when it started waiting.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use crate::lifecycle::lane::{Lane, Turns};
use crate::metrics::Metrics;

/// A waiting reconcile's Browser: namespace and name.
pub type Key = (String, String);

/// A bounded number of workers, granted by lane.
pub struct Workers {
    total: usize,
    state: Mutex<State>,
    metrics: Arc<Metrics>,
}

#[derive(Default)]
struct State {
    free: usize,
    turns: Turns,
    /// Arrivals so far: a waiter's place in its lane, kept when it moves to another lane.
    arrivals: u64,
    /// Waiting reconciles of each lane (`Lane::index`), by arrival.
    lanes: [BTreeMap<u64, Waiter>; 3],
    /// Where each waiting Browser is.
    places: HashMap<Key, (Lane, u64)>,
}

struct Waiter {
    key: Key,
    grant: oneshot::Sender<()>,
}

impl State {
    /// Takes the waiter of `arrival` out of its lane.
    fn remove(&mut self, arrival: u64) -> Option<Waiter> {
        let waiter = self
            .lanes
            .iter_mut()
            .find_map(|lane| lane.remove(&arrival))?;
        if self
            .places
            .get(&waiter.key)
            .is_some_and(|&(_, a)| a == arrival)
        {
            self.places.remove(&waiter.key);
        }
        Some(waiter)
    }
}

/// A worker, given back when dropped.
pub struct Permit<'a> {
    workers: &'a Workers,
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.workers.release();
    }
}

/// A reconcile waiting for its grant. Dropped before the grant, it leaves its lane; dropped
/// after, the worker it was granted goes to the next.
struct Waiting<'a> {
    arrival: u64,
    grant: Option<oneshot::Receiver<()>>,
    workers: &'a Workers,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let Some(mut grant) = self.grant.take() else {
            return;
        };
        let mut state = self.workers.state();
        if state.remove(self.arrival).is_some() {
            self.workers.count(&state);
            return;
        }
        drop(state);
        grant.close();
        if grant.try_recv().is_ok() {
            self.workers.release();
        }
    }
}

impl Workers {
    pub fn new(workers: usize, metrics: Arc<Metrics>) -> Self {
        Self {
            total: workers.max(1),
            state: Mutex::new(State {
                free: workers.max(1),
                ..State::default()
            }),
            metrics,
        }
    }

    /// `--max-workers`.
    pub fn total(&self) -> usize {
        self.total
    }

    /// Publishes how many wait in each lane, under the state's lock so that the gauges
    /// follow the order of the changes.
    fn count(&self, state: &State) {
        for lane in Lane::ALL {
            self.metrics.waiting(lane, state.lanes[lane.index()].len());
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A free worker when nobody waits for one.
    fn take_free(&self, state: &mut State) -> Option<Permit<'_>> {
        if state.free > 0 && state.lanes.iter().all(BTreeMap::is_empty) {
            state.free -= 1;
            return Some(Permit { workers: self });
        }
        None
    }

    /// Waits for a worker for the reconcile of `key`, in the lane `lane` says; `lane` runs
    /// only when the reconcile must wait, outside the lock.
    pub async fn acquire(&self, key: Key, lane: impl FnOnce() -> Lane) -> Permit<'_> {
        if let Some(permit) = self.take_free(&mut self.state()) {
            return permit;
        }
        let lane = lane();
        let grant = {
            let mut state = self.state();
            if let Some(permit) = self.take_free(&mut state) {
                return permit;
            }
            let (grant, granted) = oneshot::channel();
            let arrival = state.arrivals;
            state.arrivals += 1;
            // One reconcile per Browser runs at a time; should a second wait all the same,
            // only the first is judged again.
            state.places.entry(key.clone()).or_insert((lane, arrival));
            state.lanes[lane.index()].insert(arrival, Waiter { key, grant });
            self.count(&state);
            (arrival, granted)
        };
        let (arrival, grant) = grant;
        let mut waiting = Waiting {
            arrival,
            grant: Some(grant),
            workers: self,
        };
        if let Some(grant) = waiting.grant.as_mut() {
            // The sender lives in `self`, which outlives this wait: only a grant ends it.
            let _ = grant.await;
        }
        waiting.grant = None;
        Permit { workers: self }
    }

    /// Whether the reconcile of `key` waits for a worker (then [`Workers::rejudge`] is worth
    /// its lane's computation).
    pub fn is_waiting(&self, key: &Key) -> bool {
        self.state().places.contains_key(key)
    }

    /// Moves the waiting reconcile of `key`, if any, to `lane`, keeping its arrival.
    pub fn rejudge(&self, key: &Key, lane: Lane) {
        let mut state = self.state();
        let Some(&(was, arrival)) = state.places.get(key) else {
            return;
        };
        if was == lane {
            return;
        }
        if let Some(waiter) = state.lanes[was.index()].remove(&arrival) {
            state.lanes[lane.index()].insert(arrival, waiter);
            state.places.insert(key.clone(), (lane, arrival));
            self.count(&state);
        }
    }

    /// A worker is free: the next waiting reconcile gets it, or it is kept.
    fn release(&self) {
        let mut state = self.state();
        loop {
            let waiting = Lane::ALL.map(|lane| !state.lanes[lane.index()].is_empty());
            let Some(lane) = state.turns.next(waiting) else {
                state.free += 1;
                return;
            };
            let Some((arrival, waiter)) = state.lanes[lane.index()].pop_first() else {
                state.free += 1;
                return;
            };
            if state
                .places
                .get(&waiter.key)
                .is_some_and(|&(_, a)| a == arrival)
            {
                state.places.remove(&waiter.key);
            }
            self.count(&state);
            // A waiter that gave up is skipped.
            if waiter.grant.send(()).is_ok() {
                return;
            }
        }
    }

    /// Reconciles waiting now, by lane.
    #[cfg(test)]
    fn waiting(&self) -> [usize; 3] {
        let state = self.state();
        Lane::ALL.map(|lane| state.lanes[lane.index()].len())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    type Order = Arc<Mutex<Vec<&'static str>>>;

    /// Starts a reconcile of the Browser `name` in `lane` that records when it got a worker
    /// and holds it until told to stop.
    fn start(
        workers: &Arc<Workers>,
        lane: Lane,
        name: &'static str,
        order: &Order,
    ) -> (tokio::task::JoinHandle<()>, oneshot::Sender<()>) {
        let (done, finished) = oneshot::channel::<()>();
        let (workers, order) = (workers.clone(), order.clone());
        let task = tokio::spawn(async move {
            let _permit = workers.acquire(key(name), || lane).await;
            order.lock().unwrap().push(name);
            let _ = finished.await;
        });
        (task, done)
    }

    fn key(name: &str) -> Key {
        ("ns".to_string(), name.to_string())
    }

    async fn until(what: &str, check: impl Fn() -> bool) {
        for _ in 0..1000 {
            if check() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        panic!("{what}");
    }

    /// One worker, held by `busy`; `queue` waits behind it in that order. `before_release`
    /// runs once all wait. Returns the order in which all got the worker.
    async fn served(
        queue: &[(Lane, &'static str)],
        before_release: impl FnOnce(&Workers),
    ) -> Vec<&'static str> {
        let workers = Arc::new(Workers::new(1, Arc::default()));
        let order = Order::default();
        let (first, stop_first) = start(&workers, Lane::Create, "busy", &order);
        until("the first runs", || order.lock().unwrap().len() == 1).await;
        let mut stops = HashMap::new();
        let mut tasks = Vec::new();
        for &(lane, name) in queue {
            let (task, stop) = start(&workers, lane, name, &order);
            tasks.push(task);
            stops.insert(name, stop);
            let queued = tasks.len();
            until("queued", || {
                workers.waiting().iter().sum::<usize>() == queued
            })
            .await;
        }
        before_release(&workers);
        let _ = stop_first.send(());
        first.await.unwrap();
        for ran in 2..=queue.len() + 1 {
            until("the next runs", || order.lock().unwrap().len() == ran).await;
            let running = *order.lock().unwrap().last().unwrap();
            let _ = stops.remove(running).unwrap().send(());
        }
        for task in tasks {
            task.await.unwrap();
        }
        order.lock().unwrap().clone()
    }

    #[tokio::test]
    async fn a_status_a_client_waits_on_goes_before_creations_and_cleanup() {
        let queue = [
            (Lane::Cleanup, "cleanup"),
            (Lane::Create, "create-1"),
            (Lane::Status, "status"),
            (Lane::Create, "create-2"),
        ];
        assert_eq!(
            served(&queue, |_| {}).await,
            ["busy", "status", "create-1", "create-2", "cleanup"]
        );
    }

    #[tokio::test]
    async fn a_waiting_creation_whose_pod_runs_moves_up_keeping_its_arrival() {
        let queue = [
            (Lane::Create, "create-1"),
            (Lane::Create, "pod-runs"),
            (Lane::Create, "create-2"),
            (Lane::Status, "status"),
        ];
        let order = served(&queue, |workers| {
            workers.rejudge(&key("pod-runs"), Lane::Status);
            // Not waiting: nothing to move.
            workers.rejudge(&key("busy"), Lane::Cleanup);
            assert_eq!(workers.waiting(), [2, 2, 0]);
        })
        .await;
        assert_eq!(
            order,
            ["busy", "pod-runs", "status", "create-1", "create-2"]
        );
    }

    #[tokio::test]
    async fn the_lane_is_judged_only_when_the_reconcile_must_wait() {
        let workers = Arc::new(Workers::new(1, Arc::default()));
        let judged = Arc::new(Mutex::new(Vec::new()));
        let judge = |name: &'static str, lane: Lane| {
            let judged = judged.clone();
            move || {
                judged.lock().unwrap().push(name);
                lane
            }
        };
        let held = workers
            .acquire(key("free"), judge("free", Lane::Create))
            .await;
        let waiter = {
            let (workers, judge) = (workers.clone(), judge("waits", Lane::Status));
            tokio::spawn(async move {
                let _permit = workers.acquire(key("waits"), judge).await;
            })
        };
        until("queued", || workers.waiting() == [1, 0, 0]).await;
        drop(held);
        waiter.await.unwrap();
        assert_eq!(*judged.lock().unwrap(), ["waits"]);
    }

    #[tokio::test]
    async fn a_waiter_that_gives_up_does_not_keep_a_worker_or_its_place() {
        let metrics = Arc::new(Metrics::new());
        let workers = Arc::new(Workers::new(1, metrics.clone()));
        let held = workers.acquire(key("held"), || Lane::Create).await;
        let gave_up = {
            let workers = workers.clone();
            tokio::spawn(async move {
                let _permit = workers.acquire(key("gives-up"), || Lane::Status).await;
            })
        };
        until("queued", || workers.waiting() == [1, 0, 0]).await;
        assert!(workers.is_waiting(&key("gives-up")));
        let gauge = |text: &str| {
            text.lines()
                .find(|l| l.starts_with("browser_controller_reconciles_waiting{lane=\"status\"}"))
                .map(str::to_string)
        };
        assert_eq!(
            gauge(&metrics.encode().unwrap()).as_deref(),
            Some("browser_controller_reconciles_waiting{lane=\"status\"} 1")
        );
        gave_up.abort();
        let _ = gave_up.await;
        assert_eq!(workers.waiting(), [0, 0, 0]);
        assert!(!workers.is_waiting(&key("gives-up")));
        assert_eq!(
            gauge(&metrics.encode().unwrap()).as_deref(),
            Some("browser_controller_reconciles_waiting{lane=\"status\"} 0")
        );
        drop(held);
        // The worker is free again: taken at once.
        let again = tokio::time::timeout(
            Duration::from_secs(1),
            workers.acquire(key("next"), || Lane::Cleanup),
        )
        .await
        .expect("a worker is free");
        drop(again);
    }
}
