//! What an API error answering a write of the operator means (docs/behaviour.md, "Cleanup
//! table"): one pure classification of the HTTP code and message for every writer, a
//! Browser's pod create, a BrowserConfig entry's dry run and a pre-pull DaemonSet alike.

use super::reason::Reason;
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
}

impl Remedy {
    /// The failure, unless the write is to be retried.
    pub fn failure(self) -> Option<Failure> {
        match self {
            Remedy::Invalid(failure) | Remedy::Forbidden(failure) => Some(failure),
            Remedy::Retry => None,
        }
    }
}

/// Classifies the API's answer `code` / `message` to a write.
pub fn classify(code: u16, message: &str) -> Rejection {
    let remedy = match code {
        403 if message.contains("exceeded quota") => {
            Remedy::Forbidden(Failure::new(Reason::QuotaExceeded, message))
        }
        403 => Remedy::Forbidden(Failure::new(Reason::Forbidden, message)),
        422 | 400 => Remedy::Invalid(Failure::new(Reason::InvalidPodSpec, message)),
        _ => Remedy::Retry,
    };
    Rejection {
        unknown_fields: is_unknown_field_rejection(message),
        remedy,
    }
}

/// Whether an API error message says the object carried a field the cluster does not know.
fn is_unknown_field_rejection(message: &str) -> bool {
    message.contains(UNDECLARED)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        for transient in [500, 503, 504, 409, 429] {
            assert_eq!(classify(transient, "x").remedy, Remedy::Retry);
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
