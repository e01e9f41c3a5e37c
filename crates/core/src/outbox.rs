//! The Events waiting to go out, and when each may (docs/behaviour.md, "Events"): a burst's
//! backlog must not starve the Events of a Browser created after it, nor spend the API
//! server on Events while pods and statuses wait. Pure: the publisher pushes, asks what is
//! next and takes, passing the time since it started.
//!
//! - At most [`RATE`] a second, after a burst of [`BURST`] ([`Bucket`]).
//! - Warnings first (a failure is what a user looks for), then the first Event of an object
//!   (a Browser nobody has heard of yet), then the rest; within each class the newest first,
//!   so that whoever looks at a Browser now sees its Events now, while a backlog of older ones
//!   waits and, past [`STALE`], is dropped.
//! - Only the rest waits for the reconciles to pause (up to [`HOLD`]).
//! - At most [`PER_OBJECT`] Events of one object and [`CAPACITY`] in all wait; beyond that the
//!   least urgent, oldest one is dropped.

use std::collections::{HashSet, VecDeque};
use std::time::Duration;

/// Events waiting at most, in all.
pub const CAPACITY: usize = 1024;
/// Events of one object waiting at most.
pub const PER_OBJECT: usize = 4;
/// How long an Event of the last class waits for the reconciles to pause.
pub const HOLD: Duration = Duration::from_secs(2);
/// An Event still waiting after this long is dropped: it would tell of a moment long past.
pub const STALE: Duration = Duration::from_secs(30);
/// Objects remembered as having had an Event (beyond, the oldest are forgotten).
const REMEMBERED: usize = 16384;

/// Events published per second at most, after a burst of [`BURST`].
pub const RATE: f64 = 10.0;
pub const BURST: f64 = 20.0;

/// A token bucket: [`RATE`] per second, up to [`BURST`] at once.
pub struct Bucket {
    tokens: f64,
    at: Duration,
}

impl Bucket {
    pub fn new(now: Duration) -> Self {
        Self {
            tokens: BURST,
            at: now,
        }
    }

    /// How long to wait before the next Event may go; takes its token when that is now.
    pub fn take(&mut self, now: Duration) -> Option<Duration> {
        let refill = now.saturating_sub(self.at).as_secs_f64() * RATE;
        self.tokens = (self.tokens + refill).min(BURST);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            None
        } else {
            Some(Duration::from_secs_f64((1.0 - self.tokens) / RATE))
        }
    }
}

/// How urgent an Event is; lower goes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    Warning,
    First,
    Later,
}

struct Waiting<T> {
    object: String,
    class: Class,
    queued: Duration,
    /// Order of arrival.
    seq: u64,
    item: T,
}

/// What the publisher does next.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// Nothing waits.
    Idle,
    /// Only Events that wait for the reconciles to pause, and they are at work.
    Hold,
    /// The head may go (rate permitting): [`Outbox::take`] it.
    Ready,
}

/// The waiting Events.
pub struct Outbox<T> {
    waiting: Vec<Waiting<T>>,
    seq: u64,
    /// Objects that had an Event waiting, most recent last.
    heard: HashSet<String>,
    heard_order: VecDeque<String>,
}

impl<T> Default for Outbox<T> {
    fn default() -> Self {
        Self {
            waiting: Vec::new(),
            seq: 0,
            heard: HashSet::new(),
            heard_order: VecDeque::new(),
        }
    }
}

impl<T> Outbox<T> {
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Queues an Event about `object` (its uid); returns one that no longer fits, if any (the
    /// new one itself when it is the least urgent).
    pub fn push(&mut self, object: &str, warning: bool, item: T, now: Duration) -> Option<T> {
        let class = if warning {
            Class::Warning
        } else if self.heard.contains(object) {
            Class::Later
        } else {
            Class::First
        };
        self.remember(object);
        self.seq += 1;
        self.waiting.push(Waiting {
            object: object.to_string(),
            class,
            queued: now,
            seq: self.seq,
            item,
        });
        let of_object = self.waiting.iter().filter(|w| w.object == object).count();
        if of_object > PER_OBJECT {
            return self.evict(|w| w.object == object);
        }
        if self.waiting.len() > CAPACITY {
            return self.evict(|_| true);
        }
        None
    }

    fn remember(&mut self, object: &str) {
        if self.heard.insert(object.to_string()) {
            self.heard_order.push_back(object.to_string());
            if self.heard_order.len() > REMEMBERED
                && let Some(oldest) = self.heard_order.pop_front()
            {
                self.heard.remove(&oldest);
            }
        }
    }

    /// Removes the least urgent, oldest of the Events `among` selects.
    fn evict(&mut self, among: impl Fn(&Waiting<T>) -> bool) -> Option<T> {
        let index = self
            .waiting
            .iter()
            .enumerate()
            .filter(|(_, w)| among(w))
            .max_by_key(|(_, w)| (w.class, std::cmp::Reverse(w.seq)))
            .map(|(i, _)| i)?;
        Some(self.waiting.swap_remove(index).item)
    }

    /// Removes and returns the Events that waited longer than [`STALE`].
    pub fn expire(&mut self, now: Duration) -> Vec<T> {
        let (stale, fresh): (Vec<_>, Vec<_>) = std::mem::take(&mut self.waiting)
            .into_iter()
            .partition(|w| now.saturating_sub(w.queued) > STALE);
        self.waiting = fresh;
        stale.into_iter().map(|w| w.item).collect()
    }

    /// Whether `w` may go now: a Warning or a first Event at once, the rest once the
    /// reconciles pause or it has waited [`HOLD`].
    fn ready(w: &Waiting<T>, reconciling: bool, now: Duration) -> bool {
        w.class != Class::Later || !reconciling || now.saturating_sub(w.queued) >= HOLD
    }

    /// The index of the Event to go next: of those that may go now, the most urgent class, the
    /// newest within it. (A held Event never holds back one that may go.)
    fn head(&self, reconciling: bool, now: Duration) -> Option<usize> {
        self.waiting
            .iter()
            .enumerate()
            .filter(|(_, w)| Self::ready(w, reconciling, now))
            .min_by_key(|(_, w)| (w.class, std::cmp::Reverse(w.seq)))
            .map(|(i, _)| i)
    }

    /// What to do next, while the reconciles are (or are not) at work.
    pub fn next(&self, reconciling: bool, now: Duration) -> Next {
        if self.waiting.is_empty() {
            Next::Idle
        } else if self.head(reconciling, now).is_some() {
            Next::Ready
        } else {
            Next::Hold
        }
    }

    /// Takes the Event to go next, as [`Outbox::next`] judged it.
    pub fn take(&mut self, reconciling: bool, now: Duration) -> Option<T> {
        let head = self.head(reconciling, now)?;
        Some(self.waiting.swap_remove(head).item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(queue: &mut Outbox<&'static str>) -> Vec<&'static str> {
        let now = Duration::from_secs(100);
        std::iter::from_fn(|| queue.take(false, now)).collect()
    }

    #[test]
    fn a_new_objects_first_event_passes_a_backlog_and_warnings_pass_everything() {
        let now = Duration::from_secs(100);
        let mut q = Outbox::default();
        // A burst: each Browser's PodCreated, then its Running.
        for (object, first, later) in [("a", "a1", "a2"), ("b", "b1", "b2")] {
            q.push(object, false, first, now);
            q.push(object, false, later, now);
        }
        q.push("new", false, "new1", now);
        q.push("a", true, "a-failed", now);
        assert_eq!(
            drain(&mut q),
            ["a-failed", "new1", "b1", "a1", "b2", "a2"],
            "warnings, first Events newest first, then the rest newest first"
        );
        // `new` has been heard of: its next Event waits its turn.
        q.push("new", false, "new2", now);
        q.push("fresh", false, "fresh1", now);
        assert_eq!(drain(&mut q), ["fresh1", "new2"]);
    }

    #[test]
    fn only_later_events_wait_for_the_reconciles() {
        let now = Duration::from_secs(100);
        let mut q = Outbox::default();
        assert_eq!(q.next(true, now), Next::Idle);
        q.push("a", false, "a1", now);
        assert_eq!(q.next(true, now), Next::Ready, "a first Event goes at once");
        q.take(true, now);
        q.push("a", false, "a2", now);
        assert_eq!(q.next(true, now), Next::Hold);
        assert_eq!(q.next(false, now), Next::Ready);
        assert_eq!(q.next(true, now + HOLD), Next::Ready, "held long enough");
        q.push("a", true, "a-failed", now);
        assert_eq!(q.next(true, now), Next::Ready, "a warning goes at once");
    }

    #[test]
    fn a_held_event_never_holds_back_one_that_may_go() {
        let now = Duration::from_secs(100);
        let mut q = Outbox::default();
        q.push("a", false, "a1", now);
        q.take(true, now);
        q.push("a", false, "a2", now);
        // Newer than a2, but held while a2 has waited long enough.
        let later = now + HOLD;
        q.push("b", false, "b1", later);
        q.take(true, later);
        q.push("b", false, "b2", later);
        assert_eq!(q.next(true, later), Next::Ready);
        assert_eq!(q.take(true, later), Some("a2"));
        assert_eq!(q.next(true, later), Next::Hold);
        assert_eq!(q.take(true, later), None);
        assert_eq!(q.take(false, later), Some("b2"));
    }

    #[test]
    fn stale_events_are_dropped() {
        let now = Duration::from_secs(100);
        let mut q = Outbox::default();
        q.push("a", false, "old", now);
        q.push("b", false, "young", now + STALE);
        assert_eq!(q.expire(now + STALE + Duration::from_millis(1)), ["old"]);
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn one_object_keeps_at_most_a_few_and_the_queue_a_bound() {
        let now = Duration::from_secs(100);
        let mut q = Outbox::default();
        let notes = ["1", "2", "3", "4", "5"];
        let mut dropped = Vec::new();
        for (i, note) in notes.iter().enumerate() {
            dropped.extend(q.push("a", i == 4, *note, now));
        }
        // "1" was the first Event of `a`; of the rest the oldest goes.
        assert_eq!(dropped, ["2"]);
        assert_eq!(q.len(), PER_OBJECT);
        let mut q = Outbox::default();
        let dropped: Vec<usize> = (0..=CAPACITY)
            .filter_map(|i| q.push(&format!("o{}", i / 2), false, i, now))
            .collect();
        assert_eq!(q.len(), CAPACITY);
        // The least urgent and oldest: the second Event of the first object.
        assert_eq!(dropped, [1]);
    }

    #[test]
    fn a_burst_goes_at_once_then_the_rate_holds() {
        let t0 = Duration::from_secs(100);
        let mut bucket = Bucket::new(t0);
        for _ in 0..BURST as usize {
            assert_eq!(bucket.take(t0), None);
        }
        let wait = bucket.take(t0).expect("the burst is spent");
        assert!((wait.as_secs_f64() - 1.0 / RATE).abs() < 1e-9, "{wait:?}");
        // A second later, a second's worth of Events may go.
        let later = t0 + Duration::from_secs(1);
        let sent = (0..100)
            .take_while(|_| bucket.take(later).is_none())
            .count();
        assert_eq!(sent, RATE as usize);
    }
}
