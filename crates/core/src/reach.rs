//! Whether the API server counts as reachable, from the answers to the link's probes
//! (docs/operations.md, "Network partitions"). Pure: the probe loop feeds it each outcome and
//! acts on the change it returns.

use std::time::Duration;

/// Probes in a row without an answer before the API server counts as unreachable: one lost
/// probe is a hiccup, two are a dead link.
pub const MISSES_TO_LOSE: u32 = 2;

/// Pause between probes while the API server answers.
pub const PROBE_EVERY: Duration = Duration::from_secs(1);

/// Pause between probes while it does not: the heal is what every Browser waits for.
pub const PROBE_EVERY_WHILE_LOST: Duration = Duration::from_millis(250);

/// The longest a probe may wait for its answer while the link is lost: connection attempts
/// into a partition hang, and a fresh one after the heal connects at once.
pub const PROBE_TIMEOUT_WHILE_LOST: Duration = Duration::from_secs(1);

/// A change of reachability, the moment the link's epoch moves on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The API server stopped answering.
    Lost,
    /// It answers again.
    Regained,
}

/// The account of probe outcomes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reach {
    reachable: bool,
    misses: u32,
    /// Bumped at every change: requests and watches of an older epoch are abandoned.
    epoch: u64,
}

impl Default for Reach {
    /// Reachable: the operator starts only after discovery answered.
    fn default() -> Self {
        Self {
            reachable: true,
            misses: 0,
            epoch: 0,
        }
    }
}

impl Reach {
    pub fn reachable(&self) -> bool {
        self.reachable
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Records one probe: `answered` is any HTTP answer, an error status included. Returns the
    /// change it makes, if any.
    pub fn observe(&mut self, answered: bool) -> Option<Change> {
        if answered {
            self.misses = 0;
            if self.reachable {
                return None;
            }
            self.reachable = true;
            self.epoch += 1;
            return Some(Change::Regained);
        }
        self.misses = self.misses.saturating_add(1);
        if self.reachable && self.misses >= MISSES_TO_LOSE {
            self.reachable = false;
            self.epoch += 1;
            return Some(Change::Lost);
        }
        None
    }

    /// How long to wait before the next probe, and how long that probe may take (`timeout`
    /// while the link is up).
    pub fn next_probe(&self, timeout: Duration) -> (Duration, Duration) {
        if self.reachable && self.misses == 0 {
            (PROBE_EVERY, timeout)
        } else if self.reachable {
            // A miss is confirmed or refuted at once.
            (PROBE_EVERY_WHILE_LOST, timeout)
        } else {
            (
                PROBE_EVERY_WHILE_LOST,
                timeout.min(PROBE_TIMEOUT_WHILE_LOST),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_misses_in_a_row_lose_the_link_one_answer_regains_it() {
        let mut reach = Reach::default();
        assert_eq!(reach.observe(true), None);
        assert_eq!(reach.observe(false), None, "one miss is a hiccup");
        assert_eq!(reach.observe(true), None);
        assert_eq!(reach.observe(false), None);
        assert_eq!(reach.observe(false), Some(Change::Lost));
        assert!(!reach.reachable());
        assert_eq!(reach.epoch(), 1);
        // Further misses change nothing.
        assert_eq!(reach.observe(false), None);
        assert_eq!(reach.epoch(), 1);
        assert_eq!(reach.observe(true), Some(Change::Regained));
        assert!(reach.reachable());
        assert_eq!(reach.epoch(), 2);
        // A single miss after the heal does not lose it again.
        assert_eq!(reach.observe(false), None);
        assert!(reach.reachable());
    }

    #[test]
    fn probes_come_quicker_and_wait_shorter_while_the_link_is_lost() {
        let mut reach = Reach::default();
        let timeout = Duration::from_secs(2);
        assert_eq!(reach.next_probe(timeout), (PROBE_EVERY, timeout));
        reach.observe(false);
        assert_eq!(
            reach.next_probe(timeout),
            (PROBE_EVERY_WHILE_LOST, timeout),
            "a miss is looked into at once"
        );
        reach.observe(false);
        assert_eq!(
            reach.next_probe(timeout),
            (PROBE_EVERY_WHILE_LOST, PROBE_TIMEOUT_WHILE_LOST)
        );
        // A shorter configured timeout stays.
        let short = Duration::from_millis(500);
        assert_eq!(reach.next_probe(short).1, short);
    }
}
