//! The work of the Browser controller: one work queue for every scope (`workqueue::WorkQueue`
//! behind a lock: keys added by the watches and by reconciles that asked to be looked at
//! again, moved in by a timer when a delayed key is due; a waiting Browser costs its key),
//! `--max-workers` workers that take keys as the lanes and their caps allow, and one
//! reconcile: it begins from what its scope's index says, runs the step machine of
//! `lifecycle::reconcile` (sending each request exactly as it says and feeding back the
//! answer), and ends through the index; then the queue hears when to look again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use kube::Resource;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use serde_json::Value;
use tokio::sync::Notify;
use tracing::{Instrument, debug, info_span, warn};

use super::scope::Scope;
use crate::controller::Shared;
use crate::decoded::FromIdentity;
use crate::index::{Begun, Key};
use crate::lifecycle::decide::Line;
use crate::lifecycle::desired;
use crate::lifecycle::lane::Lane;
use crate::lifecycle::plan::PodCreation;
use crate::lifecycle::reconcile::{Done, Inputs, Next, Reconcile, Step, Trouble};
use crate::lifecycle::request::{Action, Answer, Call, Request, Target, Write};
use crate::link::error::describe;
use crate::metrics::{ApiWrite, ErrorKind, Metrics, Stage};
use crate::workqueue::WorkQueue;

/// The work queue of the Browser reconciles (`workqueue::WorkQueue`) behind a lock.
pub struct Queue {
    workers: usize,
    state: Mutex<WorkQueue<Key, Instant>>,
    /// A worker may find work.
    work: Notify,
    /// A delayed key is due sooner than the timer sleeps.
    sooner: Notify,
    stopped: AtomicBool,
    metrics: Arc<Metrics>,
}

impl Queue {
    pub fn new(workers: usize, metrics: Arc<Metrics>) -> Self {
        let workers = workers.max(1);
        Self {
            workers,
            state: Mutex::new(WorkQueue::new(workers)),
            work: Notify::new(),
            sooner: Notify::new(),
            stopped: AtomicBool::new(false),
            metrics,
        }
    }

    /// `--max-workers`.
    pub fn workers(&self) -> usize {
        self.workers
    }

    fn state(&self) -> MutexGuard<'_, WorkQueue<Key, Instant>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Publishes how many keys wait in each lane; called under the lock, so that the gauges
    /// follow the order of the changes.
    fn count(&self, state: &WorkQueue<Key, Instant>) {
        for (lane, waiting) in Lane::ALL.into_iter().zip(state.waiting()) {
            self.metrics.waiting(lane, waiting);
        }
    }

    /// The Browsers of `keys` need a reconcile now, each in its lane: each joins its lane, or
    /// moves to it keeping its place when it waits already, or waits for the reconcile of it
    /// under way to end.
    pub fn add(&self, keys: impl IntoIterator<Item = (Key, Lane)>) {
        let mut state = self.state();
        for (key, lane) in keys {
            state.add(key, lane);
        }
        self.count(&state);
        drop(state);
        self.work.notify_one();
    }

    /// The next key a worker reconciles, with the lane it is counted in; `None` once the
    /// queue is stopped.
    pub async fn take(&self) -> Option<(Key, Lane)> {
        loop {
            let notified = self.work.notified();
            if self.stopped.load(Ordering::SeqCst) {
                return None;
            }
            let taken = {
                let mut state = self.state();
                let taken = state.take();
                let more = state.has_work();
                self.count(&state);
                taken.map(|work| (work, more))
            };
            if let Some((work, more)) = taken {
                // One wake-up may stand for several adds: pass it on.
                if more {
                    self.work.notify_one();
                }
                return Some(work);
            }
            notified.await;
        }
    }

    /// The reconcile of `key` is done; it is looked at again after `again`, if given.
    pub fn done(&self, key: &Key, again: Option<Duration>) {
        let mut state = self.state();
        let due_before = state.next_due();
        state.done(key, again.map(|wait| Instant::now() + wait));
        let sooner = state
            .next_due()
            .is_some_and(|due| due_before.is_none_or(|d| due < d));
        self.count(&state);
        drop(state);
        if sooner {
            self.sooner.notify_one();
        }
        // Its worker is free, and its lane has room again.
        self.work.notify_one();
    }

    /// Counts a failure of `key`'s reconcile; how long until it is tried again.
    pub fn backoff(&self, key: &Key) -> Duration {
        self.state().backoff(key)
    }

    /// `key`'s reconcile succeeded.
    pub fn forget(&self, key: &Key) {
        self.state().forget(key);
    }

    /// Every backoff starts anew.
    pub fn forget_all(&self) {
        self.state().forget_all();
    }

    /// Takes no more work: workers waiting for some end.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.work.notify_waiters();
    }

    /// Moves delayed keys in as they come due, each in the lane `lane_of` says it needs then,
    /// until the queue stops.
    pub async fn run_timer(&self, lane_of: impl Fn(&Key) -> Lane) {
        while !self.stopped.load(Ordering::SeqCst) {
            let sooner = self.sooner.notified();
            let due = self.state().next_due();
            match due {
                Some(due) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(due.into()) => {}
                        () = sooner => continue,
                    }
                }
                None => {
                    sooner.await;
                    continue;
                }
            }
            let keys = self.state().due(Instant::now());
            self.add(keys.into_iter().map(|key| {
                let lane = lane_of(&key);
                (key, lane)
            }));
        }
    }
}

/// The wait before a request refused for a reason no rule knows is tried again: a refusal
/// does not pass with time, and its few tries (`rejection::after_refusal`) come quickly, so
/// that the Browser fails within seconds.
const REFUSAL_RETRY: Duration = Duration::from_secs(1);

/// One worker: reconciles the keys it takes until the queue stops.
pub async fn work(shared: Arc<Shared>, scopes: Arc<[Arc<Scope>]>) {
    while let Some((key, _lane)) = shared.queue.take().await {
        let again = match scopes.iter().find(|scope| scope.covers(&key.0)) {
            Some(scope) => {
                let span = info_span!("reconcile", namespace = %key.0, name = %key.1);
                reconcile(scope, &key).instrument(span).await
            }
            None => None,
        };
        shared.queue.done(&key, again);
    }
}

/// Reconciles the Browser `key` (or the pod it left behind); when to look again.
async fn reconcile(scope: &Scope, key: &Key) -> Option<Duration> {
    let shared = &scope.shared;
    let _guard = shared.metrics.reconcile_started();
    let (begun, quotas) = scope.begin(key);
    let done = run(scope, key, &begun, &quotas).await;
    scope.end(key, &done);
    observe(shared, key, &done, begun.browser.as_deref());
    match done.next {
        Next::AwaitChange => {
            shared.queue.forget(key);
            None
        }
        Next::After(wait) => {
            shared.queue.forget(key);
            Some(wait)
        }
        Next::Retry(trouble) => {
            shared.metrics.reconcile_error(error_kind(&trouble));
            let wait = match trouble {
                Trouble::Refused { .. } => REFUSAL_RETRY,
                _ => shared.queue.backoff(key),
            };
            warn!(error = %trouble, retry_in = ?wait, "reconcile failed");
            Some(wait)
        }
    }
}

/// Runs the step machine on what the reconcile began from, sending each request it asks for
/// and feeding the answer back, until it is done.
async fn run(scope: &Scope, (ns, name): &Key, begun: &Begun, quotas: &[Value]) -> Done {
    let shared = &scope.shared;
    let schema = shared.schemas.current();
    let inputs = Inputs {
        settings: &shared.settings,
        kind: &shared.kinds.browser,
        now: Timestamp::now(),
        link_regained: shared.link.state().regained,
        line: Line {
            place: begun.place,
            quotas,
        },
        refusals: begun.refusals,
    };
    let render = |browser: &DynamicObject| -> PodCreation {
        desired::pod_for(
            browser,
            &scope.configs(ns),
            &shared.kinds.browser,
            &shared.settings.policy,
            schema.as_deref(),
            |config, name, version| shared.verdicts.rejection(ns, config, name, version),
        )
    };
    let pod = begun
        .pod
        .as_ref()
        .and_then(|pod| serde_json::to_value(&**pod).ok());
    let mut machine = match (&begun.browser, pod) {
        (Some(browser), pod) => Reconcile::browser(inputs, &render, (**browser).clone(), pod),
        (None, Some(pod)) => Reconcile::orphan(inputs, pod),
        (None, None) => return Done::default(),
    };
    let apis = Apis {
        browsers: Api::namespaced_with(shared.client.clone(), ns, &shared.kinds.browser),
        pods: Api::namespaced_with(shared.client.clone(), ns, &shared.kinds.pod),
        name,
        shared,
        created: begun
            .browser
            .as_ref()
            .and_then(|b| b.metadata.creation_timestamp.as_ref()),
    };
    let mut step = machine.start();
    loop {
        step = match step {
            Step::Send(request) => machine.answer(apis.send(&request).await),
            Step::CheckSchema => {
                machine.schema_checked(shared.schemas.renewed_since(schema.as_deref()).await)
            }
            Step::Done(done) => return done,
        };
    }
}

/// Counts the milestones of a reconcile that ended, and publishes its Events on `browser`.
fn observe(shared: &Shared, (ns, name): &Key, done: &Done, browser: Option<&DynamicObject>) {
    let metrics = &shared.metrics;
    if let Some(reason) = &done.deletion {
        metrics.deletion(reason);
    }
    if let Some(reason) = &done.failure {
        metrics.failure(reason);
    }
    if let Some(left) = done.left_line {
        metrics.left_line(left);
    }
    if let Some(warning) = &done.warning {
        warn!(namespace = %ns, %name, "{warning}");
    }
    let Some(browser) = browser else {
        return;
    };
    if done.running
        && let Some(created) = &browser.metadata.creation_timestamp
    {
        metrics.startup(Stage::Running, created.0, Timestamp::now());
    }
    if !done.events.is_empty() {
        let reference = browser.object_ref(&shared.kinds.browser);
        for event in &done.events {
            shared.events.publish(event.clone(), reference.clone());
        }
    }
}

fn error_kind(trouble: &Trouble) -> ErrorKind {
    match trouble {
        Trouble::Failed {
            action: Action::ReadPod | Action::ReadBrowser,
            ..
        } => ErrorKind::Read,
        Trouble::Failed { .. } | Trouble::Refused { .. } => ErrorKind::Write,
        Trouble::StaleSchema(_) => ErrorKind::Schema,
        Trouble::Unsettled => ErrorKind::Unsettled,
    }
}

/// The APIs of one Browser's namespace, and the name its requests are about.
struct Apis<'a> {
    browsers: Api<DynamicObject>,
    pods: Api<DynamicObject>,
    name: &'a str,
    shared: &'a Shared,
    /// When the Browser was created, for the `pod_created` startup stage.
    created: Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

impl Apis<'_> {
    /// Sends `request` as it says and returns the answer; counts the writes on the way.
    async fn send(&self, request: &Request) -> Answer {
        let metrics = &self.shared.metrics;
        debug!(request = %request.action, "sending");
        if let Action::Write(write) = request.action {
            metrics.write(counted(write));
        }
        let sent = Timestamp::now();
        let answer = match self.call(request).await {
            Ok(Some(mut object)) => {
                object.metadata.managed_fields = None;
                Answer::Object(Box::new(object))
            }
            Ok(None) => Answer::Absent,
            Err(kube::Error::Api(status)) => Answer::Status {
                code: status.code,
                reason: status.reason,
                message: status.message,
            },
            Err(error) => Answer::Lost(describe(&error).to_string()),
        };
        if request.action == Action::Write(Write::CreatePod) {
            match (&answer, self.created) {
                // A pod is created at most once per Browser: this is its one sample.
                (Answer::Object(_), Some(created)) => {
                    metrics.startup(Stage::PodCreated, created.0, sent);
                }
                (Answer::Status { code, .. }, _) if *code != 409 => metrics.pod_create_error(*code),
                _ => {}
            }
        }
        answer
    }

    /// The API call `request` describes; the object it returned, if any.
    async fn call(&self, request: &Request) -> Result<Option<DynamicObject>, kube::Error> {
        let (api, name) = (self.api(request.target), self.name);
        match &request.call {
            Call::Get => api.get_opt(name).await,
            Call::GetMetadata => api
                .get_metadata_opt(name)
                .await
                .map(|meta| meta.map(|meta| DynamicObject::from_identity(meta.metadata))),
            Call::Apply { manager, body } => {
                let (params, patch) = (PatchParams::apply(manager).force(), Patch::Apply(body));
                match request.target {
                    Target::BrowserStatus => api.patch_status(name, &params, &patch).await,
                    Target::Browser | Target::Pod => api.patch(name, &params, &patch).await,
                }
                .map(Some)
            }
            Call::Delete { uid, grace_seconds } => {
                let params = DeleteParams {
                    grace_period_seconds: *grace_seconds,
                    preconditions: Some(Preconditions {
                        uid: Some(uid.clone()),
                        resource_version: None,
                    }),
                    ..DeleteParams::background()
                };
                api.delete(name, &params).await.map(|either| either.left())
            }
            Call::Patch(patch) => {
                let patch = Patch::<()>::Json(patch.clone());
                api.patch(name, &PatchParams::default(), &patch)
                    .await
                    .map(Some)
            }
        }
    }

    fn api(&self, target: Target) -> &Api<DynamicObject> {
        match target {
            Target::Pod => &self.pods,
            Target::Browser | Target::BrowserStatus => &self.browsers,
        }
    }
}

/// A write as the metrics count it, by verb and resource.
fn counted(write: Write) -> ApiWrite {
    match write {
        Write::Metadata => ApiWrite::ApplyBrowser,
        Write::AdoptPod | Write::CreatePod => ApiWrite::ApplyPod,
        Write::Status => ApiWrite::ApplyBrowserStatus,
        Write::DeletePod => ApiWrite::DeletePod,
        Write::DeleteBrowser => ApiWrite::DeleteBrowser,
        Write::ReleaseFinalizer => ApiWrite::PatchBrowser,
    }
}
