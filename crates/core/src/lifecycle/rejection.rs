//! What an API error answering a write of the operator means (docs/behaviour.md, "Cleanup
//! table"): one pure classification of the HTTP code and message for every writer, a
//! Browser's pod create, a BrowserConfig entry's dry run and a pre-pull DaemonSet alike; and
//! what follows when the API server keeps refusing a write for a reason no rule knows
//! ([`after_refusal`]): a few tries, then the Browser fails, then it is deleted, then the
//! operator stops trying. Nothing is retried without end.

use super::reason::Reason;
use super::request::Action;
use super::status::Failure;

/// The message with which server-side apply rejects a field the cluster's schema lacks.
const UNDECLARED: &str = "field not declared in schema";

/// What to do about an API error answering an apply or a create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// The object carried a field the cluster's schema does not declare (422, or 500 before
    /// Kubernetes 1.25). When the Pod schema it was pruned to may be stale: refresh the schema
    /// and, if it changed, send the object again, pruned anew, instead of acting on `remedy`.
    pub unknown_fields: bool,
    /// What to do when the object was judged on the schema the cluster has.
    pub remedy: Remedy,
}

/// What a rejection leaves to do, by its HTTP code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Remedy {
    /// The cluster judged the object invalid (400, 422): fail with this reason and message.
    Invalid(Failure),
    /// The cluster forbade the write without judging the object (403: a quota, an admission
    /// policy, RBAC): fail with this reason and message.
    Forbidden(Failure),
    /// Of the moment (5xx, timeouts, conflicts, throttling): retry with backoff.
    Retry,
    /// Refused for a reason no rule knows (a 4xx such as 413 Request Entity Too Large): retried
    /// a few times only ([`after_refusal`]).
    Refused,
}

impl Remedy {
    /// The failure, unless the write is to be retried.
    pub fn failure(self) -> Option<Failure> {
        match self {
            Remedy::Invalid(failure) | Remedy::Forbidden(failure) => Some(failure),
            Remedy::Retry | Remedy::Refused => None,
        }
    }
}

/// The HTTP codes of a refused write that fail the Browser ([`Remedy::Invalid`],
/// [`Remedy::Forbidden`]); every other code is retried.
pub const FAILING_CODES: [u16; 3] = [400, 403, 422];

/// Classifies the API's answer `code` / `message` to a write.
pub fn classify(code: u16, message: &str) -> Rejection {
    let remedy = match code {
        403 if message.contains("exceeded quota") => {
            Remedy::Forbidden(Failure::new(Reason::QuotaExceeded, message))
        }
        403 => Remedy::Forbidden(Failure::new(Reason::Forbidden, message)),
        422 | 400 => Remedy::Invalid(Failure::new(Reason::InvalidPodSpec, message)),
        _ if is_refusal(code) => Remedy::Refused,
        _ => Remedy::Retry,
    };
    Rejection {
        unknown_fields: is_unknown_field_rejection(message),
        remedy,
    }
}

/// Whether an answer refuses a write for a reason that will not pass by itself: a 4xx that is
/// not about credentials (401, refreshed by the client), presence (404, 409: handled by
/// every writer as "gone" or "exists") or timing (408, 429).
pub fn is_refusal(code: u16) -> bool {
    (400..500).contains(&code) && !matches!(code, 401 | 404 | 408 | 409 | 429)
}

/// Refusals in a row of a Browser's writes before the next step of [`after_refusal`].
pub const ATTEMPTS: u32 = 3;

/// The longest message a refusal puts into a Browser's status (an admission webhook may
/// answer at length).
const MESSAGE_MAX: usize = 1024;

/// What follows the `refusals`-th refusal in a row (counting this one) of a Browser's requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AfterRefusal {
    /// Try again with backoff.
    Retry,
    /// Fail the Browser with this reason and message (then it is deleted as usual).
    Fail(Failure),
    /// Even the failure cannot be written: delete the Browser, so that the hub sees the
    /// session end.
    Abandon,
    /// Nothing the operator writes is accepted: stop, report, and wait for a change.
    GiveUp,
}

/// The next step after a refused request for `action`: [`ATTEMPTS`] tries, then the failure naming the
/// server's answer, then the Browser's deletion, then nothing more.
pub fn after_refusal(
    refusals: u32,
    action: Action,
    code: u16,
    reason: &str,
    message: &str,
) -> AfterRefusal {
    match refusals {
        n if n < ATTEMPTS => AfterRefusal::Retry,
        n if n < 2 * ATTEMPTS => {
            let mut text =
                format!("the API server refused to {action} {n} times: {code} {reason}: {message}");
            if text.len() > MESSAGE_MAX {
                let mut end = MESSAGE_MAX;
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                text.truncate(end);
            }
            AfterRefusal::Fail(Failure::new(Reason::WriteRejected, text))
        }
        n if n < 3 * ATTEMPTS => AfterRefusal::Abandon,
        _ => AfterRefusal::GiveUp,
    }
}

/// Whether an API error message says the object carried a field the cluster does not know.
fn is_unknown_field_rejection(message: &str) -> bool {
    message.contains(UNDECLARED)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lifecycle::request::Write;

    #[test]
    fn create_errors_are_classified_per_the_cleanup_table() {
        let quota = "pods \"s1\" is forbidden: exceeded quota: compute, requested: cpu=1, used: cpu=4, limited: cpu=4";
        assert_eq!(
            classify(403, quota).remedy,
            Remedy::Forbidden(Failure::new("QuotaExceeded", quota))
        );
        assert_eq!(
            classify(403, "pods is forbidden: User cannot create").remedy,
            Remedy::Forbidden(Failure::new(
                "Forbidden",
                "pods is forbidden: User cannot create"
            ))
        );
        assert!(
            matches!(classify(422, "Pod \"s1\" is invalid").remedy, Remedy::Invalid(f) if f.reason == "InvalidPodSpec")
        );
        for transient in [500, 503, 504, 409, 429, 408, 401, 404] {
            assert_eq!(
                classify(transient, "x").remedy,
                Remedy::Retry,
                "{transient}"
            );
        }
        for refused in [413, 405, 415, 410, 431] {
            assert_eq!(classify(refused, "x").remedy, Remedy::Refused, "{refused}");
            assert_eq!(classify(refused, "x").remedy.failure(), None);
        }
        for code in 100..600 {
            assert_eq!(
                classify(code, "x").remedy.failure().is_some(),
                FAILING_CODES.contains(&code),
                "{code}"
            );
        }
    }

    #[test]
    fn refusals_no_rule_knows_are_bounded_step_by_step() {
        let steps: Vec<AfterRefusal> = (1..=10)
            .map(|n| {
                after_refusal(
                    n,
                    Action::Write(Write::Status),
                    413,
                    "RequestEntityTooLarge",
                    "limit is 3145728",
                )
            })
            .collect();
        assert_eq!(steps[..2], [AfterRefusal::Retry, AfterRefusal::Retry]);
        assert_eq!(
            steps[2],
            AfterRefusal::Fail(Failure::new(
                "WriteRejected",
                "the API server refused to apply Browser status 3 times: 413 RequestEntityTooLarge: limit is 3145728"
            ))
        );
        assert!(matches!(steps[4], AfterRefusal::Fail(_)));
        assert_eq!(
            steps[5..8],
            [
                AfterRefusal::Abandon,
                AfterRefusal::Abandon,
                AfterRefusal::Abandon
            ]
        );
        assert_eq!(steps[8..], [AfterRefusal::GiveUp, AfterRefusal::GiveUp]);
        // However long the server's message, the status gets a bounded one.
        let long = "x".repeat(10_000);
        match after_refusal(3, Action::Write(Write::Metadata), 422, "Invalid", &long) {
            AfterRefusal::Fail(f) => assert_eq!(f.message.len(), 1024),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn what_is_a_refusal() {
        for code in [400, 403, 405, 413, 422] {
            assert!(is_refusal(code), "{code}");
        }
        for code in [200, 401, 404, 408, 409, 429, 500, 503] {
            assert!(!is_refusal(code), "{code}");
        }
    }

    #[test]
    fn a_field_the_schema_lacks_is_told_apart_from_what_the_code_says() {
        let message = "failed to create typed patch object (/v1, Kind=Pod): .spec.hostUsers: field not declared in schema";
        // Before 1.25 server-side apply answers 500; once the schema is known current, that is
        // retried, while a 422 fails.
        let old = classify(500, message);
        assert!(old.unknown_fields);
        assert_eq!(old.remedy, Remedy::Retry);
        let new = classify(422, message);
        assert!(new.unknown_fields);
        assert_eq!(
            new.remedy.failure(),
            Some(Failure::new("InvalidPodSpec", message))
        );
        assert!(!classify(422, "Pod \"s1\" is invalid").unknown_fields);
        assert_eq!(classify(503, "x").remedy.failure(), None);
    }

    #[test]
    fn unknown_field_rejections_are_recognised_in_every_servers_wording() {
        for message in [
            "failed to create typed patch object (/v1, Kind=Pod): .spec.containers[0].restartPolicy: field not declared in schema",
            "failed to create typed patch object (/v1, Kind=Pod): errors:\n  .spec.containers[name=\"c\"].resources.claims: field not declared in schema",
        ] {
            assert!(is_unknown_field_rejection(message));
        }
        assert!(!is_unknown_field_rejection(
            "Pod \"s1\" is invalid: spec.containers[0].image: Required value"
        ));
    }
}
