//! One reconcile as a step machine, without IO (docs/behaviour.md, "Writes"). It is fed the
//! API server's answer to each request and says what comes next: another request
//! ([`Step::Send`]), a look at the cluster's Pod schema ([`Step::CheckSchema`]), or the end
//! with what the answers taught ([`Step::Done`]). The edge only sends and feeds back.
//!
//! The protocol, for a Browser ([`Reconcile::browser`]):
//! - Decide (`decide::decide`) on the Browser and its pod as the caches and the operator's
//!   own last answers know them.
//! - A pod absent from the cache is read before any decision but a create: a create checks
//!   absence itself, being create-only (409 when a pod of that name exists; the pod is then
//!   read and the decision taken again).
//! - A create is decided on the Browser as the API server has it: the plan's metadata apply
//!   answers with it, or it is read; then the decision is taken again on that answer.
//! - The plan's writes go one at a time ([`next_write`]); one that finds the Browser gone
//!   ends them, but for the delete of its pod.
//! - A refused create fails the Browser, puts it in line for quota, is retried, or first looks
//!   whether the Pod schema the pod was pruned to is stale.
//! - A request refused for a reason no rule knows climbs the ladder of
//!   `rejection::after_refusal`: tries, the Browser's failure, its deletion, giving up.
//!
//! Each answer leads to at most one decision, and a reconcile takes at most [`DECISIONS`].
//! For a pod whose Browser the cache lacks ([`Reconcile::orphan`]): confirm with the API
//! server that no Browser of the name exists, then delete the pod (`decide::orphaned`).

use std::time::Duration;

use jiff::Timestamp;
use kube_core::{ApiResource, DynamicObject};
use serde_json::Value;

use super::decide::{self, Line, Observed, holds_finalizer};
use super::milestones;
use super::plan::{Event, LeftLine, Plan, PodCreation, Settings};
use super::reason::Reason;
use super::rejection::{self, AfterRefusal, Remedy};
use super::request::{self, Action, Answer, Request, Write};
use super::status::Failure;
use crate::api::browser::Phase;

/// Decisions one reconcile takes at most: the first, after reading the pod, after confirming
/// the Browser, after a create that found a pod of that name (then read).
pub const DECISIONS: usize = 4;

/// Renders the pod of a Browser (`desired::pod_for` over the BrowserConfigs of its namespace).
pub type Render<'a> = dyn Fn(&DynamicObject) -> PodCreation + Sync + 'a;

/// What a reconcile decides with, besides the Browser and its pod.
#[derive(Clone, Copy)]
pub struct Inputs<'a> {
    pub settings: &'a Settings,
    /// The Browser kind, as discovery resolved it.
    pub kind: &'a ApiResource,
    pub now: Timestamp,
    /// When the link to the API server last came back after it was lost.
    pub link_regained: Option<Timestamp>,
    /// The Browser's namespace as the capacity queue sees it.
    pub line: Line<'a>,
    /// Refusals in a row of this Browser's requests before this reconcile.
    pub refusals: u32,
}

/// What to do next.
#[derive(Debug)]
pub enum Step {
    /// Send this request and answer with [`Reconcile::answer`].
    Send(Request),
    /// Look whether the cluster's Pod schema changed since the pod was pruned, and answer
    /// with [`Reconcile::schema_checked`].
    CheckSchema,
    Done(Done),
}

/// What an answer taught of the Browser or its pod.
#[derive(Debug, Clone, PartialEq)]
pub enum Learnt {
    /// The object as the answer returned it.
    Object(Box<DynamicObject>),
    /// Gone, or let go of: whatever the cache still shows of this uid is stale.
    Gone { uid: String },
}

/// When to reconcile again.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Next {
    /// When something changes.
    #[default]
    AwaitChange,
    /// After this long, or sooner if something changes.
    After(Duration),
    /// Retry: soon after a refusal no rule knows (which counts towards the ladder), else with
    /// backoff.
    Retry(Trouble),
}

/// Why a reconcile ended without settling.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Trouble {
    /// A request failed for a reason of the moment (5xx, 429, a lost connection …).
    #[error("{action} failed: {message}")]
    Failed {
        action: Action,
        code: Option<u16>,
        message: String,
    },
    /// A request was refused for a reason no rule knows, and the ladder says try again.
    #[error("{action} was refused: {code} {reason}: {message}")]
    Refused {
        action: Action,
        code: u16,
        reason: String,
        message: String,
    },
    /// The pod was refused for fields the cluster's schema lacks, and that schema changed
    /// since the pod was pruned: the next try prunes anew.
    #[error(
        "the cluster rejected the pod for fields its schema lacks; retrying with its new schema: {0}"
    )]
    StaleSchema(String),
    /// Every decision was overtaken by what its requests found.
    #[error("the decision did not settle within one reconcile; retrying")]
    Unsettled,
}

/// The end of a reconcile: when to look again, what the answers taught (for read-your-writes
/// and the capacity queue), and what to publish and count.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Done {
    pub next: Next,
    /// What the answers said of the Browser, oldest first.
    pub browser: Vec<Learnt>,
    /// What the answers said of the pod, oldest first.
    pub pod: Vec<Learnt>,
    pub events: Vec<Event>,
    /// This reconcile created the pod: its answer is in `pod`.
    pub created_pod: bool,
    /// This reconcile published `Running` for the first time.
    pub running: bool,
    /// The failure reason it wrote.
    pub failure: Option<String>,
    pub left_line: Option<LeftLine>,
    /// The Browser left the operator's hands by these writes: its outcome, counted once.
    pub deletion: Option<String>,
    /// What a person should read in the log.
    pub warning: Option<String>,
}

/// What one write found.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Found {
    /// It took effect.
    Done,
    /// A delete took effect and the object is still terminating.
    Terminating,
    /// What it was for is gone: 404, or 409 for a write whose `uid` precondition names no
    /// existing object. For the finalizer release: nothing to release any more.
    Gone,
}

/// What the machine waits for.
#[derive(Debug)]
enum Waiting {
    /// The pod: then decide again.
    Pod,
    /// The Browser as the API server has it, from `action` (a read, or the metadata apply):
    /// then decide again.
    Browser {
        action: Action,
    },
    /// The answer to `write` of `plan`, after `done`; `ladder` when the plan is one that the
    /// refusal ladder or a refused create led to.
    Write {
        plan: Box<Plan>,
        done: Vec<(Write, Found)>,
        write: Write,
        ladder: bool,
    },
    /// The look at the Pod schema after the create was refused with this answer.
    Schema {
        code: u16,
        reason: String,
        message: String,
    },
    /// Whether a Browser of the name of this pod exists.
    Owner {
        pod: Value,
    },
    Nothing,
}

/// One reconcile of one Browser, or of a pod left without one.
pub struct Reconcile<'a> {
    inputs: Inputs<'a>,
    render: &'a Render<'a>,
    /// The Browser the decisions are taken on.
    browser: DynamicObject,
    /// It came from the API server in this reconcile.
    browser_current: bool,
    /// The pod: seen (`None` when confirmed absent), or not in the cache and not read yet.
    pod: Option<Option<Value>>,
    rendered: Option<PodCreation>,
    decisions: usize,
    /// The reconcile of a pod whose Browser the cache lacks.
    orphan: bool,
    waiting: Waiting,
    done: Done,
}

impl<'a> Reconcile<'a> {
    /// The reconcile of `browser`, with its pod as the cache knows it (`None`: not in the
    /// cache); `render` renders its pod, at most once.
    pub fn browser(
        inputs: Inputs<'a>,
        render: &'a Render<'a>,
        browser: DynamicObject,
        pod: Option<Value>,
    ) -> Self {
        Self {
            inputs,
            render,
            browser,
            browser_current: false,
            pod: pod.map(Some),
            rendered: None,
            decisions: 0,
            orphan: false,
            waiting: Waiting::Nothing,
            done: Done::default(),
        }
    }

    /// The reconcile of `pod`, whose Browser the cache lacks.
    pub fn orphan(inputs: Inputs<'a>, pod: Value) -> Self {
        let mut machine = Self::browser(inputs, &no_render, no_browser(), None);
        machine.orphan = true;
        machine.waiting = Waiting::Owner { pod };
        machine
    }

    /// The first step.
    pub fn start(&mut self) -> Step {
        if self.orphan {
            return Step::Send(request::read_browser(true));
        }
        self.decide()
    }

    /// Takes the answer to the request of the last step; says what comes next.
    pub fn answer(&mut self, answer: Answer) -> Step {
        match std::mem::replace(&mut self.waiting, Waiting::Nothing) {
            Waiting::Pod => match answer {
                Answer::Object(pod) => match serde_json::to_value(&pod) {
                    Ok(value) => {
                        // Kept like a write's answer: the pod watch may still deliver older
                        // versions, and a decision on one would write an older status back.
                        self.done.pod.push(Learnt::Object(pod));
                        self.pod = Some(Some(value));
                        self.decide()
                    }
                    Err(e) => self.retry(Action::ReadPod, None, e.to_string()),
                },
                Answer::Absent => {
                    self.pod = Some(None);
                    self.decide()
                }
                other => self.trouble(Action::ReadPod, other, false),
            },
            Waiting::Browser { action } => match answer {
                Answer::Object(current) if current.metadata.uid == self.browser.metadata.uid => {
                    self.browser = (*current).clone();
                    self.done.browser.push(Learnt::Object(current));
                    self.browser_current = true;
                    self.decide()
                }
                // Gone, or replaced by another Browser of the name.
                Answer::Object(_)
                | Answer::Absent
                | Answer::Status {
                    code: 404 | 409, ..
                } => self.let_go(),
                other => self.trouble(action, other, false),
            },
            Waiting::Write {
                plan,
                done,
                write,
                ladder,
            } => self.written(*plan, done, write, ladder, answer),
            Waiting::Owner { pod } => match answer {
                // The cache is behind: the Browser's own events bring it.
                Answer::Object(_) => self.end(Next::AwaitChange),
                Answer::Absent => {
                    let plan = decide::orphaned(&pod, self.inputs.now, self.inputs.settings);
                    if let Some(delete) = &plan.delete_pod {
                        let forced = if delete.grace_seconds == Some(0) {
                            ", forced"
                        } else {
                            ""
                        };
                        self.done.warning =
                            Some(format!("deleting a pod whose Browser is gone{forced}"));
                    }
                    self.write(plan, Vec::new(), true)
                }
                other => self.trouble(Action::ReadBrowser, other, false),
            },
            // No request was asked for.
            Waiting::Schema { .. } | Waiting::Nothing => self.finish(),
        }
    }

    /// Takes whether the Pod schema changed since the refused pod was pruned.
    pub fn schema_checked(&mut self, renewed: bool) -> Step {
        match std::mem::replace(&mut self.waiting, Waiting::Nothing) {
            Waiting::Schema { message, .. } if renewed => {
                self.end(Next::Retry(Trouble::StaleSchema(message)))
            }
            Waiting::Schema {
                code,
                reason,
                message,
            } => self.create_refused(code, &reason, &message),
            _ => self.finish(),
        }
    }

    fn observed<'b>(&'b self, pod: Option<&'b Value>) -> Observed<'b> {
        Observed {
            browser: &self.browser,
            pod,
            now: self.inputs.now,
            link_regained: self.inputs.link_regained,
            line: self.inputs.line,
        }
    }

    /// The pod as known now (`None`: absent, or not known).
    fn known_pod(&self) -> Option<&Value> {
        self.pod.as_ref().and_then(Option::as_ref)
    }

    /// Takes the decision on what is known now, then reads what it rests on or writes it.
    fn decide(&mut self) -> Step {
        if self.decisions == DECISIONS {
            return self.end(Next::Retry(Trouble::Unsettled));
        }
        self.decisions += 1;
        let (render, browser) = (self.render, &self.browser);
        let rendered = &mut self.rendered;
        let observed = Observed {
            browser,
            pod: self.pod.as_ref().and_then(Option::as_ref),
            now: self.inputs.now,
            link_regained: self.inputs.link_regained,
            line: self.inputs.line,
        };
        let plan = decide::decide(&observed, self.inputs.settings, || {
            rendered.get_or_insert_with(|| render(browser)).clone()
        });
        if plan.create_pod.is_none() && self.pod.is_none() {
            // Only a create may take the pod's absence on trust.
            self.waiting = Waiting::Pod;
            return Step::Send(request::read_pod());
        }
        if plan.create_pod.is_some() && !self.browser_current {
            // A pod is created at most once per Browser, and the cache may predate its
            // failure, its deletion or the pod its status records.
            let confirm = if plan.ensure_metadata {
                request::metadata(self.inputs.kind, &self.browser)
            } else {
                request::read_browser(false)
            };
            self.waiting = Waiting::Browser {
                action: confirm.action,
            };
            return Step::Send(confirm);
        }
        self.write(plan, Vec::new(), false)
    }

    /// Sends the next write of `plan` after `done`, or ends the plan.
    fn write(&mut self, plan: Plan, mut done: Vec<(Write, Found)>, ladder: bool) -> Step {
        while let Some(write) = next_write(&plan, &done) {
            match self.request(&plan, write) {
                Some(request) => {
                    self.waiting = Waiting::Write {
                        plan: Box::new(plan),
                        done,
                        write,
                        ladder,
                    };
                    return Step::Send(request);
                }
                // Nothing to send (no finalizer of ours left to release).
                None => done.push((write, Found::Gone)),
            }
        }
        self.planned(&plan, &done)
    }

    fn request(&self, plan: &Plan, write: Write) -> Option<Request> {
        let name = self.browser.metadata.name.as_deref().unwrap_or_default();
        match write {
            Write::Metadata => Some(request::metadata(self.inputs.kind, &self.browser)),
            Write::AdoptPod => plan.adopt_pod.as_ref().map(|a| request::adopt_pod(name, a)),
            Write::CreatePod => plan.create_pod.as_ref().map(request::create_pod),
            Write::Status => plan
                .status
                .as_ref()
                .map(|s| request::status(self.inputs.kind, &self.browser, s.to_value())),
            Write::DeletePod => plan.delete_pod.as_ref().map(request::delete_pod),
            Write::DeleteBrowser => Some(request::delete_browser(&self.browser)),
            Write::ReleaseFinalizer => request::release_finalizer(&self.browser),
        }
    }

    /// Takes the answer to `write` of `plan`.
    fn written(
        &mut self,
        plan: Plan,
        mut done: Vec<(Write, Found)>,
        write: Write,
        ladder: bool,
        answer: Answer,
    ) -> Step {
        let found = match (write, answer) {
            (Write::CreatePod, Answer::Status { code: 409, .. }) => {
                // What followed rested on the pod being created: read it, decide again.
                self.pod = None;
                self.waiting = Waiting::Pod;
                return Step::Send(request::read_pod());
            }
            // The plan rested on the create: what follows is the refusal's to say.
            (
                Write::CreatePod,
                Answer::Status {
                    code,
                    reason,
                    message,
                },
            ) => {
                if rejection::classify(code, &message).unknown_fields {
                    self.waiting = Waiting::Schema {
                        code,
                        reason,
                        message,
                    };
                    return Step::CheckSchema;
                }
                return self.create_refused(code, &reason, &message);
            }
            (Write::AdoptPod | Write::CreatePod, Answer::Object(pod)) => {
                self.done.created_pod |= write == Write::CreatePod;
                self.done.pod.push(Learnt::Object(pod));
                Found::Done
            }
            (Write::DeletePod, Answer::Object(pod)) => {
                self.done.pod.push(Learnt::Object(pod));
                Found::Terminating
            }
            (
                Write::DeletePod,
                Answer::Absent
                | Answer::Status {
                    code: 404 | 409, ..
                },
            ) => {
                let uid = plan.delete_pod.as_ref().map(|d| d.uid.clone());
                self.done.pod.push(Learnt::Gone {
                    uid: uid.unwrap_or_default(),
                });
                Found::Done
            }
            (Write::Metadata | Write::Status, Answer::Object(browser)) => {
                self.done.browser.push(Learnt::Object(browser));
                Found::Done
            }
            (Write::DeleteBrowser, Answer::Object(browser)) => {
                self.done.browser.push(Learnt::Object(browser));
                Found::Terminating
            }
            (Write::DeleteBrowser, Answer::Absent)
            | (Write::ReleaseFinalizer, Answer::Object(_)) => Found::Done,
            (
                Write::Metadata | Write::Status | Write::DeleteBrowser | Write::ReleaseFinalizer,
                Answer::Status {
                    code: 404 | 409, ..
                },
            ) => Found::Gone,
            (_, other) => return self.trouble(Action::Write(write), other, ladder),
        };
        done.push((write, found));
        self.write(plan, done, ladder)
    }

    /// What a create refused on the schema the cluster has leads to: the Browser's failure,
    /// a place in line for quota, or a retry.
    fn create_refused(&mut self, code: u16, reason: &str, message: &str) -> Step {
        let observed = self.observed(None);
        let plan = match rejection::classify(code, message).remedy {
            Remedy::Forbidden(f) if f.reason == Reason::QuotaExceeded.as_str() => {
                decide::refused_by_quota(&observed, self.inputs.settings, message)
            }
            Remedy::Invalid(f) | Remedy::Forbidden(f) => {
                decide::rejected(&observed, self.inputs.settings, f)
            }
            Remedy::Retry | Remedy::Refused => {
                let answer = Answer::status(code, reason, message);
                return self.trouble(Action::Write(Write::CreatePod), answer, false);
            }
        };
        self.write(plan, Vec::new(), true)
    }

    /// A request answered with an error no rule of its own knows. A refusal that will not
    /// pass by itself climbs the ladder (once per reconcile: not again from the plan it led
    /// to, `ladder`); anything else is retried with backoff, and so is all of an orphan's.
    fn trouble(&mut self, action: Action, answer: Answer, ladder: bool) -> Step {
        let (code, reason, message) = match answer {
            Answer::Status {
                code,
                reason,
                message,
            } => (code, reason, message),
            Answer::Lost(message) => return self.retry(action, None, message),
            Answer::Object(_) | Answer::Absent => {
                let message = "the answer lacks what the request returns".to_string();
                return self.retry(action, None, message);
            }
        };
        if !rejection::is_refusal(code) || self.orphan {
            return self.retry(action, Some(code), message);
        }
        let refusals = self.inputs.refusals.saturating_add(1);
        let next = rejection::after_refusal(refusals, action, code, &reason, &message);
        let refused = Trouble::Refused {
            action,
            code,
            reason,
            message: message.clone(),
        };
        match next {
            _ if ladder => self.end(Next::Retry(refused)),
            AfterRefusal::Retry => self.end(Next::Retry(refused)),
            AfterRefusal::GiveUp => {
                if refusals == 3 * rejection::ATTEMPTS {
                    let note = format!(
                        "the API server refuses every write for this Browser ({refused}); the operator stops trying until it changes"
                    );
                    self.done.warning = Some(note.clone());
                    self.done.events.push(Event {
                        warning: true,
                        reason: Reason::WriteRejected.into(),
                        note,
                        action: "GiveUp",
                    });
                }
                self.end(Next::AwaitChange)
            }
            AfterRefusal::Fail(failure) => {
                let plan = decide::rejected(
                    &self.observed(self.known_pod()),
                    self.inputs.settings,
                    failure,
                );
                self.write(plan, Vec::new(), true)
            }
            AfterRefusal::Abandon => {
                let plan = decide::abandoned(&self.observed(self.known_pod()), &message);
                self.write(plan, Vec::new(), true)
            }
        }
    }

    fn retry(&mut self, action: Action, code: Option<u16>, message: String) -> Step {
        self.end(Next::Retry(Trouble::Failed {
            action,
            code,
            message,
        }))
    }

    /// The operator is done with the Browser: whatever the cache still shows of it is stale.
    fn let_go(&mut self) -> Step {
        if let Some(uid) = &self.browser.metadata.uid {
            self.done.browser.push(Learnt::Gone { uid: uid.clone() });
        }
        self.end(Next::AwaitChange)
    }

    /// After the last write of `plan`: what the writes mean, what to publish and count, and
    /// when to look again.
    fn planned(&mut self, plan: &Plan, done: &[(Write, Found)]) -> Step {
        let outcome = outcome(done, holds_finalizer(&self.browser));
        let status = self.browser.data.get("status").unwrap_or(&Value::Null);
        if outcome.deletion_counted {
            self.done.deletion = Some(milestones::deletion_reason(status).to_string());
        }
        if outcome.vanished {
            // The API answered that the Browser is gone: nothing more for it.
            return self.let_go();
        }
        if let Some(desired) = &plan.status {
            self.done.running = milestones::publishes_running(status, desired);
            if desired.phase == Some(Phase::Failed) {
                self.done.failure = desired.reason.clone();
            }
        }
        self.done.left_line = plan.left_line;
        self.done.events.extend(plan.events.iter().cloned());
        if outcome.let_go {
            return self.let_go();
        }
        self.end(plan.requeue_after.map_or(Next::AwaitChange, Next::After))
    }

    fn end(&mut self, next: Next) -> Step {
        self.done.next = next;
        self.finish()
    }

    fn finish(&mut self) -> Step {
        self.waiting = Waiting::Nothing;
        Step::Done(std::mem::take(&mut self.done))
    }
}

/// An orphan's reconcile renders nothing: it decides on its pod alone.
fn no_render(_: &DynamicObject) -> PodCreation {
    PodCreation::Fail(Failure::new(Reason::InvalidConfig, "no Browser to render"))
}

fn no_browser() -> DynamicObject {
    DynamicObject {
        types: None,
        metadata: Default::default(),
        data: Value::Null,
    }
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
/// it, except the delete of the pod it controlled. (A create that found a pod, or was
/// refused, ends its plan before this is asked: what follows rested on the pod.)
fn next_write(plan: &Plan, done: &[(Write, Found)]) -> Option<Write> {
    let Some((last, found)) = done.last() else {
        return writes(plan).next();
    };
    let browser_gone = done.iter().any(|(write, found)| {
        matches!(write, Write::Metadata | Write::Status) && *found == Found::Gone
    });
    match (last, found) {
        (Write::Metadata, Found::Gone) => None,
        _ => {
            let next = writes(plan).skip_while(|w| w != last).nth(1)?;
            (!browser_gone || next == Write::DeletePod).then_some(next)
        }
    }
}

/// What the writes of a plan mean for the Browser.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Outcome {
    /// The API answered that the Browser is gone before the plan was done.
    vanished: bool,
    /// The operator is done with the Browser: deleted, finalizer released, or gone.
    let_go: bool,
    /// The Browser left the operator's hands by these writes (its finalizer came off, or it
    /// was deleted without one): its deletion is counted, once. A stale repeat finds the
    /// Browser gone and counts nothing.
    deletion_counted: bool,
}

/// What the writes `done` of a plan mean; `held_finalizer` when the Browser carried our
/// finalizer as the plan was decided.
fn outcome(done: &[(Write, Found)], held_finalizer: bool) -> Outcome {
    let mut outcome = Outcome::default();
    for (write, found) in done {
        match (write, found) {
            (Write::Metadata | Write::Status, Found::Gone) => {
                outcome.vanished = true;
                outcome.let_go = true;
            }
            (Write::DeleteBrowser, Found::Gone) => outcome.let_go = true,
            (Write::DeleteBrowser, Found::Done) => {
                outcome.let_go = true;
                outcome.deletion_counted |= !held_finalizer;
            }
            (Write::ReleaseFinalizer, found) => {
                outcome.let_go = true;
                outcome.deletion_counted |= *found == Found::Done;
            }
            _ => {}
        }
    }
    outcome
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::fixtures::{self, Fixture, browser, pod};
    use crate::lifecycle::plan::PodCreation;
    use crate::lifecycle::request::{Call, Target};

    const UID: &str = "b-uid";
    const NOW: &str = "2026-11-22T10:00:05Z";

    fn kind() -> ApiResource {
        ApiResource {
            group: "selenosis.io".into(),
            version: "v1".into(),
            api_version: "selenosis.io/v1".into(),
            kind: "Browser".into(),
            plural: "browsers".into(),
        }
    }

    /// Browser `s1` as a client creates it.
    fn client_made() -> Fixture<fixtures::Browser> {
        browser("s1")
            .namespace("ns")
            .uid(UID)
            .created("2026-11-22T10:00:00Z")
    }

    /// Browser `s1` as the operator leaves it once it has written its metadata.
    fn ours() -> Fixture<fixtures::Browser> {
        client_made().finalized().labelled()
    }

    /// The pod `s1` on node `n1`, controlled by the Browser of UID `owner`.
    fn pod_of(owner: &str) -> Fixture<fixtures::Pod> {
        pod("s1")
            .namespace("ns")
            .uid("p-uid")
            .created("2026-11-22T10:00:01Z")
            .node("n1")
            .owned_by(owner)
    }

    fn render(_: &DynamicObject) -> PodCreation {
        PodCreation::Render {
            pod: pod_of(UID).build(),
            removed: Vec::new(),
        }
    }

    /// A healthy API server's answer to `request` about `browser`: the object each request
    /// returns, nothing found by reads of the pod, deletes done at once.
    fn healthy(browser: &DynamicObject, request: &Request) -> Answer {
        let object =
            |value: Value| Answer::Object(Box::new(serde_json::from_value(value).unwrap()));
        match (&request.call, request.target) {
            (Call::Get | Call::GetMetadata, Target::Pod) => Answer::Absent,
            (Call::Get | Call::GetMetadata, _) => Answer::Object(Box::new(browser.clone())),
            (Call::Apply { body, .. }, Target::Pod) => {
                let mut pod = body.clone();
                pod["metadata"]["uid"] = json!("p-uid");
                pod["metadata"]["resourceVersion"] = json!("20");
                object(pod)
            }
            (Call::Apply { body, .. }, Target::BrowserStatus) => {
                let mut written = serde_json::to_value(browser).unwrap();
                written["status"] = body["status"].clone();
                object(written)
            }
            (Call::Apply { .. }, Target::Browser) => object(
                ours()
                    .status(browser.data.get("status").cloned().unwrap_or(json!({})))
                    .build(),
            ),
            (Call::Patch(_), _) => Answer::Object(Box::new(browser.clone())),
            (Call::Delete { .. }, _) => Answer::Absent,
        }
    }

    /// What a reconcile sent and how it ended.
    #[derive(Debug)]
    struct Run {
        sent: Vec<Action>,
        requests: Vec<Request>,
        schema_checks: usize,
        done: Done,
    }

    impl Run {
        fn status_written(&self) -> Value {
            self.requests
                .iter()
                .rev()
                .find_map(|r| match (&r.call, r.target) {
                    (Call::Apply { body, .. }, Target::BrowserStatus) => {
                        Some(body["status"].clone())
                    }
                    _ => None,
                })
                .expect("a status was written")
        }
    }

    /// Answers the requests it returns `Some` for.
    type Server = dyn FnMut(&Request) -> Option<Answer>;

    struct Case {
        browser: DynamicObject,
        pod: Option<Value>,
        refusals: u32,
        settings: Settings,
        /// Answers requests for which it returns `Some`; the healthy server the rest.
        server: Box<Server>,
        /// Whether the Pod schema changed when looked at.
        renewed: bool,
    }

    impl Case {
        fn of(browser: Fixture<fixtures::Browser>) -> Self {
            Self {
                browser: browser.object(),
                pod: None,
                refusals: 0,
                settings: Settings::default(),
                server: Box::new(|_| None),
                renewed: false,
            }
        }

        fn pod(mut self, pod: Fixture<fixtures::Pod>) -> Self {
            self.pod = Some(pod.build());
            self
        }

        fn refusals(mut self, refusals: u32) -> Self {
            self.refusals = refusals;
            self
        }

        fn answering(mut self, server: impl FnMut(&Request) -> Option<Answer> + 'static) -> Self {
            self.server = Box::new(server);
            self
        }

        fn run(self) -> Run {
            self.drive(|inputs, browser, pod| Reconcile::browser(inputs, &render, browser, pod))
        }

        fn orphan(self, pod: Fixture<fixtures::Pod>) -> Run {
            let pod = pod.build();
            self.drive(move |inputs, _, _| Reconcile::orphan(inputs, pod))
        }

        fn drive<'a>(
            mut self,
            machine: impl FnOnce(Inputs<'a>, DynamicObject, Option<Value>) -> Reconcile<'a>,
        ) -> Run {
            let kind = Box::leak(Box::new(kind()));
            let settings = Box::leak(Box::new(self.settings.clone()));
            let inputs = Inputs {
                settings,
                kind,
                now: NOW.parse().unwrap(),
                link_regained: None,
                line: Line::default(),
                refusals: self.refusals,
            };
            let mut machine = machine(inputs, self.browser.clone(), self.pod.clone());
            let (mut sent, mut requests, mut schema_checks) = (Vec::new(), Vec::new(), 0);
            let mut step = machine.start();
            loop {
                step = match step {
                    Step::Send(request) => {
                        assert!(sent.len() < 20, "endless: {sent:?}");
                        let answer = (self.server)(&request)
                            .unwrap_or_else(|| healthy(&self.browser, &request));
                        sent.push(request.action);
                        requests.push(request);
                        machine.answer(answer)
                    }
                    Step::CheckSchema => {
                        schema_checks += 1;
                        machine.schema_checked(self.renewed)
                    }
                    Step::Done(done) => {
                        return Run {
                            sent,
                            requests,
                            schema_checks,
                            done,
                        };
                    }
                };
            }
        }
    }

    use Action::{ReadBrowser, ReadPod};
    const METADATA: Action = Action::Write(Write::Metadata);
    const CREATE: Action = Action::Write(Write::CreatePod);
    const STATUS: Action = Action::Write(Write::Status);
    const DELETE_POD: Action = Action::Write(Write::DeletePod);
    const DELETE_BROWSER: Action = Action::Write(Write::DeleteBrowser);
    const RELEASE: Action = Action::Write(Write::ReleaseFinalizer);

    fn refused(code: u16, reason: &str, message: &str) -> Answer {
        Answer::status(code, reason, message)
    }

    fn reasons(done: &Done) -> Vec<&str> {
        done.events.iter().map(|e| e.reason.as_str()).collect()
    }

    #[test]
    fn a_new_browser_gets_metadata_pod_and_pending_deciding_once_on_the_metadata_answer() {
        let run = Case::of(client_made()).run();
        assert_eq!(run.sent, [METADATA, CREATE, STATUS]);
        assert_eq!(run.status_written()["phase"], "Pending");
        assert_eq!(run.done.next, Next::After(Duration::from_secs(300)));
        assert_eq!(reasons(&run.done), ["PodCreated"]);
        // What the answers taught: the Browser twice (metadata, status), the pod once.
        assert_eq!(run.done.browser.len(), 2);
        assert!(
            matches!(&run.done.pod[..], [Learnt::Object(p)] if p.metadata.uid.as_deref() == Some("p-uid"))
        );
    }

    #[test]
    fn a_create_is_decided_on_the_browser_as_the_api_server_has_it() {
        // The cache still shows no failure; the API server's copy is Failed already.
        let failed = ours().failed("ConfigNotFound").build();
        let run = Case::of(ours())
            .answering(move |r| {
                (r.action == ReadBrowser).then(|| {
                    Answer::Object(Box::new(serde_json::from_value(failed.clone()).unwrap()))
                })
            })
            .run();
        assert_eq!(run.sent, [ReadBrowser, ReadPod, DELETE_BROWSER, RELEASE]);
        assert_eq!(run.done.deletion.as_deref(), Some("ConfigNotFound"));
        assert!(matches!(run.done.browser.last(), Some(Learnt::Gone { uid }) if uid == UID));
    }

    #[test]
    fn a_create_only_apply_that_finds_a_pod_reads_it_and_decides_again() {
        let existing = pod_of(UID).phase("Pending").build();
        let run = Case::of(ours())
            .answering(move |r| match r.action {
                CREATE => Some(refused(409, "Conflict", "the object has been modified")),
                ReadPod => Some(Answer::Object(Box::new(
                    serde_json::from_value(existing.clone()).unwrap(),
                ))),
                _ => None,
            })
            .run();
        assert_eq!(run.sent, [ReadBrowser, CREATE, ReadPod, STATUS]);
        assert_eq!(run.status_written()["phase"], "Pending");
        // Its own create was not made: no PodCreated.
        assert!(reasons(&run.done).is_empty());
    }

    #[test]
    fn a_pod_missing_from_the_cache_is_read_before_any_decision_but_a_create() {
        let run = Case::of(ours().running("10.0.0.1")).run();
        // Absent on the server too: the pod it had is lost.
        assert_eq!(run.sent, [ReadPod, STATUS]);
        assert_eq!(run.status_written()["reason"], "PodLost");
    }

    #[test]
    fn a_pod_read_is_kept_like_an_answer_to_a_write() {
        // The pod watch lags behind the read: the next reconciles may still find older
        // versions in the cache, and one decided on would write an older status back.
        let mut read = pod_of(UID).running("10.0.0.7").build();
        read["metadata"]["resourceVersion"] = json!("24");
        let run = Case::of(ours().phase("Pending"))
            .answering(move |r| {
                (r.action == ReadPod).then(|| {
                    Answer::Object(Box::new(serde_json::from_value(read.clone()).unwrap()))
                })
            })
            .run();
        assert_eq!(run.sent, [ReadPod, STATUS]);
        assert_eq!(run.status_written()["phase"], "Running");
        let kept = |learnt: &Learnt| match learnt {
            Learnt::Object(pod) => pod.metadata.resource_version.clone(),
            Learnt::Gone { .. } => None,
        };
        let kept: Vec<_> = run.done.pod.iter().map(kept).collect();
        assert_eq!(kept, [Some("24".to_string())]);
        assert!(!run.done.created_pod, "read, not created");
    }

    #[test]
    fn a_uid_precondition_that_fails_means_the_browser_is_gone_and_nothing_more_is_written() {
        // 409 to the metadata apply: another Browser took the name, or none exists.
        let run = Case::of(client_made())
            .answering(|r| (r.action == METADATA).then(|| refused(409, "Conflict", "uid")))
            .run();
        assert_eq!(run.sent, [METADATA]);
        assert!(matches!(&run.done.browser[..], [Learnt::Gone { uid }] if uid == UID));
        assert!(run.done.events.is_empty());
        assert_eq!(run.done.next, Next::AwaitChange);
    }

    #[test]
    fn status_answered_404_or_409_still_deletes_the_pod_then_stops() {
        for code in [404, 409] {
            let ended =
                pod_of(UID)
                    .running("10.0.0.1")
                    .container_terminated("seleniferous", 1, "Error");
            let run = Case::of(ours().running("10.0.0.1"))
                .pod(ended)
                .answering(move |r| (r.action == STATUS).then(|| refused(code, "x", "gone")))
                .run();
            assert_eq!(run.sent, [STATUS, DELETE_POD], "{code}");
            assert!(
                run.done.events.is_empty(),
                "{code}: nothing published once gone"
            );
            assert_eq!(run.done.failure, None);
            assert!(matches!(&run.done.pod[..], [Learnt::Gone { uid }] if uid == "p-uid"));
            assert!(matches!(&run.done.browser[..], [Learnt::Gone { .. }]));
        }
    }

    #[test]
    fn status_answered_with_an_error_of_the_moment_is_retried_with_backoff() {
        for answer in [
            refused(500, "InternalError", "etcd"),
            refused(429, "TooManyRequests", "slow down"),
            Answer::Lost("connection reset".into()),
        ] {
            let run = Case::of(ours())
                .pod(pod_of(UID).phase("Pending"))
                .answering(move |r| (r.action == STATUS).then(|| answer.clone()))
                .run();
            assert!(
                matches!(
                    run.done.next,
                    Next::Retry(Trouble::Failed { action: STATUS, .. })
                ),
                "{:?}",
                run.done.next
            );
        }
    }

    #[test]
    fn each_rung_of_the_refusal_ladder() {
        let too_large = || refused(413, "RequestEntityTooLarge", "limit is 3145728");
        let status_refused = move |r: &Request| (r.action == STATUS).then(too_large);
        let case = |refusals| {
            Case::of(ours())
                .pod(pod_of(UID).phase("Pending"))
                .refusals(refusals)
                .answering(status_refused)
        };
        // First and second refusal: tried again soon.
        for earlier in [0, 1] {
            let run = case(earlier).run();
            assert!(matches!(
                run.done.next,
                Next::Retry(Trouble::Refused { code: 413, .. })
            ));
        }
        // Third: the Browser fails naming the answer (that status write is refused too here,
        // which is retried without climbing again in this reconcile).
        let run = case(2).run();
        assert_eq!(run.sent, [STATUS, STATUS]);
        assert_eq!(run.status_written()["reason"], "WriteRejected");
        assert!(
            run.status_written()["message"]
                .as_str()
                .unwrap()
                .starts_with("the API server refused to apply Browser status 3 times: 413")
        );
        assert!(matches!(
            run.done.next,
            Next::Retry(Trouble::Refused { .. })
        ));
        // Had the failure gone through, its Events and the failure are counted.
        let accepted = Case::of(ours())
            .pod(pod_of(UID).phase("Pending"))
            .refusals(2)
            .answering({
                let mut first = true;
                move |r| (r.action == STATUS && std::mem::take(&mut first)).then(too_large)
            })
            .run();
        assert_eq!(accepted.done.failure.as_deref(), Some("WriteRejected"));
        assert_eq!(reasons(&accepted.done), ["WriteRejected"]);
        // Sixth: even the failure cannot be written: the pod forced, the Browser deleted.
        let run = case(5).run();
        assert_eq!(run.sent, [STATUS, DELETE_POD, DELETE_BROWSER, RELEASE]);
        assert_eq!(
            run.requests[1].call,
            Call::Delete {
                uid: "p-uid".into(),
                grace_seconds: Some(0)
            }
        );
        // Ninth: nothing more until the Browser changes, said once.
        let run = case(8).run();
        assert_eq!(run.sent, [STATUS]);
        assert_eq!(run.done.next, Next::AwaitChange);
        assert_eq!(reasons(&run.done), ["WriteRejected"]);
        assert!(run.done.warning.is_some());
        let run = case(9).run();
        assert!(run.done.events.is_empty() && run.done.warning.is_none());
    }

    #[test]
    fn a_refused_read_climbs_the_ladder_too() {
        let run = Case::of(ours().running("10.0.0.1"))
            .refusals(2)
            .answering(|r| (r.action == ReadPod).then(|| refused(403, "Forbidden", "no")))
            .run();
        assert_eq!(run.sent, [ReadPod, STATUS]);
        assert!(
            run.status_written()["message"]
                .as_str()
                .unwrap()
                .starts_with("the API server refused to read pod 3 times: 403 Forbidden")
        );
    }

    #[test]
    fn a_create_refused_for_a_field_the_schema_lacks_looks_at_the_schema_first() {
        let unknown = ".spec.hostUsers: field not declared in schema";
        let create_refused = move |code| {
            move |r: &Request| (r.action == CREATE).then(|| refused(code, "x", unknown))
        };
        // The schema changed since the pod was pruned: prune anew, next time.
        let mut case = Case::of(ours()).answering(create_refused(422));
        case.renewed = true;
        let run = case.run();
        assert_eq!(run.schema_checks, 1);
        assert_eq!(run.sent, [ReadBrowser, CREATE]);
        assert!(matches!(
            run.done.next,
            Next::Retry(Trouble::StaleSchema(_))
        ));
        // The same schema: the cluster judged the pod. 422 fails it, ...
        let run = Case::of(ours()).answering(create_refused(422)).run();
        assert_eq!(run.schema_checks, 1);
        assert_eq!(run.sent, [ReadBrowser, CREATE, STATUS]);
        assert_eq!(run.status_written()["reason"], "InvalidPodSpec");
        // ... a 500 (before 1.25) is retried.
        let run = Case::of(ours()).answering(create_refused(500)).run();
        assert!(matches!(
            run.done.next,
            Next::Retry(Trouble::Failed {
                code: Some(500),
                ..
            })
        ));
    }

    #[test]
    fn a_refused_create_fails_the_browser_or_is_retried() {
        let run = Case::of(ours())
            .answering(|r| {
                (r.action == CREATE).then(|| refused(403, "Forbidden", "violates PodSecurity"))
            })
            .run();
        assert_eq!(run.sent, [ReadBrowser, CREATE, STATUS]);
        assert_eq!(run.status_written()["reason"], "Forbidden");
        assert_eq!(run.done.failure.as_deref(), Some("Forbidden"));
        assert_eq!(run.schema_checks, 0);
        // Refused for a reason no rule knows: the ladder's first rung.
        let run = Case::of(ours())
            .answering(|r| (r.action == CREATE).then(|| refused(413, "TooLarge", "big")))
            .run();
        assert!(matches!(
            run.done.next,
            Next::Retry(Trouble::Refused { action: CREATE, .. })
        ));
    }

    #[test]
    fn a_quota_refusal_puts_the_browser_in_line() {
        let message = "pods \"s1\" is forbidden: exceeded quota: team-a, requested: pods=1, used: pods=2, limited: pods=2";
        let run = Case::of(ours())
            .answering(move |r| (r.action == CREATE).then(|| refused(403, "Forbidden", message)))
            .run();
        assert_eq!(run.sent, [ReadBrowser, CREATE, STATUS]);
        let status = run.status_written();
        assert_eq!(
            (status["phase"].as_str(), status["reason"].as_str()),
            (Some("Pending"), Some("Queued"))
        );
        assert_eq!(reasons(&run.done), ["Queued"]);
        assert_eq!(run.done.failure, None);
        // With --queue-timeout=0 it fails at once.
        let mut case = Case::of(ours())
            .answering(move |r| (r.action == CREATE).then(|| refused(403, "Forbidden", message)));
        case.settings.queue_timeout = Duration::ZERO;
        assert_eq!(case.run().status_written()["reason"], "QuotaExceeded");
    }

    #[test]
    fn decisions_overtaken_again_and_again_end_unsettled() {
        // Every create finds a pod, every read finds none.
        let run = Case::of(ours())
            .answering(|r| (r.action == CREATE).then(|| refused(409, "AlreadyExists", "exists")))
            .run();
        assert_eq!(
            run.sent,
            [
                ReadBrowser,
                CREATE,
                ReadPod,
                CREATE,
                ReadPod,
                CREATE,
                ReadPod
            ]
        );
        assert_eq!(run.done.next, Next::Retry(Trouble::Unsettled));
    }

    #[test]
    fn the_orphan_sweep_confirms_the_browser_is_gone_before_deleting_its_pod() {
        let orphan = || pod_of(UID).running("10.0.0.1");
        // The Browser exists after all: the cache is behind; nothing is deleted.
        let run = Case::of(ours()).orphan(orphan());
        assert_eq!(run.sent, [ReadBrowser]);
        assert_eq!(run.requests[0].call, Call::GetMetadata);
        assert_eq!(run.done.next, Next::AwaitChange);
        // Gone: the pod is deleted with its grace period, and looked at again at the timeout.
        let run = Case::of(ours())
            .answering(|r| (r.action == ReadBrowser).then_some(Answer::Absent))
            .orphan(orphan());
        assert_eq!(run.sent, [ReadBrowser, DELETE_POD]);
        assert_eq!(
            run.requests[1].call,
            Call::Delete {
                uid: "p-uid".into(),
                grace_seconds: None
            }
        );
        assert!(matches!(&run.done.pod[..], [Learnt::Gone { .. }]));
        assert_eq!(run.done.next, Next::After(Duration::from_secs(300)));
        // A refusal is retried with backoff, never laddered: there is no Browser to fail.
        let run = Case::of(ours())
            .refusals(5)
            .answering(|r| match r.action {
                ReadBrowser => Some(Answer::Absent),
                _ => Some(refused(403, "Forbidden", "no")),
            })
            .orphan(orphan());
        assert!(matches!(
            run.done.next,
            Next::Retry(Trouble::Failed {
                code: Some(403),
                ..
            })
        ));
    }

    #[test]
    fn a_browser_being_deleted_waits_for_its_pod_then_releases_the_finalizer() {
        let deleting = || ours().running("10.0.0.1").deleting("2026-11-22T10:00:04Z");
        let live = pod_of(UID).running("10.0.0.1");
        let run = Case::of(deleting())
            .pod(live)
            .answering(|r| {
                (r.action == DELETE_POD)
                    .then(|| Answer::Object(Box::new(pod_of(UID).deleting(NOW, 30).object())))
            })
            .run();
        assert_eq!(run.sent, [DELETE_POD]);
        assert!(matches!(&run.done.pod[..], [Learnt::Object(_)]));
        assert!(run.done.deletion.is_none());
        // The pod is gone: the finalizer comes off and the deletion is counted once.
        let run = Case::of(deleting()).run();
        assert_eq!(run.sent, [ReadPod, RELEASE]);
        assert_eq!(run.done.deletion.as_deref(), Some("external"));
        // A stale repeat finds nothing to release: counted nothing.
        let run = Case::of(deleting())
            .answering(|r| (r.action == RELEASE).then(|| refused(404, "NotFound", "gone")))
            .run();
        assert_eq!(run.done.deletion, None);
        assert!(matches!(run.done.browser.last(), Some(Learnt::Gone { .. })));
    }

    #[test]
    fn the_first_running_is_counted_once() {
        let running = || {
            pod_of(UID)
                .running("10.0.0.1")
                .container_running("browser", NOW)
        };
        let run = Case::of(ours().phase("Pending")).pod(running()).run();
        assert_eq!(run.sent, [STATUS]);
        assert!(run.done.running);
        assert_eq!(reasons(&run.done), ["Running"]);
        let shown = Case::of(ours().running("10.0.0.1")).pod(running()).run();
        assert!(!shown.done.running);
    }
}
