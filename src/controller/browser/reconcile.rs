//! One Browser reconcile: the Browser and its pod as the caches and read-your-writes know
//! them, the step machine of `lifecycle::reconcile` run against the API (`send`), and what
//! it ended with: what its answers taught remembered, its milestones counted, its Events
//! handed to the publisher, and when to look again.

use std::sync::Arc;

use jiff::Timestamp;
use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde_json::Value;
use tracing::{Instrument, debug, info_span, warn};

use super::fresher::Known;
use super::line::Standing;
use super::send::Apis;
use super::{ReconcileError, Scope};
use crate::cached::CachedBrowser;
use crate::lifecycle::decide::Line;
use crate::lifecycle::desired;
use crate::lifecycle::plan::PodCreation;
use crate::lifecycle::queue;
use crate::lifecycle::reconcile::{Done, Inputs, Learnt, Next, Reconcile, Step};
use crate::metrics::Stage;

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
    let result = match run(&scope, &ns, &name).instrument(span).await? {
        Some((done, browser)) => finish(&scope, &ns, &name, done, &browser),
        None => Ok(Action::await_change()),
    };
    if result.is_ok() {
        scope.succeeded(&(ns, name));
    }
    result
}

/// A Browser and its pod (`None` when the cache lacks it).
type View = (Arc<DynamicObject>, Option<Value>);

/// The Browser and its pod as the caches and the last answers know them (`None` once the
/// Browser is gone or let go of).
fn view(scope: &Scope, ns: &str, name: &str) -> Result<Option<View>, ReconcileError> {
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
        .map(|pod| serde_json::to_value(&*pod))
        .transpose()
        .map_err(ReconcileError::Serialize)?;
    Ok(Some((browser, pod)))
}

/// Runs the step machine for the Browser `ns`/`name`, sending what it asks for; how it
/// ended, and the Browser it started from (`None`: there is none to reconcile).
async fn run(
    scope: &Scope,
    ns: &str,
    name: &str,
) -> Result<Option<(Done, Arc<DynamicObject>)>, ReconcileError> {
    let Some((browser, pod)) = view(scope, ns, name)? else {
        return Ok(None);
    };
    let shared = &scope.shared;
    let schema = shared.schemas.current();
    let (ahead, arriving, quotas) = scope.line_of(ns, &browser);
    let inputs = Inputs {
        settings: &shared.settings,
        kind: &shared.kinds.browser,
        now: Timestamp::now(),
        link_regained: shared.link.state().regained,
        line: Line {
            ahead,
            arriving,
            quotas: &quotas,
        },
        refusals: scope.refusals(&(ns.to_string(), name.to_string())),
    };
    let render = |browser: &DynamicObject| -> PodCreation {
        let configs: Vec<Arc<DynamicObject>> = scope
            .configs
            .state()
            .into_iter()
            .filter(|c| c.metadata.namespace.as_deref() == Some(ns))
            .collect();
        desired::pod_for(
            browser,
            &configs,
            &shared.kinds.browser,
            &shared.settings.policy,
            schema.as_deref(),
            |config, name, version| shared.verdicts.rejection(ns, config, name, version),
        )
    };
    let apis = Apis {
        browsers: scope.api(&shared.kinds.browser, ns),
        pods: scope.api(&shared.kinds.pod, ns),
        name,
        metrics: &shared.metrics,
        created: browser.metadata.creation_timestamp.as_ref().map(|t| t.0),
    };
    let mut machine = Reconcile::browser(inputs, &render, (*browser).clone(), pod);
    let mut step = machine.start();
    loop {
        step = match step {
            Step::Send(request) => {
                debug!(request = %request.action, "sending");
                machine.answer(apis.send(&request).await)
            }
            Step::CheckSchema => {
                machine.schema_checked(shared.schemas.renewed_since(schema.as_deref()).await)
            }
            Step::Done(done) => return Ok(Some((done, browser))),
        };
    }
}

/// What follows the end of a reconcile: what its answers taught is remembered, its
/// milestones counted, its Events published; then when to look again.
fn finish(
    scope: &Scope,
    ns: &str,
    name: &str,
    done: Done,
    browser: &DynamicObject,
) -> Result<Action, ReconcileError> {
    let shared = &scope.shared;
    for learnt in &done.browser {
        match learnt {
            Learnt::Object(written) => {
                // Its place in line shows at once, before the watch brings the write back: a
                // Browser decided meanwhile does not overtake it.
                let created = written.metadata.creation_timestamp.as_ref().map(|t| t.0);
                let status = written.data.get("status").unwrap_or(&Value::Null);
                let waits = queue::queued_since(status, created).and(created);
                scope
                    .lines
                    .note(ns, name, waits.map(|created| (Standing::Waiting, created)));
                scope.fresher.remember_browser(
                    ns,
                    name,
                    Known::Object(Arc::new((**written).clone())),
                );
            }
            Learnt::Gone { uid } => {
                scope.lines.note(ns, name, None);
                scope
                    .fresher
                    .remember_browser(ns, name, Known::Gone { uid: uid.clone() });
            }
        }
    }
    for learnt in &done.pod {
        let known = match learnt {
            Learnt::Object(pod) => Known::Object(Arc::new((**pod).clone())),
            Learnt::Gone { uid } => Known::Gone { uid: uid.clone() },
        };
        scope.fresher.remember_pod(ns, name, known);
    }
    if let Some(reason) = &done.deletion {
        shared.metrics.deletion(reason);
    }
    if let Some(reason) = &done.failure {
        shared.metrics.failure(reason);
    }
    if let Some(left) = done.left_line {
        shared.metrics.left_line(left);
    }
    if done.running
        && let Some(created) = &browser.metadata.creation_timestamp
    {
        shared
            .metrics
            .startup(Stage::Running, created.0, Timestamp::now());
    }
    if let Some(warning) = &done.warning {
        warn!(namespace = ns, name, "{warning}");
    }
    if !done.events.is_empty() {
        let reference = browser.object_ref(&shared.kinds.browser);
        for event in done.events {
            shared.events.publish(event, reference.clone());
        }
    }
    match done.next {
        Next::AwaitChange => Ok(Action::await_change()),
        Next::After(wait) => Ok(Action::requeue(wait)),
        Next::Retry(trouble) => Err(ReconcileError::Trouble(trouble)),
    }
}
