//! The work queue of the Browser reconciles (docs/architecture.md, "How one Browser flows
//! through the code"): keys waiting for a worker, by lane, as plain data. A key waits once
//! however often it is added: adding it again moves it to the lane it needs now, keeping its
//! place; a key added while its reconcile runs waits until that reconcile is done, so one
//! reconcile per key runs at a time. Delayed adds (a requeue, a backoff) wait until their time,
//! and an add for now replaces them. Work is taken lane by lane as [`Turns`] says (16 : 4 : 1
//! while all have work: none starves), each lane first come first served, creations holding at
//! most a quarter of the workers and cleanups an eighth. The edge holds it behind a lock, wakes
//! the workers and the timer, and passes the time in.
//!
//! The shape is client-go's workqueue (dirty and processing sets, a delaying queue, per-item
//! backoff), with lanes instead of one FIFO; kube-runtime's scheduler merges a key's delayed
//! runs the same way (the earliest wins).

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::time::Duration;

use crate::lifecycle::lane::Lane;

/// The first backoff after a failure, doubled with each failure in a row up to [`BACKOFF_MAX`].
pub const BACKOFF_MIN: Duration = Duration::from_millis(500);
/// The longest backoff. Short enough that Browsers do not wait long after an API outage that
/// broke no watch (a relist retries them all at once).
pub const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// How far a grant moves a lane's pass ([`Turns`]): while all three have work waiting, they
/// get 16 : 4 : 1 of the grants.
const fn stride(lane: Lane) -> u64 {
    match lane {
        Lane::Status => 1,
        Lane::Create => 4,
        Lane::Cleanup => 16,
    }
}

/// Whose turn it is, by stride scheduling: each grant moves its lane's pass on by the lane's
/// stride (the inverse of its share), and the lane with work waiting whose pass would be the
/// smallest after its grant goes next (ties in lane order; so a lane's first grant already
/// follows its share). A lane with nothing waiting banks no turns for later: its
/// pass keeps up with the lane served.
#[derive(Debug, Default, Clone)]
pub struct Turns {
    pass: [u64; 3],
}

impl Turns {
    /// The lane that gets the next free worker, given which lanes have work waiting; `None`
    /// when none has.
    pub fn next(&mut self, waiting: [bool; 3]) -> Option<Lane> {
        let lane = Lane::ALL
            .into_iter()
            .filter(|lane| waiting[lane.index()])
            .min_by_key(|lane| (self.pass[lane.index()] + stride(*lane), lane.index()))?;
        let now = self.pass[lane.index()];
        self.pass[lane.index()] = now.saturating_add(stride(lane));
        for idle in Lane::ALL.into_iter().filter(|l| !waiting[l.index()]) {
            let idle = &mut self.pass[idle.index()];
            *idle = (*idle).max(now);
        }
        Some(lane)
    }
}

/// Where a key stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entry<T> {
    /// Waiting for a worker in `lane`, the `seq`-th to arrive.
    Waiting { lane: Lane, seq: u64 },
    /// Waiting for its time.
    Delayed { at: T, seq: u64 },
    /// Its reconcile runs on a worker counted in `lane`; `again`: added meanwhile, to wait in
    /// that lane once the reconcile is done.
    Working { lane: Lane, again: Option<Lane> },
}

/// Keys waiting for one of `workers` workers; a delayed key waits until a time `T` (an
/// `Instant` at the edge).
#[derive(Debug)]
pub struct WorkQueue<K, T> {
    workers: usize,
    /// Workers each lane may hold at once (`Lane::index`).
    caps: [usize; 3],
    /// Workers each lane holds now.
    held: [usize; 3],
    turns: Turns,
    seq: u64,
    lanes: [BTreeMap<u64, K>; 3],
    delayed: BTreeMap<(T, u64), K>,
    entries: HashMap<K, Entry<T>>,
    /// Failures in a row of each key's reconcile, for its backoff.
    failures: HashMap<K, u32>,
}

impl<K: Clone + Eq + Hash, T: Copy + Ord> WorkQueue<K, T> {
    pub fn new(workers: usize) -> Self {
        let workers = workers.max(1);
        Self {
            workers,
            caps: [workers, (workers / 4).max(1), (workers / 8).max(1)],
            held: [0; 3],
            turns: Turns::default(),
            seq: 0,
            lanes: Default::default(),
            delayed: BTreeMap::new(),
            entries: HashMap::new(),
            failures: HashMap::new(),
        }
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// `key` needs a reconcile now, in `lane`: it joins the lane, moves to it keeping its place
    /// when it waits already, or waits for the reconcile under way to be done.
    pub fn add(&mut self, key: K, lane: Lane) {
        let entry = match self.entries.get(&key).copied() {
            Some(Entry::Working { lane: held, .. }) => Entry::Working {
                lane: held,
                again: Some(lane),
            },
            Some(Entry::Waiting { lane: was, seq }) => {
                if let Some(key) = self.lanes[was.index()].remove(&seq) {
                    self.lanes[lane.index()].insert(seq, key);
                }
                Entry::Waiting { lane, seq }
            }
            Some(Entry::Delayed { at, seq }) => {
                self.delayed.remove(&(at, seq));
                self.join(key.clone(), lane)
            }
            None => self.join(key.clone(), lane),
        };
        self.entries.insert(key, entry);
    }

    fn join(&mut self, key: K, lane: Lane) -> Entry<T> {
        let seq = self.next_seq();
        self.lanes[lane.index()].insert(seq, key);
        Entry::Waiting { lane, seq }
    }

    /// `key` needs a reconcile at `at`, unless it waits for one sooner already.
    pub fn add_at(&mut self, key: K, at: T) {
        match self.entries.get(&key).copied() {
            Some(Entry::Delayed { at: was, seq }) if was > at => {
                self.delayed.remove(&(was, seq));
            }
            None => {}
            Some(_) => return,
        }
        let seq = self.next_seq();
        self.delayed.insert((at, seq), key.clone());
        self.entries.insert(key, Entry::Delayed { at, seq });
    }

    /// The keys whose time has come at `now`, taken out of the delayed ones: the caller adds
    /// each in the lane it needs now.
    pub fn due(&mut self, now: T) -> Vec<K> {
        let later = self.delayed.split_off(&(now, u64::MAX));
        let due = std::mem::replace(&mut self.delayed, later);
        due.into_values()
            .inspect(|key| {
                self.entries.remove(key);
            })
            .collect()
    }

    /// When the next delayed key is due.
    pub fn next_due(&self) -> Option<T> {
        self.delayed.keys().next().map(|(at, _)| *at)
    }

    /// Whether a worker may take work of `lane` now.
    fn open(&self, lane: Lane) -> bool {
        let i = lane.index();
        !self.lanes[i].is_empty()
            && self.held[i] < self.caps[i]
            && self.held.iter().sum::<usize>() < self.workers
    }

    /// Work for a free worker: the key and the lane its worker is counted in, or `None` when
    /// no lane with work has room.
    pub fn take(&mut self) -> Option<(K, Lane)> {
        let lane = self.turns.next(Lane::ALL.map(|lane| self.open(lane)))?;
        let (_, key) = self.lanes[lane.index()].pop_first()?;
        self.held[lane.index()] += 1;
        self.entries
            .insert(key.clone(), Entry::Working { lane, again: None });
        Some((key, lane))
    }

    /// Whether a worker could take work now.
    pub fn has_work(&self) -> bool {
        Lane::ALL.iter().any(|&lane| self.open(lane))
    }

    /// The reconcile of `key` is done: it waits again if it was added meanwhile, else at
    /// `again_at` if given.
    pub fn done(&mut self, key: &K, again_at: Option<T>) {
        let Some(Entry::Working { lane, again }) = self.entries.remove(key) else {
            return;
        };
        self.held[lane.index()] = self.held[lane.index()].saturating_sub(1);
        match (again, again_at) {
            (Some(lane), _) => self.add(key.clone(), lane),
            (None, Some(at)) => self.add_at(key.clone(), at),
            (None, None) => {}
        }
    }

    /// Counts a failure of `key`'s reconcile; how long to wait before the next try.
    pub fn backoff(&mut self, key: &K) -> Duration {
        let failures = self.failures.entry(key.clone()).or_insert(0);
        *failures = failures.saturating_add(1);
        let doubled = BACKOFF_MIN.saturating_mul(1 << (*failures - 1).min(10));
        doubled.min(BACKOFF_MAX)
    }

    /// `key`'s reconcile succeeded: its next failure starts the backoff anew.
    pub fn forget(&mut self, key: &K) {
        self.failures.remove(key);
    }

    /// Every backoff starts anew (after a relist, the API server answers again).
    pub fn forget_all(&mut self) {
        self.failures.clear();
    }

    /// Keys waiting for a worker now, by lane.
    pub fn waiting(&self) -> [usize; 3] {
        Lane::ALL.map(|lane| self.lanes[lane.index()].len())
    }

    /// Keys whose reconcile runs now.
    pub fn working(&self) -> usize {
        self.held.iter().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Times are whole seconds here.
    type Queue<K> = WorkQueue<K, u64>;

    fn queue(workers: usize, keys: &[(&'static str, Lane)]) -> Queue<&'static str> {
        let mut queue = WorkQueue::new(workers);
        for &(key, lane) in keys {
            queue.add(key, lane);
        }
        queue
    }

    /// The keys taken, one worker at a time, each done before the next is taken.
    fn served(queue: &mut Queue<&'static str>) -> Vec<&'static str> {
        let mut order = Vec::new();
        while let Some((key, _)) = queue.take() {
            order.push(key);
            queue.done(&key, None);
        }
        order
    }

    use Lane::{Cleanup, Create, Status};

    #[test]
    fn a_status_a_client_waits_on_goes_before_creations_and_cleanup() {
        let mut q = queue(
            1,
            &[
                ("cleanup", Cleanup),
                ("create-1", Create),
                ("status", Status),
                ("create-2", Create),
            ],
        );
        assert_eq!(
            served(&mut q),
            ["status", "create-1", "create-2", "cleanup"]
        );
    }

    #[test]
    fn lanes_share_the_workers_16_4_1_and_none_starves() {
        let mut q = Queue::new(1);
        let keys: Vec<(String, Lane)> = (0..100)
            .flat_map(|i| Lane::ALL.map(|lane| (format!("{}-{i}", lane.as_str()), lane)))
            .collect();
        for (key, lane) in &keys {
            q.add(key.clone(), *lane);
        }
        let mut got = [0; 3];
        for _ in 0..42 {
            let (key, lane) = q.take().unwrap();
            got[lane.index()] += 1;
            q.done(&key, None);
        }
        assert_eq!(got, [32, 8, 2]);
    }

    #[test]
    fn creations_hold_a_quarter_of_the_workers_cleanups_an_eighth_statuses_the_rest() {
        let mut q = Queue::new(8);
        for i in 0..10 {
            q.add(format!("create-{i}"), Create);
            q.add(format!("cleanup-{i}"), Cleanup);
        }
        q.add("status-1".to_string(), Status);
        q.add("status-2".to_string(), Status);
        let mut held = [0; 3];
        while let Some((_, lane)) = q.take() {
            held[lane.index()] += 1;
        }
        assert_eq!(held, [2, 2, 1]);
        // Three workers stay free for statuses.
        assert_eq!(q.working(), 5);
        assert!(!q.has_work());
        q.add("status-3".to_string(), Status);
        assert_eq!(q.take(), Some(("status-3".to_string(), Status)));
    }

    #[test]
    fn a_lane_at_its_cap_leaves_its_work_waiting_while_workers_are_free() {
        let mut q = queue(8, &[("c1", Create), ("c2", Create), ("c3", Create)]);
        assert_eq!(q.take().map(|(k, _)| k), Some("c1"));
        assert_eq!(q.take().map(|(k, _)| k), Some("c2"));
        assert_eq!(q.take(), None, "two of eight workers are a quarter");
        assert!(!q.has_work());
        q.add("s1", Status);
        assert_eq!(q.take(), Some(("s1", Status)));
        q.done(&"c1", None);
        assert_eq!(q.take(), Some(("c3", Create)));
    }

    #[test]
    fn adding_a_waiting_key_again_moves_it_to_its_new_lane_keeping_its_place() {
        let mut q = queue(
            1,
            &[
                ("create-1", Create),
                ("runs", Create),
                ("create-2", Create),
                ("status", Status),
            ],
        );
        // Its pod runs now: it moves up, ahead of the status that arrived after it.
        q.add("runs", Status);
        assert_eq!(q.waiting(), [2, 2, 0]);
        assert_eq!(served(&mut q), ["runs", "status", "create-1", "create-2"]);
    }

    #[test]
    fn a_key_added_while_its_reconcile_runs_waits_for_it_one_reconcile_at_a_time() {
        let mut q = queue(4, &[("s1", Create)]);
        let (key, _) = q.take().unwrap();
        q.add("s1", Status);
        q.add("s1", Status);
        assert_eq!(q.take(), None, "not a second reconcile of s1 at once");
        q.done(&key, Some(60));
        // Added meanwhile: it runs again now, whatever its reconcile asked for.
        assert_eq!(q.take(), Some(("s1", Status)));
        q.done(&"s1", None);
        assert_eq!(q.take(), None);
        assert_eq!(q.next_due(), None);
    }

    #[test]
    fn delayed_adds_wait_for_their_time_and_the_earliest_wins() {
        let at = |s| s;
        let mut q = Queue::new(2);
        q.add_at("a", at(10));
        q.add_at("a", at(30));
        q.add_at("b", at(20));
        q.add_at("a", at(5));
        assert_eq!(q.next_due(), Some(at(5)));
        assert_eq!(q.take(), None);
        assert_eq!(q.due(at(4)), Vec::<&str>::new());
        assert_eq!(q.due(at(5)), ["a"]);
        assert_eq!(q.due(at(25)), ["b"]);
        assert_eq!(q.next_due(), None);
        // A delayed key added for now runs now, once.
        q.add_at("c", at(60));
        q.add("c", Cleanup);
        assert_eq!(q.next_due(), None);
        assert_eq!(q.take(), Some(("c", Cleanup)));
        // Waiting already: a later time changes nothing.
        q.add("d", Create);
        q.add_at("d", at(1));
        assert_eq!(q.next_due(), None);
    }

    #[test]
    fn backoff_doubles_with_failures_in_a_row_and_starts_anew() {
        let mut q: Queue<&str> = Queue::new(1);
        let waits: Vec<Duration> = (0..8).map(|_| q.backoff(&"a")).collect();
        assert_eq!(waits[0], BACKOFF_MIN);
        assert_eq!(waits[1], 2 * BACKOFF_MIN);
        assert_eq!(waits[7], BACKOFF_MAX);
        q.forget(&"a");
        assert_eq!(q.backoff(&"a"), BACKOFF_MIN);
        q.backoff(&"b");
        q.forget_all();
        assert_eq!(q.backoff(&"b"), BACKOFF_MIN);
    }

    fn grants(turns: &mut Turns, waiting: [bool; 3], n: usize) -> [usize; 3] {
        let mut got = [0; 3];
        for _ in 0..n {
            if let Some(lane) = turns.next(waiting) {
                got[lane.index()] += 1;
            }
        }
        got
    }

    #[test]
    fn lanes_share_the_workers_by_weight_and_none_starves() {
        let mut turns = Turns::default();
        assert_eq!(turns.next([false; 3]), None);
        // All three busy: 16 : 4 : 1 of every 21 grants, the status lane first.
        assert_eq!(turns.clone().next([true; 3]), Some(Lane::Status));
        assert_eq!(grants(&mut turns, [true; 3], 210), [160, 40, 10]);
        // Only creations and cleanup: 4 : 1.
        let mut turns = Turns::default();
        assert_eq!(grants(&mut turns, [false, true, true], 100), [0, 80, 20]);
        // A lane alone gets every grant.
        assert_eq!(grants(&mut turns, [false, false, true], 7), [0, 0, 7]);
    }

    #[test]
    fn a_lane_that_had_nothing_waiting_banks_no_turns() {
        let mut turns = Turns::default();
        // Creations alone for a long time ...
        assert_eq!(grants(&mut turns, [false, true, false], 1000), [0, 1000, 0]);
        // ... then cleanup work arrives: it gets its share, not a run of 1000 grants.
        let got = grants(&mut turns, [false, true, true], 50);
        assert!(got[2] <= 11 && got[1] >= 39, "{got:?}");
    }
}
