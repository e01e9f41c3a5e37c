//! One Browser reconcile: observe (caches, read-your-writes, reads where the caches cannot
//! be trusted), decide (`lifecycle::decide`, pure), execute (`execute`), remember
//! what the writes returned, and hand the Events to the publisher.
//!
//! A decision is taken again when what it rests on gets confirmed: a pod absent from the
//! cache is read before any decision other than a create (a create checks absence itself:
//! it is refused when a pod of that name exists), and a create is decided on the Browser as
//! the API server has it.

use std::sync::Arc;

use jiff::Timestamp;
use kube::api::{Api, DynamicObject};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde_json::Value;
use tracing::{Instrument, debug, info_span, warn};

use super::execute::{ExecuteError, Executed, Target};
use super::fresher::Known;
use super::line::Standing;
use super::{ReconcileError, Scope, triggers};
use crate::api::browser::Phase;
use crate::cached::CachedBrowser;
use crate::controller::Shared;
use crate::lifecycle::answers::{
    self, AfterCreateRefused, AfterSchemaCheck, BeforeWriting, CreateRefusal,
};
use crate::lifecycle::decide::{self, Line, Observed};
use crate::lifecycle::desired;
use crate::lifecycle::milestones;
use crate::lifecycle::plan::{Plan, PodCreation};
use crate::lifecycle::queue;
use crate::lifecycle::rejection::{self, AfterRefusal, Write};
use crate::metrics::Stage;

/// Decisions one reconcile takes at most: the first, after reading the pod, after confirming
/// the Browser, after a create refused because a pod of that name exists (then read).
const ROUNDS: usize = 4;

/// What a decision rests on.
struct View {
    browser: Arc<DynamicObject>,
    /// The Browser came from the API server in this reconcile (not from a cache).
    browser_current: bool,
    /// The pod: seen (in the cache, or read; `None` when confirmed absent), or not in the
    /// cache and not read yet (taken as absent until a decision needs it confirmed).
    pod: Option<Option<Value>>,
}

impl View {
    fn pod(&self) -> Option<&Value> {
        self.pod.as_ref().and_then(Option::as_ref)
    }
}

pub(super) async fn reconcile(
    browser: Arc<CachedBrowser>,
    scope: Arc<Scope>,
) -> Result<Action, ReconcileError> {
    let ns = browser.namespace().unwrap_or_default();
    let name = browser.name_any();
    drop(browser);
    let _running = scope.admission.start(&(ns.clone(), name.clone()));
    let _guard = scope.shared.metrics.reconcile_started();
    // No decision before the stores are complete: no spurious ConfigNotFound at start-up.
    if !scope.configs_health.synced().await {
        return Err(ReconcileError::StoreClosed("BrowserConfig"));
    }
    if !scope.pods_health.synced().await {
        return Err(ReconcileError::StoreClosed("Pod"));
    }
    if !scope.quotas_health.synced().await {
        return Err(ReconcileError::StoreClosed("ResourceQuota"));
    }
    // A burst (or the start over thousands of Browsers) waits here, small: the reconcile's
    // own state is built only once a worker is free.
    let _worker = scope
        .shared
        .workers
        .acquire((ns.clone(), name.clone()), || scope.lane(&ns, &name))
        .await;
    let span = info_span!("reconcile", namespace = %ns, name = %name);
    let result = async {
        match Box::pin(reconcile_inner(&scope, &ns, &name)).await {
            Err(error) => Box::pin(after_refusal(&scope, &ns, &name, error)).await,
            done => done,
        }
    }
    .instrument(span)
    .await;
    if result.is_ok() {
        scope.succeeded(&(ns, name));
    }
    result
}

/// A write the API server refused for a reason no rule knows: counted, and what follows is
/// `rejection::after_refusal`'s to say (retry; fail the Browser naming the answer; delete it;
/// stop). Any other error is retried with backoff as it is.
async fn after_refusal(
    scope: &Scope,
    ns: &str,
    name: &str,
    error: ReconcileError,
) -> Result<Action, ReconcileError> {
    let Some((write, status)) = error.refusal() else {
        return Err(error);
    };
    let refusals = scope.refused(&(ns.to_string(), name.to_string()));
    let next = rejection::after_refusal(
        refusals,
        write,
        status.code,
        &status.reason,
        &status.message,
    );
    let failure = match next {
        AfterRefusal::Retry => return Err(error),
        AfterRefusal::GiveUp => {
            if refusals == 3 * rejection::ATTEMPTS {
                warn!(refusals, error = %error, "the API server refuses every write for this Browser; giving up until it changes");
                if let Some(view) = current_view(scope, ns, name)? {
                    let reference = view.browser.object_ref(&scope.shared.kinds.browser);
                    let event = crate::lifecycle::plan::Event {
                        warning: true,
                        reason: crate::lifecycle::reason::Reason::WriteRejected.into(),
                        note: format!(
                            "the API server refuses every write for this Browser ({error}); the operator stops trying until it changes"
                        ),
                        action: "GiveUp",
                    };
                    scope.shared.events.publish(event, reference);
                }
            }
            return Ok(Action::await_change());
        }
        AfterRefusal::Fail(failure) => Some(failure),
        AfterRefusal::Abandon => None,
    };
    let Some(view) = current_view(scope, ns, name)? else {
        return Ok(Action::await_change());
    };
    let (ahead, arriving, quotas) = scope.line_of(ns, &view.browser);
    let observed = Observed {
        browser: &view.browser,
        pod: view.pod(),
        now: Timestamp::now(),
        link_regained: scope.shared.link.state().regained,
        line: Line {
            ahead,
            arriving,
            quotas: &quotas,
        },
    };
    let plan = match failure {
        Some(failure) => decide::rejected(&observed, &scope.shared.settings, failure),
        // Even the failure cannot be written.
        None => decide::abandoned(&observed, &status.message),
    };
    execute_failure(scope, ns, name, &view, &plan).await
}

/// Executes a plan that fails (or lets go of) the Browser outside the usual decision, after
/// a write refused for good, or puts it in line after a quota refused its pod; and what
/// follows it: read-your-writes, the failure's metrics and its Events.
async fn execute_failure(
    scope: &Scope,
    ns: &str,
    name: &str,
    view: &View,
    plan: &Plan,
) -> Result<Action, ReconcileError> {
    log_plan(plan);
    let shared = &scope.shared;
    let pods_api = scope.api(&shared.kinds.pod, ns);
    let browsers_api = scope.api(&shared.kinds.browser, ns);
    let executed = target(shared, &browsers_api, &pods_api, &view.browser)
        .execute(plan)
        .await?;
    Ok(after_writes(scope, ns, name, view, plan, &executed))
}

/// What follows a plan's writes: what they returned is remembered; unless the Browser is
/// gone, its failure and `Running` are counted and the plan's Events go to the publisher.
fn after_writes(
    scope: &Scope,
    ns: &str,
    name: &str,
    view: &View,
    plan: &Plan,
    executed: &Executed,
) -> Action {
    let shared = &scope.shared;
    remember(scope, ns, name, &view.browser, executed);
    if executed.outcome.vanished {
        // The API answered that the Browser is gone: nothing more for it.
        return Action::await_change();
    }
    publish_failures(shared, plan);
    observe_running(shared, &view.browser, plan);
    if let Some(left) = plan.left_line {
        shared.metrics.left_line(left);
    }
    if !plan.events.is_empty() {
        let reference = view.browser.object_ref(&shared.kinds.browser);
        for event in plan.events.iter().cloned() {
            shared.events.publish(event, reference.clone());
        }
    }
    plan.requeue_after
        .map_or_else(Action::await_change, Action::requeue)
}

/// The Browser and its pod as the caches and the last writes know them (`None` once the
/// Browser is gone or let go of).
fn current_view(scope: &Scope, ns: &str, name: &str) -> Result<Option<View>, ReconcileError> {
    let shared = &scope.shared;
    let browser_ref = ObjectRef::new_with(name, shared.cached.browser.clone()).within(ns);
    let Some(cached) = scope.browsers.get(&browser_ref) else {
        return Ok(None);
    };
    let Some(browser) = scope
        .fresher
        .pick_browser(ns, name, &cached, &shared.kinds.browser)
    else {
        return Ok(None);
    };
    let pod_ref = ObjectRef::new_with(name, shared.cached.pod.clone()).within(ns);
    let pod = scope
        .fresher
        .pick_pod(
            ns,
            name,
            scope.pods.get(&pod_ref).as_deref(),
            &shared.kinds.pod,
        )
        .map(|pod| pod_json(&pod))
        .transpose()?;
    Ok(Some(View {
        browser,
        browser_current: false,
        pod: pod.map(Some),
    }))
}

async fn reconcile_inner(scope: &Scope, ns: &str, name: &str) -> Result<Action, ReconcileError> {
    let shared = &scope.shared;
    // The Browser as the cache has it now, after the wait for a worker (gone, or let go of
    // already while the cache still shows it: nothing to do).
    let Some(mut view) = current_view(scope, ns, name)? else {
        return Ok(Action::await_change());
    };
    let pods_api = scope.api(&shared.kinds.pod, ns);
    let browsers_api = scope.api(&shared.kinds.browser, ns);
    let now = Timestamp::now();
    let link_regained = shared.link.state().regained;
    let schema = shared.schemas.current();
    let (ahead, arriving, quotas) = scope.line_of(ns, &view.browser);
    // Rendered at most once, however often the decision is taken.
    let mut rendered: Option<PodCreation> = None;
    let mut decide_on = |view: &View| {
        let observed = Observed {
            browser: &view.browser,
            pod: view.pod(),
            now,
            link_regained,
            line: Line {
                ahead,
                arriving,
                quotas: &quotas,
            },
        };
        decide::decide(&observed, &shared.settings, || {
            rendered
                .get_or_insert_with(|| {
                    let configs: Vec<Arc<DynamicObject>> = scope
                        .configs
                        .state()
                        .into_iter()
                        .filter(|c| c.metadata.namespace.as_deref() == Some(ns))
                        .collect();
                    desired::pod_for(
                        &view.browser,
                        &configs,
                        &shared.kinds.browser,
                        &shared.settings.policy,
                        schema.as_deref(),
                        |config, name, version| {
                            shared.verdicts.rejection(ns, config, name, version)
                        },
                    )
                })
                .clone()
        })
    };
    let read_pod = || async {
        let pod = pods_api
            .get_opt(name)
            .await
            .map_err(|source| ReconcileError::ReadPod {
                name: name.to_string(),
                source,
            })?;
        pod.map(|mut pod| {
            triggers::strip_managed_fields(&mut pod);
            pod_json(&pod)
        })
        .transpose()
    };

    for _ in 0..ROUNDS {
        let plan = decide_on(&view);
        let target = target(shared, &browsers_api, &pods_api, &view.browser);
        match answers::before_writing(&plan, view.pod.is_some(), view.browser_current) {
            BeforeWriting::ReadPod => {
                view.pod = Some(read_pod().await?);
                continue;
            }
            BeforeWriting::ConfirmBrowser => {
                match target.current_browser(plan.ensure_metadata).await? {
                    Some(current) => {
                        let current = Arc::new(current);
                        scope
                            .fresher
                            .remember_browser(ns, name, Known::Object(current.clone()));
                        view.browser = current;
                        view.browser_current = true;
                        continue;
                    }
                    None => {
                        let_go(scope, ns, name, &view.browser);
                        return Ok(Action::await_change());
                    }
                }
            }
            BeforeWriting::Write => {}
        }
        log_plan(&plan);
        let executed = target.execute(&plan).await?;
        if executed.outcome.pod_exists {
            view.pod = Some(read_pod().await?);
            continue;
        }
        return finish(scope, ns, name, &view, &plan, executed, schema.as_deref()).await;
    }
    Err(ReconcileError::Unsettled)
}

/// After the plan's writes: a refused create is followed as `answers` says (the Browser's
/// failure, a retry, or a retry with the Pod schema renewed); what the writes returned is
/// remembered; the Events go to the publisher.
async fn finish(
    scope: &Scope,
    ns: &str,
    name: &str,
    view: &View,
    plan: &Plan,
    mut executed: Executed,
    schema: Option<&crate::pod::schema::PodSchema>,
) -> Result<Action, ReconcileError> {
    let shared = &scope.shared;
    if let Some(status) = executed.create_refusal.take() {
        let refusal = match answers::after_create_refused(status.code, &status.message) {
            AfterCreateRefused::Then(refusal) => refusal,
            AfterCreateRefused::CheckSchema => {
                let renewed = shared.schemas.renewed_since(schema).await;
                match answers::after_schema_check(renewed, status.code, &status.message) {
                    AfterSchemaCheck::PruneAgain => {
                        return Err(ReconcileError::StaleSchema(status.message));
                    }
                    AfterSchemaCheck::Then(refusal) => refusal,
                }
            }
        };
        let (ahead, arriving, quotas) = scope.line_of(ns, &view.browser);
        let observed = Observed {
            browser: &view.browser,
            pod: view.pod(),
            now: Timestamp::now(),
            link_regained: shared.link.state().regained,
            line: Line {
                ahead,
                arriving,
                quotas: &quotas,
            },
        };
        return match refusal {
            CreateRefusal::Fail(failure) => {
                let rejected = decide::rejected(&observed, &shared.settings, failure);
                execute_failure(scope, ns, name, view, &rejected).await
            }
            CreateRefusal::Queue => {
                let queued = decide::refused_by_quota(&observed, &shared.settings, &status.message);
                execute_failure(scope, ns, name, view, &queued).await
            }
            CreateRefusal::Retry => Err(ExecuteError::Api {
                write: Write::CreatePod,
                source: kube::Error::Api(status),
            }
            .into()),
        };
    }
    Ok(after_writes(scope, ns, name, view, plan, &executed))
}

fn pod_json(pod: &DynamicObject) -> Result<Value, ReconcileError> {
    serde_json::to_value(pod).map_err(ReconcileError::Serialize)
}

fn target<'a>(
    shared: &'a Shared,
    browsers: &'a Api<DynamicObject>,
    pods: &'a Api<DynamicObject>,
    browser: &'a DynamicObject,
) -> Target<'a> {
    Target {
        browsers,
        pods,
        browser_resource: &shared.kinds.browser,
        browser,
        metrics: &shared.metrics,
    }
}

/// The operator is done with `browser`: whatever the cache still shows of it is ignored.
fn let_go(scope: &Scope, ns: &str, name: &str, browser: &DynamicObject) {
    if let Some(uid) = &browser.metadata.uid {
        scope
            .fresher
            .remember_browser(ns, name, Known::Gone { uid: uid.clone() });
    }
}

/// What a reconcile decided to write, at debug level (cheap: flags and the phase only).
fn log_plan(plan: &Plan) {
    let status = plan.status.as_ref();
    debug!(
        ensure_metadata = plan.ensure_metadata,
        adopt_pod = plan.adopt_pod.is_some(),
        create_pod = plan.create_pod.is_some(),
        status_phase = status.and_then(|s| s.phase).map(Phase::as_str),
        status_reason = status.and_then(|s| s.reason.as_deref()),
        delete_pod_grace = ?plan.delete_pod.as_ref().map(|d| d.grace_seconds),
        delete_browser = plan.delete_browser,
        release_finalizer = plan.release_finalizer,
        requeue_after = ?plan.requeue_after,
        "decided"
    );
}

/// The `running` startup stage, in the one reconcile that first publishes `Running`.
fn observe_running(shared: &Shared, browser: &DynamicObject, plan: &Plan) {
    let current = browser.data.get("status").unwrap_or(&Value::Null);
    if let Some(desired) = &plan.status
        && milestones::publishes_running(current, desired)
        && let Some(created) = &browser.metadata.creation_timestamp
    {
        shared
            .metrics
            .startup(Stage::Running, created.0, Timestamp::now());
    }
}

fn publish_failures(shared: &Shared, plan: &Plan) {
    if let Some(reason) = plan
        .status
        .as_ref()
        .filter(|s| s.phase == Some(Phase::Failed))
        .and_then(|s| s.reason.as_deref())
    {
        shared.metrics.failure(reason);
    }
}

fn remember(scope: &Scope, ns: &str, name: &str, browser: &DynamicObject, executed: &Executed) {
    if executed.outcome.let_go {
        scope.lines.note(ns, name, None);
        let_go(scope, ns, name, browser);
    } else if let Some(written) = &executed.browser {
        // Its place in line shows at once, before the watch brings the write back: a Browser
        // decided meanwhile does not overtake it.
        let created = written.metadata.creation_timestamp.as_ref().map(|t| t.0);
        let status = written.data.get("status").unwrap_or(&Value::Null);
        let waits = queue::queued_since(status, created).and(created);
        scope
            .lines
            .note(ns, name, waits.map(|created| (Standing::Waiting, created)));
        scope
            .fresher
            .remember_browser(ns, name, Known::Object(Arc::new(written.clone())));
    }
    if let Some(pod) = &executed.pod {
        scope
            .fresher
            .remember_pod(ns, name, Known::Object(Arc::new(pod.clone())));
    }
    if let Some(uid) = &executed.pod_deleted {
        scope
            .fresher
            .remember_pod(ns, name, Known::Gone { uid: uid.clone() });
    }
}
