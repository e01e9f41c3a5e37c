//! The ideal client: a stand-in for a perfect operator on the same API server. For each
//! Browser of its name prefix it makes exactly the writes of the normal path and nothing else —
//! the metadata apply (finalizer and labels), the pod apply (owned by the Browser), the status
//! `Pending`, and once the pod runs with an IP, the status `Running` — driven by its own
//! watches of Browsers and pods. Each status is the one the operator derives from the pod
//! (`StatusBuilder`: `podIP`, `startTime`, `containerStatuses`, the `Ready` condition), so that
//! both make the same writes and what differs between them is when they make them. At most `concurrency`
//! Browsers are being provisioned at once; a `Running` write goes out as soon as the pod is
//! seen running, without waiting behind creations, so that its latency is a bound for any
//! client of this server. Under mixed load it also ends sessions as the operator does, each
//! write as soon as the event that calls for it arrives: when the browser or the sidecar of the
//! running pod terminated, the status `Failed` (its reason and message), the pod's graceful delete
//! and the Browser's delete; when the pod is gone, the finalizer's release. Nothing is
//! retried: a failed write fails the phase.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use browser_controller::api::browser::Phase;
use browser_controller::api::keys;
use browser_controller::lifecycle::status::{self, StatusBuilder};
use futures::{FutureExt, StreamExt};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::ApiResource;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};
use tokio::runtime::Handle;
use tokio::sync::{Semaphore, oneshot};
use tokio::task::{JoinHandle, JoinSet};

use crate::cluster::Backend;
use crate::requests::RequestLog;
use crate::{BenchError, Fixture, api_error, tolerate};

/// What the ideal client works on.
pub struct Scope {
    pub namespace: String,
    /// Only Browsers (and pods) whose name starts with this.
    pub prefix: String,
    pub concurrency: usize,
    pub browser: ApiResource,
    pub pod: ApiResource,
    pub fixture: Fixture,
}

/// The ideal client running on a runtime of its own choosing; stopped when dropped.
pub struct IdealClient {
    stop: Option<oneshot::Sender<()>>,
    synced: Option<oneshot::Receiver<()>>,
    task: JoinHandle<Result<(), BenchError>>,
    pub log: Arc<RequestLog>,
}

impl Drop for IdealClient {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Where one Browser is on the normal path.
enum Progress {
    /// Metadata, pod and `Pending` being written; the `Running` status to write after them
    /// when the pod was seen running meanwhile.
    Creating {
        running: Option<Value>,
        /// The session ended meanwhile (its `Failed` status): its end follows the creation's
        /// writes.
        ended: Option<Value>,
    },
    Pending,
    Running,
    /// The session ended: its cleanup was written, the finalizer goes when the pod is gone.
    Ending,
}

/// The writes for Browsers of one namespace, each apply under the operator's field manager.
struct Writer {
    browsers: Api<DynamicObject>,
    pods: Api<DynamicObject>,
    browser: ApiResource,
    fixture: Fixture,
    permits: Semaphore,
    progress: Mutex<HashMap<String, Progress>>,
}

fn apply() -> PatchParams {
    PatchParams::apply(keys::FIELD_MANAGER).force()
}

impl Writer {
    fn progress(&self) -> std::sync::MutexGuard<'_, HashMap<String, Progress>> {
        self.progress.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The head of every Browser apply; the `uid` keeps it from creating a Browser anew.
    fn header(&self, name: &str, uid: &str) -> Value {
        json!({
            "apiVersion": self.browser.api_version,
            "kind": self.browser.kind,
            "metadata": {"name": name, "uid": uid},
        })
    }

    /// Metadata, pod, `Pending`; then `Running` if the pod already runs.
    async fn create(&self, browser: DynamicObject) -> Result<(), BenchError> {
        let permit = self.permits.acquire().await;
        let name = browser.metadata.name.clone().unwrap_or_default();
        let uid = browser.metadata.uid.clone().unwrap_or_default();
        let mut metadata = self.header(&name, &uid);
        operated(&mut metadata, &browser);
        self.browsers
            .patch(&name, &apply(), &Patch::Apply(metadata))
            .await
            .map_err(api_error("ideal client: apply Browser metadata"))?;
        let pod = self.fixture.owned_pod(&name, &uid);
        self.pods
            .patch(&name, &apply(), &Patch::Apply(pod))
            .await
            .map_err(api_error("ideal client: apply pod"))?;
        let pending = StatusBuilder::new(&json!({}), jiff::Timestamp::now()).created();
        self.status(&name, &uid, pending.to_value()).await?;
        let (running, ended) = {
            let mut progress = self.progress();
            match progress.insert(name.clone(), Progress::Pending) {
                Some(Progress::Creating {
                    ended: Some(failed),
                    ..
                }) => {
                    progress.insert(name.clone(), Progress::Ending);
                    (None, Some(failed))
                }
                Some(Progress::Creating {
                    running: Some(status),
                    ..
                }) => {
                    progress.insert(name.clone(), Progress::Running);
                    (Some(status), None)
                }
                _ => (None, None),
            }
        };
        if let Some(status) = running {
            self.status(&name, &uid, status).await?;
        }
        if let Some(failed) = ended {
            drop(permit);
            self.end(name, uid, failed).await?;
        }
        Ok(())
    }

    async fn running(&self, name: String, uid: String, status: Value) -> Result<(), BenchError> {
        self.status(&name, &uid, status).await
    }

    /// The session's end: status `Failed`, the pod's graceful delete, the Browser's delete.
    async fn end(&self, name: String, uid: String, failed: Value) -> Result<(), BenchError> {
        self.status(&name, &uid, failed).await?;
        tolerate(
            self.pods.delete(&name, &DeleteParams::default()).await,
            404,
            "delete pod",
        )?;
        tolerate(
            self.browsers.delete(&name, &DeleteParams::default()).await,
            404,
            "delete Browser",
        )
    }

    /// The pod is gone: the Browser's finalizer goes.
    async fn release(&self, name: String) -> Result<(), BenchError> {
        let release = Patch::Merge(json!({"metadata": {"finalizers": null}}));
        tolerate(
            self.browsers
                .patch(&name, &PatchParams::default(), &release)
                .await,
            404,
            "release the finalizer",
        )
    }

    async fn status(&self, name: &str, uid: &str, status: Value) -> Result<(), BenchError> {
        let mut body = self.header(name, uid);
        body["status"] = status;
        self.browsers
            .patch_status(name, &apply(), &Patch::Apply(body))
            .await
            .map_err(api_error("ideal client: apply Browser status"))?;
        Ok(())
    }
}

/// Adds to `object`'s metadata what the operator sets on `browser`: its finalizer and the
/// three `selenosis.io/browser*` labels.
pub fn operated(object: &mut Value, browser: &DynamicObject) {
    let spec = |f: &str| browser.data["spec"][f].clone();
    object["metadata"]["labels"] = json!({
        keys::LABEL_BROWSER: browser.metadata.name,
        keys::LABEL_BROWSER_NAME: spec("browserName"),
        keys::LABEL_BROWSER_VERSION: spec("browserVersion"),
    });
    object["metadata"]["finalizers"] = json!([keys::FINALIZER]);
}

/// The uid of the Browser that owns `pod`.
fn owner_uid(pod: &DynamicObject) -> Option<String> {
    let owner = pod
        .metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|o| o.controller == Some(true))?;
    Some(owner.uid.clone())
}

/// What a pod's event calls for, with the status the operator derives from the pod.
enum PodSeen {
    /// The browser or the sidecar terminated: the session is over (its `Failed` status).
    Ended(Value),
    /// The pod runs with an IP (its `Running` status).
    Running(Value),
}

/// What `pod` calls for, and the uid of its Browser; `None` while it is on its way.
fn pod_seen(pod: &DynamicObject) -> Option<(String, PodSeen)> {
    let owner = owner_uid(pod)?;
    let pod = serde_json::to_value(pod).ok()?;
    // No current status: the ideal client writes each status as a transition.
    let current = json!({});
    let builder = StatusBuilder::new(&current, jiff::Timestamp::now());
    if let Some(failure) = status::critical_termination(&pod) {
        let failed = builder.failed(Some(&pod), &failure);
        return Some((owner, PodSeen::Ended(failed.to_value())));
    }
    let runs = status::pod_phase(&pod) == Phase::Running && status::pod_ip(&pod).is_some();
    runs.then(|| (owner, PodSeen::Running(builder.mirror(&pod).to_value())))
}

impl IdealClient {
    /// Starts the client on `runtime` with a recording client of `backend` built there.
    pub fn start(backend: &Backend, runtime: &Handle, scope: Scope) -> Self {
        let log = Arc::new(RequestLog::default());
        let (stop, stopped) = oneshot::channel::<()>();
        let (synced_tx, synced) = oneshot::channel::<()>();
        let (backend, task_log) = (backend.clone(), log.clone());
        let task = runtime.spawn(async move {
            let client = backend.operator_client(task_log)?;
            let writer = Arc::new(Writer {
                browsers: Api::namespaced_with(client.clone(), &scope.namespace, &scope.browser),
                pods: Api::namespaced_with(client.clone(), &scope.namespace, &scope.pod),
                browser: scope.browser.clone(),
                fixture: scope.fixture,
                permits: Semaphore::new(scope.concurrency),
                progress: Mutex::new(HashMap::new()),
            });
            tokio::select! {
                _ = stopped => Ok(()),
                result = run(writer, &scope.prefix, synced_tx) => result,
            }
        });
        IdealClient {
            stop: Some(stop),
            synced: Some(synced),
            task,
            log,
        }
    }

    /// Waits until both watches have listed, as an operator's caches have before it works.
    pub async fn synced(&mut self) -> Result<(), BenchError> {
        let Some(synced) = self.synced.take() else {
            return Ok(());
        };
        match tokio::time::timeout(Duration::from_secs(30), synced).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => self.check(),
            Err(_) => Err(BenchError::Timeout {
                what: "the ideal client's watches to list".into(),
                state: "no complete list".into(),
            }),
        }
    }

    /// An error when the client failed (a write was refused, say).
    pub fn check(&mut self) -> Result<(), BenchError> {
        match (&mut self.task).now_or_never() {
            None => Ok(()),
            Some(Ok(Ok(()))) => Err(BenchError::Fixture("the ideal client stopped".into())),
            Some(Ok(Err(e))) => Err(e),
            Some(Err(e)) => Err(BenchError::Join(e)),
        }
    }
}

enum Seen {
    Browser(DynamicObject),
    Pod(DynamicObject),
    PodGone(DynamicObject),
    /// A watch completed a list.
    Listed,
}

/// Reacts to the watch events until a write fails.
async fn run(
    writer: Arc<Writer>,
    prefix: &str,
    synced: oneshot::Sender<()>,
) -> Result<(), BenchError> {
    // Watch errors are retried by the watchers' backoff; only what exists matters here.
    fn seen(
        event: Result<watcher::Event<DynamicObject>, watcher::Error>,
        kind: fn(DynamicObject) -> Seen,
        gone: fn(DynamicObject) -> Option<Seen>,
    ) -> Option<Seen> {
        match event {
            Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => Some(kind(o)),
            Ok(watcher::Event::Delete(o)) => gone(o),
            Ok(watcher::Event::InitDone) => Some(Seen::Listed),
            _ => None,
        }
    }
    let browsers = watcher(writer.browsers.clone(), watcher::Config::default())
        .default_backoff()
        .map(|e| seen(e, Seen::Browser, |_| None))
        .boxed();
    let pods = watcher(
        writer.pods.clone(),
        watcher::Config::default().labels(&keys::managed_pods_selector()),
    )
    .default_backoff()
    .map(|e| seen(e, Seen::Pod, |o| Some(Seen::PodGone(o))))
    .boxed();
    let mut synced = Some(synced);
    let mut lists = 0;
    let mut events = futures::stream::select(browsers, pods);
    let mut writes = JoinSet::new();
    loop {
        tokio::select! {
            event = events.next() => {
                let Some(event) = event else { return Ok(()) };
                let Some(object) = event else { continue };
                if let Seen::Listed = object {
                    lists += 1;
                    if lists >= 2 && let Some(tx) = synced.take() {
                        let _ = tx.send(());
                    }
                    continue;
                }
                let name = object_name(&object);
                if !name.starts_with(prefix) {
                    continue;
                }
                match object {
                    Seen::Browser(browser) => {
                        if browser.metadata.deletion_timestamp.is_some() {
                            continue;
                        }
                        let mut progress = writer.progress();
                        if progress.contains_key(&name) {
                            continue;
                        }
                        progress.insert(name, Progress::Creating { running: None, ended: None });
                        let writer = writer.clone();
                        writes.spawn(async move { writer.create(browser).await });
                    }
                    Seen::Listed => {}
                    Seen::PodGone(pod) => {
                        if matches!(writer.progress().get(&name), Some(Progress::Ending)) {
                            let writer = writer.clone();
                            writes.spawn(async move { writer.release(pod_name(&pod)).await });
                        }
                    }
                    Seen::Pod(pod) => {
                        let Some((uid, seen)) = pod_seen(&pod) else { continue };
                        let mut progress = writer.progress();
                        match (seen, progress.get_mut(&name)) {
                            (PodSeen::Ended(failed), Some(Progress::Creating { ended, .. })) => {
                                ended.get_or_insert(failed);
                            }
                            (
                                PodSeen::Ended(failed),
                                Some(p @ (Progress::Pending | Progress::Running)),
                            ) => {
                                *p = Progress::Ending;
                                let writer = writer.clone();
                                writes.spawn(async move { writer.end(name, uid, failed).await });
                            }
                            (PodSeen::Running(status), Some(Progress::Creating { running, .. })) => {
                                running.get_or_insert(status);
                            }
                            (PodSeen::Running(status), Some(p @ Progress::Pending)) => {
                                *p = Progress::Running;
                                let writer = writer.clone();
                                writes.spawn(async move { writer.running(name, uid, status).await });
                            }
                            _ => {}
                        }
                    }
                }
            }
            Some(done) = writes.join_next() => done??,
        }
    }
}

fn pod_name(o: &DynamicObject) -> String {
    o.metadata.name.clone().unwrap_or_default()
}

fn object_name(seen: &Seen) -> String {
    match seen {
        Seen::Browser(o) | Seen::Pod(o) | Seen::PodGone(o) => pod_name(o),
        Seen::Listed => String::new(),
    }
}
