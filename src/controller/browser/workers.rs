//! The workers reconciles wait for (`--max-workers`), granted by lane (`lifecycle::lane`):
//! a status a client waits on first, then Browsers without their pod, then the cleanup of
//! ended sessions, each lane first come first served and the lanes sharing the grants by
//! weight. A waiting reconcile's lane is judged again when its pod changes
//! ([`Workers::rejudge`]), so the grant goes by what the Browser needs now, not by what it
//! needed when it started waiting.
//!
//! Creations hold at most a quarter of the workers and cleanups an eighth: the API server works
//! on every write at once, so a status write sent behind a hundred creations waits for all of
//! them, and a server short of CPU closes the watches it cannot feed; the fewer cleanups leave
//! the server to creations while sessions end. The rest of the workers stay for statuses, which
//! therefore rarely wait for one.

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
    /// Workers each lane may hold at once (`Lane::index`).
    caps: [usize; 3],
    state: Mutex<State>,
    metrics: Arc<Metrics>,
}

#[derive(Default)]
struct State {
    /// Workers held, by lane.
    held: [usize; 3],
    /// Workers taken while the pool was far from any cap, without judging the lane; each
    /// counts against every capped lane until given back.
    unjudged: usize,
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
    /// Sends the lane the worker is counted in.
    grant: oneshot::Sender<Lane>,
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
    /// `None`: taken without judging the lane.
    lane: Option<Lane>,
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.workers.release(self.lane);
    }
}

/// A reconcile waiting for its grant. Dropped before the grant, it leaves its lane; dropped
/// after, the worker it was granted goes to the next.
struct Waiting<'a> {
    arrival: u64,
    grant: Option<oneshot::Receiver<Lane>>,
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
        if let Ok(lane) = grant.try_recv() {
            self.workers.release(Some(lane));
        }
    }
}

impl Workers {
    pub fn new(workers: usize, metrics: Arc<Metrics>) -> Self {
        let total = workers.max(1);
        Self {
            total,
            caps: [total, (total / 4).max(1), (total / 8).max(1)],
            state: Mutex::new(State::default()),
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

    /// Workers nobody holds.
    fn free(&self, state: &State) -> usize {
        self.total
            .saturating_sub(state.unjudged + state.held.iter().sum::<usize>())
    }

    /// Whether a worker of `lane` may be taken now.
    fn fits(&self, state: &State, lane: Lane) -> bool {
        let i = lane.index();
        self.free(state) > 0 && state.unjudged + state.held[i] < self.caps[i]
    }

    /// Whether a worker may be taken without judging its lane: it fits every lane.
    fn fits_every(&self, state: &State) -> bool {
        state.lanes.iter().all(BTreeMap::is_empty) && Lane::ALL.iter().all(|&l| self.fits(state, l))
    }

    /// Waits for a worker for the reconcile of `key`, in the lane `lane` says; `lane` runs
    /// only when the pool is busy enough for the lane to matter, outside the lock.
    pub async fn acquire(&self, key: Key, lane: impl FnOnce() -> Lane) -> Permit<'_> {
        {
            let mut state = self.state();
            if self.fits_every(&state) {
                state.unjudged += 1;
                return Permit {
                    workers: self,
                    lane: None,
                };
            }
        }
        let lane = lane();
        let grant = {
            let mut state = self.state();
            // Nobody that fits waits: `dispatch` grants every waiter that fits at once.
            if self.fits(&state, lane) && state.lanes[lane.index()].is_empty() {
                state.held[lane.index()] += 1;
                return Permit {
                    workers: self,
                    lane: Some(lane),
                };
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
        let mut granted = lane;
        if let Some(grant) = waiting.grant.as_mut() {
            // The sender lives in `self`, which outlives this wait, and leaves it only as a
            // grant: the wait ends with one.
            if let Ok(lane) = grant.await {
                granted = lane;
            }
        }
        waiting.grant = None;
        Permit {
            workers: self,
            lane: Some(granted),
        }
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
            // Its new lane may have room where the old one had none.
            self.dispatch(&mut state);
            self.count(&state);
        }
    }

    /// A worker of `lane` is given back.
    fn release(&self, lane: Option<Lane>) {
        let mut state = self.state();
        let held = match lane {
            Some(lane) => &mut state.held[lane.index()],
            None => &mut state.unjudged,
        };
        *held = held.saturating_sub(1);
        self.dispatch(&mut state);
        self.count(&state);
    }

    /// Grants free workers to waiting reconciles whose lane has room, lanes by turn.
    fn dispatch(&self, state: &mut State) {
        loop {
            let open = Lane::ALL
                .map(|lane| !state.lanes[lane.index()].is_empty() && self.fits(state, lane));
            let Some(lane) = state.turns.next(open) else {
                return;
            };
            let Some((arrival, waiter)) = state.lanes[lane.index()].pop_first() else {
                return;
            };
            if state
                .places
                .get(&waiter.key)
                .is_some_and(|&(_, a)| a == arrival)
            {
                state.places.remove(&waiter.key);
            }
            // A waiter that gave up is skipped.
            if waiter.grant.send(lane).is_ok() {
                state.held[lane.index()] += 1;
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
    async fn creations_hold_a_quarter_of_the_workers_cleanups_an_eighth_statuses_the_rest() {
        let workers = Arc::new(Workers::new(8, Arc::default()));
        let order = Order::default();
        let mut running = Vec::new();
        let runs = |n: usize| {
            let order = order.clone();
            move || order.lock().unwrap().len() == n
        };
        // Two creations: the first takes a worker without judging its lane, far from any cap;
        // the second is judged, as the first counts against the cleanups' one worker.
        for name in ["create-1", "create-2"] {
            running.push(start(&workers, Lane::Create, name, &order));
        }
        until("two creations run", runs(2)).await;
        // A third creation waits with six workers free, and so does a cleanup: the unjudged
        // first counts against its lane too.
        let create_3 = start(&workers, Lane::Create, "create-3", &order);
        until("a creation waits", || workers.waiting() == [0, 1, 0]).await;
        let cleanup = start(&workers, Lane::Cleanup, "cleanup", &order);
        until("a cleanup waits", || workers.waiting() == [0, 1, 1]).await;
        // Statuses take the six others at once.
        for (i, name) in ["s-1", "s-2", "s-3", "s-4", "s-5", "s-6"]
            .into_iter()
            .enumerate()
        {
            running.push(start(&workers, Lane::Status, name, &order));
            until("a status runs", runs(3 + i)).await;
        }
        assert_eq!(workers.waiting(), [0, 1, 1]);
        // The first creation ends: its worker goes to the waiting creation, none is left for
        // the cleanup, whose lane now has room.
        let (task, stop) = running.remove(0);
        let _ = stop.send(());
        task.await.unwrap();
        until("the third creation runs", runs(9)).await;
        assert_eq!(workers.waiting(), [0, 0, 1]);
        // A status ends: its worker goes to the cleanup.
        let (task, stop) = running.remove(1);
        let _ = stop.send(());
        task.await.unwrap();
        until("the cleanup runs", runs(10)).await;
        assert_eq!(
            *order.lock().unwrap(),
            [
                "create-1", "create-2", "s-1", "s-2", "s-3", "s-4", "s-5", "s-6", "create-3",
                "cleanup"
            ]
        );
        for (task, stop) in running.into_iter().chain([create_3, cleanup]) {
            let _ = stop.send(());
            task.await.unwrap();
        }
        assert_eq!(workers.free(&workers.state()), 8);
    }

    #[tokio::test]
    async fn a_creation_waiting_for_room_in_its_lane_runs_once_its_pod_runs() {
        let workers = Arc::new(Workers::new(4, Arc::default()));
        let order = Order::default();
        let first = start(&workers, Lane::Create, "create-1", &order);
        until("the first runs", || order.lock().unwrap().len() == 1).await;
        let second = start(&workers, Lane::Create, "pod-runs", &order);
        until("the second waits", || workers.waiting() == [0, 1, 0]).await;
        workers.rejudge(&key("pod-runs"), Lane::Status);
        until("it runs beside the first", || {
            order.lock().unwrap().len() == 2
        })
        .await;
        assert_eq!(workers.waiting(), [0, 0, 0]);
        for (task, stop) in [first, second] {
            let _ = stop.send(());
            task.await.unwrap();
        }
        assert_eq!(workers.free(&workers.state()), 4);
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
