//! What follows a failed start-up step (discovery, the permission check). An API server that
//! is away for a moment (restarting, partitioned, overloaded) is waited for, up to
//! `--startup-timeout`: a replica that exits instead restarts into the same outage, again and
//! again, and its kubelet backs off further each time (`CrashLoopBackOff`), so it comes back
//! long after the API server did. An answer that lasts (a CRD not installed, a permission
//! missing) ends the start at once, with its message, unless the API server says it is not
//! ready yet (the binary crate asks its `/readyz`): a starting server answers before it has
//! loaded its CRDs and RBAC.

use std::time::Duration;

/// How a start-up step failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// No answer, a 5xx or 429, a timeout: the next attempt may succeed.
    OfTheMoment,
    /// The API server answered something a retry does not change.
    Lasting,
}

/// What to do after a failed attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Try again after this long.
    RetryIn(Duration),
    /// Stop with the attempt's error.
    GiveUp,
}

/// The wait after the first failed attempt; it doubles with each further one.
const FIRST_DELAY: Duration = Duration::from_secs(1);
/// The longest wait between attempts: an API server that is back is seen within this.
const MAX_DELAY: Duration = Duration::from_secs(5);

/// The longest an attempt waits for its answers. A connection that went silent (a partition)
/// would hold it forever, and the link's probe, which abandons such requests later on, starts
/// only once start-up is through; a server that answers at all answers discovery and the
/// permission check well within this.
const ATTEMPT_LIMIT: Duration = Duration::from_secs(10);

/// How long the attempt that begins `waited` after the first may wait for its answers: never
/// past `timeout`, but the one made at `timeout` (or the only one, with `timeout` zero) gets
/// the whole [`ATTEMPT_LIMIT`].
pub fn attempt_limit(waited: Duration, timeout: Duration) -> Duration {
    match timeout.saturating_sub(waited) {
        Duration::ZERO => ATTEMPT_LIMIT,
        left => left.min(ATTEMPT_LIMIT),
    }
}

/// The next step after the `attempts`-th failed attempt (1 for the first), `waited` after the
/// first attempt began. The last attempt is made at `timeout`, so a server that is back by
/// then is not missed; a `timeout` of zero gives up at the first failure.
pub fn after_failure(failure: Failure, attempts: u32, waited: Duration, timeout: Duration) -> Next {
    if failure == Failure::Lasting || waited >= timeout {
        return Next::GiveUp;
    }
    let doublings = attempts.saturating_sub(1).min(8);
    let delay = FIRST_DELAY
        .saturating_mul(1 << doublings)
        .min(MAX_DELAY)
        .min(timeout - waited);
    Next::RetryIn(delay)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUT: Duration = Duration::from_secs(120);

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn a_lasting_answer_ends_the_start_at_once() {
        assert_eq!(
            after_failure(Failure::Lasting, 1, Duration::ZERO, TIMEOUT),
            Next::GiveUp
        );
    }

    #[test]
    fn an_outage_is_retried_sooner_first_then_every_few_seconds() {
        let delays: Vec<Next> = (1..=6)
            .map(|n| after_failure(Failure::OfTheMoment, n, secs(10), TIMEOUT))
            .collect();
        assert_eq!(
            delays,
            [1, 2, 4, 5, 5, 5].map(|s| Next::RetryIn(secs(s))).to_vec()
        );
        // However many attempts failed: no overflow, still the longest delay.
        assert_eq!(
            after_failure(Failure::OfTheMoment, u32::MAX, secs(10), TIMEOUT),
            Next::RetryIn(MAX_DELAY)
        );
    }

    #[test]
    fn the_last_attempt_is_made_at_the_timeout_and_then_it_gives_up() {
        assert_eq!(
            after_failure(Failure::OfTheMoment, 9, secs(118), TIMEOUT),
            Next::RetryIn(secs(2))
        );
        assert_eq!(
            after_failure(Failure::OfTheMoment, 10, TIMEOUT, TIMEOUT),
            Next::GiveUp
        );
    }

    #[test]
    fn an_attempt_waits_for_its_answers_a_while_but_never_past_the_timeout() {
        assert_eq!(attempt_limit(secs(0), TIMEOUT), ATTEMPT_LIMIT);
        assert_eq!(attempt_limit(secs(117), TIMEOUT), secs(3));
        // The last attempt, made at the timeout, and the only one of a zero timeout.
        assert_eq!(attempt_limit(TIMEOUT, TIMEOUT), ATTEMPT_LIMIT);
        assert_eq!(attempt_limit(secs(0), secs(0)), ATTEMPT_LIMIT);
    }

    #[test]
    fn a_zero_timeout_gives_up_at_the_first_failure() {
        assert_eq!(
            after_failure(Failure::OfTheMoment, 1, Duration::ZERO, Duration::ZERO),
            Next::GiveUp
        );
    }
}
