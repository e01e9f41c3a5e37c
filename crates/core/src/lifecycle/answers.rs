//! What follows the API server's answers to a reconcile's reads and writes (docs/behaviour.md,
//! "Writes"), decided here and performed by the executor: what to confirm before a plan is
//! written ([`before_writing`]), which write of a plan comes next given what the earlier ones
//! found ([`next_write`]), what the writes together mean for the Browser ([`outcome`]), and
//! what a refused pod create leads to ([`after_create_refused`], [`after_schema_check`]).
//! The executor only performs one write at a time and reports what it found.

use super::plan::Plan;
use super::reason::Reason;
use super::rejection::{self, Remedy, Write};
use super::status::Failure;

/// What a decision must rest on before its plan is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BeforeWriting {
    /// Read the pod the cache lacks, and decide again: only a create may take its absence on
    /// trust (the create itself is refused when a pod of that name exists).
    ReadPod,
    /// Take the Browser as the API server has it now (the metadata apply's answer, or a
    /// read), and decide again: a pod is created at most once per Browser, and the cache may
    /// predate its failure, its deletion or the pod its status records.
    ConfirmBrowser,
    /// Write the plan.
    Write,
}

/// What to confirm before writing `plan`: `pod_confirmed` when the pod was seen in the cache
/// or read, `browser_current` when the Browser came from the API server in this reconcile.
pub fn before_writing(plan: &Plan, pod_confirmed: bool, browser_current: bool) -> BeforeWriting {
    if plan.create_pod.is_none() && !pod_confirmed {
        BeforeWriting::ReadPod
    } else if plan.create_pod.is_some() && !browser_current {
        BeforeWriting::ConfirmBrowser
    } else {
        BeforeWriting::Write
    }
}

/// What one write found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// It took effect.
    Done,
    /// A delete took effect and the object is still terminating (a grace period, or our
    /// finalizer on the Browser).
    Terminating,
    /// What it was for is gone: 404, or 409 for a write whose `uid` precondition names no
    /// existing object (another object took the name). For the finalizer release: nothing
    /// to release any more.
    Gone,
    /// The pod create found a pod of that name (409).
    Exists,
    /// The pod create was refused with this answer.
    Refused { code: u16, message: String },
}

/// The writes of `plan`, in the order they are made.
fn writes(plan: &Plan) -> impl Iterator<Item = Write> + '_ {
    [
        (plan.ensure_metadata, Write::Metadata),
        (plan.adopt_pod.is_some(), Write::AdoptPod),
        (plan.create_pod.is_some(), Write::CreatePod),
        (plan.status.is_some(), Write::Status),
        (plan.delete_pod.is_some(), Write::DeletePod),
        (plan.delete_browser, Write::DeleteBrowser),
        (plan.release_finalizer, Write::ReleaseFinalizer),
    ]
    .into_iter()
    .filter_map(|(wanted, write)| wanted.then_some(write))
}

/// The next write of `plan` after those `done` (in order, with what each found), or `None`
/// when the plan is over. Once a write finds the Browser gone nothing more is written for
/// it, except the delete of the pod it controlled; a pod create that found a pod, or was
/// refused, ends the plan, since what follows rested on the pod being created.
pub fn next_write(plan: &Plan, done: &[(Write, Found)]) -> Option<Write> {
    let Some((last, found)) = done.last() else {
        return writes(plan).next();
    };
    let browser_gone = done.iter().any(|(write, found)| {
        matches!(write, Write::Metadata | Write::Status) && *found == Found::Gone
    });
    match (last, found) {
        (Write::CreatePod, Found::Exists | Found::Refused { .. }) => None,
        (Write::Metadata, Found::Gone) => None,
        _ => {
            let next = writes(plan).skip_while(|w| w != last).nth(1)?;
            (!browser_gone || next == Write::DeletePod).then_some(next)
        }
    }
}

/// What the writes of a plan mean for the Browser.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// The API answered that the Browser is gone before the plan was done.
    pub vanished: bool,
    /// The operator is done with the Browser: deleted, finalizer released, or gone. What
    /// the cache still shows of it is ignored from now on.
    pub let_go: bool,
    /// The Browser left the operator's hands by these writes (its finalizer came off, or
    /// it was deleted without one): its deletion is counted, once. A stale repeat finds the
    /// Browser gone and counts nothing.
    pub deletion_counted: bool,
    /// The pod create found a pod of that name: read it and decide again.
    pub pod_exists: bool,
    /// The pod create was refused with this answer.
    pub create_refused: Option<(u16, String)>,
}

/// What the writes `done` of a plan mean; `held_finalizer` when the Browser carried our
/// finalizer as the plan was decided.
pub fn outcome(done: &[(Write, Found)], held_finalizer: bool) -> Outcome {
    let mut outcome = Outcome::default();
    for (write, found) in done {
        match (write, found) {
            (Write::Metadata | Write::Status, Found::Gone) => {
                outcome.vanished = true;
                outcome.let_go = true;
            }
            (Write::CreatePod, Found::Exists) => outcome.pod_exists = true,
            (Write::CreatePod, Found::Refused { code, message }) => {
                outcome.create_refused = Some((*code, message.clone()));
            }
            (Write::DeleteBrowser, Found::Done) => {
                outcome.let_go = true;
                outcome.deletion_counted |= !held_finalizer;
            }
            (Write::DeleteBrowser, Found::Gone) => outcome.let_go = true,
            (Write::ReleaseFinalizer, found) => {
                outcome.let_go = true;
                outcome.deletion_counted |= *found == Found::Done;
            }
            _ => {}
        }
    }
    outcome
}

/// What a pod create refused on the cluster's own schema leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateRefusal {
    /// Fail the Browser with this failure.
    Fail(Failure),
    /// A ResourceQuota has no room for the pod: the Browser waits in line
    /// (`decide::refused_by_quota`, with the API server's message).
    Queue,
    /// Not the Browser's fault (or not yet known to be): the create is an error, retried;
    /// a refusal no rule knows takes `rejection::after_refusal`'s steps.
    Retry,
}

/// What follows a refused pod create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AfterCreateRefused {
    /// The pod carried a field the cluster's schema lacks: look whether the Pod schema it
    /// was pruned to has changed since ([`after_schema_check`] says what then).
    CheckSchema,
    Then(CreateRefusal),
}

/// What follows the API server's `code` / `message` refusing a pod create.
pub fn after_create_refused(code: u16, message: &str) -> AfterCreateRefused {
    let rejection = rejection::classify(code, message);
    if rejection.unknown_fields {
        return AfterCreateRefused::CheckSchema;
    }
    AfterCreateRefused::Then(failure_or_retry(rejection.remedy))
}

/// What follows a create refused for unknown fields once the Pod schema was looked at:
/// `renewed` when it changed since the pod was pruned (the next try prunes anew).
pub fn after_schema_check(renewed: bool, code: u16, message: &str) -> AfterSchemaCheck {
    if renewed {
        AfterSchemaCheck::PruneAgain
    } else {
        AfterSchemaCheck::Then(failure_or_retry(rejection::classify(code, message).remedy))
    }
}

/// What follows the look at the Pod schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AfterSchemaCheck {
    /// The schema changed: try again with the pod pruned to the new one.
    PruneAgain,
    /// The pod was judged on the schema the cluster has.
    Then(CreateRefusal),
}

fn failure_or_retry(remedy: Remedy) -> CreateRefusal {
    match remedy.failure() {
        Some(failure) if failure.reason == Reason::QuotaExceeded.as_str() => CreateRefusal::Queue,
        Some(failure) => CreateRefusal::Fail(failure),
        None => CreateRefusal::Retry,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::status::BrowserStatus;
    use crate::lifecycle::plan::PodDelete;
    use crate::lifecycle::reason::Reason;

    fn everything() -> Plan {
        Plan {
            ensure_metadata: true,
            create_pod: Some(json!({})),
            status: Some(BrowserStatus::default()),
            delete_pod: Some(PodDelete {
                uid: "p".into(),
                grace_seconds: Some(0),
            }),
            delete_browser: true,
            release_finalizer: true,
            ..Plan::default()
        }
    }

    /// The writes the executor makes when every write finds `found(write)`.
    fn run(plan: &Plan, found: impl Fn(Write) -> Found) -> Vec<(Write, Found)> {
        let mut done = Vec::new();
        while let Some(write) = next_write(plan, &done) {
            done.push((write, found(write)));
            assert!(done.len() <= 7, "endless: {done:?}");
        }
        done
    }

    fn order(done: &[(Write, Found)]) -> Vec<Write> {
        done.iter().map(|(w, _)| *w).collect()
    }

    #[test]
    fn a_plan_is_written_in_order_when_every_write_takes_effect() {
        let done = run(&everything(), |_| Found::Done);
        assert_eq!(
            order(&done),
            [
                Write::Metadata,
                Write::CreatePod,
                Write::Status,
                Write::DeletePod,
                Write::DeleteBrowser,
                Write::ReleaseFinalizer
            ]
        );
        assert_eq!(next_write(&Plan::default(), &[]), None);
    }

    #[test]
    fn a_browser_found_gone_by_the_metadata_apply_gets_nothing_more() {
        let done = run(&everything(), |w| match w {
            Write::Metadata => Found::Gone,
            _ => Found::Done,
        });
        assert_eq!(order(&done), [Write::Metadata]);
        let outcome = outcome(&done, true);
        assert!(outcome.vanished && outcome.let_go && !outcome.deletion_counted);
    }

    #[test]
    fn a_browser_found_gone_by_the_status_apply_still_has_its_pod_deleted() {
        let plan = Plan {
            ensure_metadata: false,
            create_pod: None,
            ..everything()
        };
        let done = run(&plan, |w| match w {
            Write::Status => Found::Gone,
            _ => Found::Done,
        });
        assert_eq!(order(&done), [Write::Status, Write::DeletePod]);
        assert!(outcome(&done, true).vanished);

        let without_delete = Plan {
            delete_pod: None,
            ..plan
        };
        let done = run(&without_delete, |_| Found::Gone);
        assert_eq!(order(&done), [Write::Status]);
    }

    #[test]
    fn a_create_that_finds_a_pod_or_is_refused_ends_the_plan() {
        let plan = Plan {
            ensure_metadata: false,
            create_pod: Some(json!({})),
            status: Some(BrowserStatus::default()),
            ..Plan::default()
        };
        let done = run(&plan, |_| Found::Exists);
        assert_eq!(order(&done), [Write::CreatePod]);
        assert!(outcome(&done, false).pod_exists);

        let refused = Found::Refused {
            code: 403,
            message: "exceeded quota".into(),
        };
        let done = run(&plan, |_| refused.clone());
        assert_eq!(order(&done), [Write::CreatePod]);
        assert_eq!(
            outcome(&done, false).create_refused,
            Some((403, "exceeded quota".into()))
        );
    }

    #[test]
    fn a_deletion_is_counted_once_by_the_write_that_lets_the_browser_go() {
        let delete = Plan {
            delete_browser: true,
            ..Plan::default()
        };
        let release = Plan {
            release_finalizer: true,
            ..Plan::default()
        };
        // Deleted without our finalizer: it is gone by this write.
        let out = outcome(&run(&delete, |_| Found::Done), false);
        assert!(out.let_go && out.deletion_counted);
        // With it, the release counts.
        let out = outcome(&run(&delete, |_| Found::Done), true);
        assert!(out.let_go && !out.deletion_counted);
        let out = outcome(&run(&release, |_| Found::Done), true);
        assert!(out.let_go && out.deletion_counted);
        // A stale repeat finds it gone: let go, counted nothing.
        for plan in [&delete, &release] {
            let out = outcome(&run(plan, |_| Found::Gone), false);
            assert!(out.let_go && !out.deletion_counted, "{plan:?}");
        }
        // Still terminating under our finalizer: not let go.
        let out = outcome(&run(&delete, |_| Found::Terminating), true);
        assert!(!out.let_go);
    }

    #[test]
    fn what_to_confirm_before_writing() {
        let create = Plan {
            create_pod: Some(json!({})),
            ..Plan::default()
        };
        let other = Plan {
            status: Some(BrowserStatus::default()),
            ..Plan::default()
        };
        assert_eq!(before_writing(&other, false, false), BeforeWriting::ReadPod);
        assert_eq!(before_writing(&other, true, false), BeforeWriting::Write);
        // A create takes the pod's absence on trust, but not the cached Browser.
        assert_eq!(
            before_writing(&create, false, false),
            BeforeWriting::ConfirmBrowser
        );
        assert_eq!(before_writing(&create, false, true), BeforeWriting::Write);
    }

    #[test]
    fn a_refused_create_fails_the_browser_queues_it_is_retried_or_checks_the_schema() {
        let then = AfterCreateRefused::Then;
        assert_eq!(
            after_create_refused(403, "exceeded quota: q"),
            then(CreateRefusal::Queue)
        );
        // Other refusals by admission still fail at once.
        assert_eq!(
            after_create_refused(403, "pods \"s1\" is forbidden: violates PodSecurity"),
            then(CreateRefusal::Fail(Failure::new(
                Reason::Forbidden,
                "pods \"s1\" is forbidden: violates PodSecurity"
            )))
        );
        assert_eq!(
            after_create_refused(422, "spec.containers: Required value"),
            then(CreateRefusal::Fail(Failure::new(
                Reason::InvalidPodSpec,
                "spec.containers: Required value"
            )))
        );
        assert_eq!(
            after_create_refused(500, "etcd timeout"),
            then(CreateRefusal::Retry)
        );
        assert_eq!(
            after_create_refused(413, "too large"),
            then(CreateRefusal::Retry)
        );
        let unknown = ".spec.hostUsers: field not declared in schema";
        assert_eq!(
            after_create_refused(422, unknown),
            AfterCreateRefused::CheckSchema
        );
        assert_eq!(
            after_create_refused(500, unknown),
            AfterCreateRefused::CheckSchema
        );
        // Renewed: prune again; judged on the cluster's schema: the code decides.
        assert_eq!(
            after_schema_check(true, 422, unknown),
            AfterSchemaCheck::PruneAgain
        );
        assert_eq!(
            after_schema_check(false, 422, unknown),
            AfterSchemaCheck::Then(CreateRefusal::Fail(Failure::new(
                Reason::InvalidPodSpec,
                unknown
            )))
        );
        // Before 1.25 the rejection is a 500: not the Browser's fault, retried.
        assert_eq!(
            after_schema_check(false, 500, unknown),
            AfterSchemaCheck::Then(CreateRefusal::Retry)
        );
    }
}
