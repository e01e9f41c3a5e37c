//! Provisioning benchmark: how fast and how cheaply the operator turns Browsers into running
//! pods, measured against the pod-create limit of the same API server in the same run.
//!
//! One process holds the API server double (or a client of the cluster named by
//! `--kubeconfig`), the kubelet simulator, the benchmark's own client, and the operator on a
//! Tokio runtime of its own whose threads are named `operator`: their CPU time is the
//! operator's. Requests of the operator to the double are served on the benchmark's runtime.
//!
//! Phases: (1) baseline — N bare pods of the Browsers' shape created with server-side apply at
//! the same client concurrency; (2) the operator run — N Browsers created, then deleted; (3)
//! idle — for each `--idle` size, the operator restarted over that many Running Browsers, its
//! heap and RSS growth, start-up cost and idle CPU. See docs/performance.md.

#[path = "../tests/support/mod.rs"]
mod support;

#[path = "provision/cluster.rs"]
mod cluster;
#[path = "provision/measure.rs"]
mod measure;
#[path = "provision/report.rs"]
mod report;
#[path = "provision/requests.rs"]
mod requests;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use browser_controller::api::crd::{self, Layout};
use browser_controller::api::keys;
use browser_controller::cli::{Cli, LogFormat};
use browser_controller::lifecycle::decide::PodCreation;
use browser_controller::lifecycle::desired;
use browser_controller::metrics::Metrics;
use browser_controller::{duration, logging, manifest, operator};
use clap::Parser;
use futures::{FutureExt, StreamExt, TryStreamExt};
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};
use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use cluster::Backend;
use measure::Cpu;
use report::{Baseline, Cost, Idle, Report, Run, Setup};
use requests::RequestLog;
use support::apiserver::ApiServer;
use support::controlplane::{self, Assets, ControlPlane};
use support::kinds;
use support::kubelet::{Kubelet, KubeletConfig, Script};

#[global_allocator]
static ALLOCATOR: measure::CountingAllocator = measure::CountingAllocator;

/// Name of the operator runtime's threads.
const OPERATOR_THREADS: &str = "operator";

#[derive(Debug, Parser)]
#[command(
    name = "provision",
    about = "Provisioning latency, throughput, API cost and memory of browser-controller"
)]
struct Args {
    /// Browsers created in the operator run (and bare pods in the baseline).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    browsers: u32,
    /// Client requests in flight at once (baseline pods, Browser creates and deletes).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    concurrency: u32,
    /// Browsers created per second; all at once when absent.
    #[arg(long, value_parser = parse_rate)]
    rate: Option<f64>,
    /// Idle Running Browsers cached for the memory and CPU measurement, comma-separated
    /// (`0`: skip that part).
    #[arg(long, value_delimiter = ',', default_value = "100,1000")]
    idle: Vec<u32>,
    /// How long the operator is watched idle at each --idle size.
    #[arg(long, default_value = "10s", value_parser = duration::parse)]
    idle_window: Duration,
    /// Pause between two steps of the kubelet simulator (bind, Pending, Running).
    #[arg(long, default_value = "5ms", value_parser = duration::parse)]
    step_delay: Duration,
    /// Passed to the operator as --max-workers (default: the operator's own default).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    max_workers: Option<u16>,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Tiny sizes: checks that the program works end to end, asserts no timing.
    #[arg(long)]
    smoke: bool,
    /// Run against the cluster of this kubeconfig instead of the double. It needs the CRDs of
    /// crds/ installed and no real nodes for the pods: the kubelet simulator binds them.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Namespace of the benchmark's objects.
    #[arg(long, default_value = "bench")]
    namespace: String,
    /// Passed by `cargo bench` to every bench binary; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

fn parse_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 => Ok(r),
        _ => Err(format!(
            "{s:?} is not a positive number of Browsers per second"
        )),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{action}: {source}")]
    Api {
        action: String,
        #[source]
        source: kube::Error,
    },
    #[error("timed out waiting for {what} ({state})")]
    Timeout { what: String, state: String },
    #[error("the operator stopped: {0}")]
    Operator(#[source] operator::RunError),
    #[error("the operator task ended unexpectedly")]
    OperatorExited,
    #[error("operator task: {0}")]
    Join(#[from] tokio::task::JoinError),
    #[error("operator flags: {0}")]
    Flags(String),
    #[error("kubeconfig: {0}")]
    Kubeconfig(#[source] kube::config::KubeconfigError),
    #[error("client: {0}")]
    Client(#[source] kube::Error),
    #[error(transparent)]
    Manifest(#[from] manifest::ManifestError),
    #[error("fixture: {0}")]
    Fixture(String),
    #[error("reading /proc or writing results: {0}")]
    Io(#[from] std::io::Error),
    #[error("encoding JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("encoding metrics: {0}")]
    Metrics(#[from] std::fmt::Error),
}

fn api_error(action: impl Into<String>) -> impl FnOnce(kube::Error) -> BenchError {
    let action = action.into();
    move |source| BenchError::Api { action, source }
}

/// Success, or the API error `code` that means the goal is already reached (404 on a
/// delete, 409 on a create).
fn tolerate<T>(result: Result<T, kube::Error>, code: u16, action: &str) -> Result<(), BenchError> {
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == code => Ok(()),
        Err(e) => Err(api_error(action)(e)),
    }
}

/// The effective sizes: `--smoke` shrinks everything to seconds.
struct Plan {
    browsers: usize,
    concurrency: usize,
    rate: Option<f64>,
    idle: Vec<usize>,
    idle_window: Duration,
    step_delay: Duration,
    max_workers: Option<u16>,
    namespace: String,
    kubeconfig: Option<PathBuf>,
    smoke: bool,
}

impl From<&Args> for Plan {
    fn from(args: &Args) -> Self {
        // `--idle 0` skips the idle part.
        let mut idle: Vec<usize> = args
            .idle
            .iter()
            .filter(|&&n| n > 0)
            .map(|&n| n as usize)
            .collect();
        idle.sort_unstable();
        idle.dedup();
        let mut plan = Plan {
            browsers: args.browsers as usize,
            concurrency: args.concurrency as usize,
            rate: args.rate,
            idle,
            idle_window: args.idle_window,
            step_delay: args.step_delay,
            max_workers: args.max_workers,
            namespace: args.namespace.clone(),
            kubeconfig: args.kubeconfig.clone(),
            smoke: args.smoke,
        };
        if args.smoke {
            plan.browsers = 10;
            plan.concurrency = plan.concurrency.min(8);
            plan.idle = vec![10];
            plan.idle_window = Duration::from_millis(300);
        }
        plan
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = logging::init(LogFormat::Text, "info");
    }
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("provision: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), BenchError> {
    let mut plan = Plan::from(args);
    let threads = std::thread::available_parallelism().map_or(2, usize::from);
    // The operator gets the runtime it would have as a process of its own.
    let operator_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name(OPERATOR_THREADS)
        .enable_all()
        .build()?;
    let bench_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name("bench")
        .enable_all()
        .build()?;
    // Without --kubeconfig, the real control plane of the end-to-end suite when
    // KUBEBUILDER_ASSETS names one (spawned from this thread, which outlives the run).
    let plane = match (&plan.kubeconfig, Assets::from_env()) {
        (None, Ok(Some(assets))) => {
            let plane = bench_rt.block_on(start_control_plane(&assets))?;
            plan.kubeconfig = Some(plane.admin_kubeconfig());
            Some(plane)
        }
        (None, Err(e)) => return Err(BenchError::Fixture(e.to_string())),
        _ => None,
    };
    let report = bench_rt.block_on(bench(&plan, operator_rt.handle().clone(), threads));
    operator_rt.shutdown_timeout(Duration::from_secs(1));
    bench_rt.shutdown_timeout(Duration::from_secs(1));
    if let Some(plane) = plane {
        plane.stop();
    }
    let report = report?;
    print!("{}", report.table());
    if let Some(path) = &args.json {
        std::fs::write(
            path,
            serde_json::to_string_pretty(&report.to_json())? + "\n",
        )?;
        println!("results written to {}", path.display());
    }
    Ok(())
}

/// Starts etcd and kube-apiserver from `assets` and installs `crds/`.
async fn start_control_plane(assets: &Assets) -> Result<ControlPlane, BenchError> {
    println!("starting kube-apiserver and etcd from KUBEBUILDER_ASSETS");
    let plane = ControlPlane::start(assets)
        .await
        .map_err(|e| BenchError::Fixture(format!("control plane: {e}")))?;
    let client = plane
        .client()
        .await
        .map_err(|e| BenchError::Fixture(format!("control plane client: {e}")))?;
    let crds = Path::new(env!("CARGO_MANIFEST_DIR")).join("crds");
    controlplane::apply_dir(&client, &crds)
        .await
        .map_err(|e| BenchError::Fixture(format!("installing crds/: {e}")))?;
    Ok(plane)
}

/// The kinds the benchmark creates, in the default group layout (`crds/`).
struct Kinds {
    browser: ApiResource,
    config: ApiResource,
    pod: ApiResource,
}

impl Kinds {
    fn new() -> Self {
        Kinds {
            browser: kinds::browser_resource(Layout::Default),
            config: kinds::config_resource(Layout::Default),
            pod: kinds::pod_resource(),
        }
    }
}

/// The objects of the run, from the repository's examples: the BrowserConfig of
/// `testdata/configs/single-sidecar.yaml` and Browsers shaped like
/// `testdata/browsers/chrome.yaml` (owner label, options annotation).
struct Fixture {
    config: Value,
    browser: Value,
    /// The pod the operator renders for such a Browser, without its owner reference.
    pod: Value,
}

fn testdata(path: &str) -> Result<Value, BenchError> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata")
        .join(path);
    manifest::read_file(&path)?
        .into_iter()
        .next()
        .ok_or_else(|| BenchError::Fixture(format!("{} is empty", path.display())))
}

impl Fixture {
    fn load(ns: &str, kinds: &Kinds) -> Result<Self, BenchError> {
        let mut config = testdata("configs/single-sidecar.yaml")?;
        config["metadata"]["namespace"] = json!(ns);
        let mut browser = testdata("browsers/chrome.yaml")?;
        browser["metadata"]["namespace"] = json!(ns);
        if let Some(meta) = browser["metadata"].as_object_mut() {
            meta.remove("uid");
        }
        let mut template: DynamicObject = serde_json::from_value(browser.clone())?;
        template.metadata.name = Some("template".into());
        template.metadata.uid = Some("00000000-0000-0000-0000-000000000000".into());
        let config_object: DynamicObject = serde_json::from_value(config.clone())?;
        let mut pod = match desired::pod_for(
            &template,
            &[config_object],
            &kinds.browser,
            None,
            |_, _, _| None,
        ) {
            PodCreation::Render { pod, .. } => pod,
            PodCreation::Fail(failure) => {
                return Err(BenchError::Fixture(format!(
                    "the example Browser does not render: {}",
                    failure.message
                )));
            }
        };
        // A bare pod: no Browser owns it (a real garbage collector would delete it).
        if let Some(meta) = pod["metadata"].as_object_mut() {
            meta.remove("ownerReferences");
        }
        Ok(Fixture {
            config,
            browser,
            pod,
        })
    }

    fn browser(&self, name: &str) -> Result<DynamicObject, BenchError> {
        let mut b = self.browser.clone();
        b["metadata"]["name"] = json!(name);
        Ok(serde_json::from_value(b)?)
    }

    fn pod(&self, name: &str) -> Value {
        let mut p = self.pod.clone();
        p["metadata"]["name"] = json!(name);
        p["metadata"]["labels"][keys::LABEL_BROWSER] = json!(name);
        p["spec"]["hostname"] = json!(name);
        p
    }
}

/// What the benchmark's own watches saw, with the moment each thing was first seen.
#[derive(Default)]
struct Seen {
    browsers: HashSet<String>,
    pods: HashSet<String>,
    /// First event showing the Browser `Running` with a pod IP.
    browser_running: HashMap<String, Instant>,
    /// First event showing the pod `Running` (the kubelet's status update).
    pod_running: HashMap<String, Instant>,
    /// The last deletion seen.
    browser_gone: Option<Instant>,
    pod_gone: Option<Instant>,
}

#[derive(Clone, Copy)]
enum Watched {
    Browsers,
    Pods,
}

impl Seen {
    fn live(&mut self, what: Watched) -> &mut HashSet<String> {
        match what {
            Watched::Browsers => &mut self.browsers,
            Watched::Pods => &mut self.pods,
        }
    }

    fn gone(&mut self, what: Watched, at: Instant) {
        match what {
            Watched::Browsers => self.browser_gone = Some(at),
            Watched::Pods => self.pod_gone = Some(at),
        }
    }

    fn applied(&mut self, what: Watched, object: &DynamicObject, at: Instant) {
        let Some(name) = object.metadata.name.clone() else {
            return;
        };
        let status = &object.data["status"];
        let running = status["phase"] == "Running";
        match what {
            Watched::Browsers => {
                if running && status["podIP"].as_str().is_some_and(|ip| !ip.is_empty()) {
                    self.browser_running.entry(name.clone()).or_insert(at);
                }
            }
            Watched::Pods => {
                if running {
                    self.pod_running.entry(name.clone()).or_insert(at);
                }
            }
        }
        self.live(what).insert(name);
    }

    fn count_live(&self, prefix: &str) -> (usize, usize) {
        let count = |set: &HashSet<String>| set.iter().filter(|n| n.starts_with(prefix)).count();
        (count(&self.browsers), count(&self.pods))
    }
}

/// The benchmark's watches of Browsers and of the operator's pods in its namespace. They run
/// on a thread of their own, so that the moment an event is seen does not depend on how busy
/// the benchmark's runtime is.
struct Observer {
    seen: Arc<Mutex<Seen>>,
    stop: Option<oneshot::Sender<()>>,
}

impl Drop for Observer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl Observer {
    async fn start(backend: &Backend, ns: &str, kinds: &Kinds) -> Result<Self, BenchError> {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (ready_tx, ready) = oneshot::channel::<Result<(), BenchError>>();
        let (stop, stopped) = oneshot::channel::<()>();
        let (backend, ns, seen_by_thread) = (backend.clone(), ns.to_string(), seen.clone());
        let (browser_ar, pod_ar) = (kinds.browser.clone(), kinds.pod.clone());
        std::thread::Builder::new()
            .name("observer".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.into()));
                        return;
                    }
                };
                runtime.block_on(async move {
                    let client = match backend.client() {
                        Ok(client) => client,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    let (browsers_synced, browsers_ready) = oneshot::channel();
                    let (pods_synced, pods_ready) = oneshot::channel();
                    let browsers = Self::watch(
                        Api::namespaced_with(client.clone(), &ns, &browser_ar),
                        watcher::Config::default(),
                        Watched::Browsers,
                        seen_by_thread.clone(),
                        browsers_synced,
                    );
                    let pods = Self::watch(
                        Api::namespaced_with(client, &ns, &pod_ar),
                        watcher::Config::default().labels(&keys::managed_pods_selector()),
                        Watched::Pods,
                        seen_by_thread,
                        pods_synced,
                    );
                    let synced = async move {
                        if let (Ok(()), Ok(())) = futures::join!(browsers_ready, pods_ready) {
                            let _ = ready_tx.send(Ok(()));
                        }
                    };
                    tokio::select! {
                        _ = stopped => {}
                        _ = futures::future::join3(browsers, pods, synced) => {}
                    }
                });
            })?;
        let observer = Observer {
            seen,
            stop: Some(stop),
        };
        match tokio::time::timeout(Duration::from_secs(30), ready).await {
            Ok(Ok(Ok(()))) => Ok(observer),
            Ok(Ok(Err(e))) => Err(e),
            _ => Err(BenchError::Timeout {
                what: "the benchmark's own watches to list".into(),
                state: "no complete list".into(),
            }),
        }
    }

    async fn watch(
        api: Api<DynamicObject>,
        config: watcher::Config,
        what: Watched,
        seen: Arc<Mutex<Seen>>,
        synced: oneshot::Sender<()>,
    ) {
        let mut synced = Some(synced);
        let mut relist: Option<HashSet<String>> = None;
        let mut events = watcher(api, config).default_backoff().boxed();
        while let Some(event) = events.next().await {
            let Ok(event) = event else { continue };
            let at = Instant::now();
            let mut seen = seen.lock().unwrap_or_else(PoisonError::into_inner);
            match event {
                watcher::Event::Apply(object) => seen.applied(what, &object, at),
                watcher::Event::Delete(object) => {
                    if let Some(name) = &object.metadata.name {
                        seen.live(what).remove(name);
                    }
                    seen.gone(what, at);
                }
                watcher::Event::Init => relist = Some(HashSet::new()),
                watcher::Event::InitApply(object) => {
                    seen.applied(what, &object, at);
                    if let (Some(list), Some(name)) = (relist.as_mut(), &object.metadata.name) {
                        list.insert(name.clone());
                    }
                }
                watcher::Event::InitDone => {
                    // Whatever vanished during a watch gap is gone now.
                    if let Some(list) = relist.take() {
                        let live = seen.live(what);
                        let before = live.len();
                        live.retain(|n| list.contains(n));
                        if live.len() != before {
                            seen.gone(what, at);
                        }
                    }
                    if let Some(tx) = synced.take() {
                        let _ = tx.send(());
                    }
                }
            }
        }
    }

    fn with<R>(&self, f: impl FnOnce(&Seen) -> R) -> R {
        f(&self.seen.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// The operator running on its own runtime, with its own metrics and request log.
struct Operator {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), BenchError>>,
    metrics: Arc<Metrics>,
    log: Arc<RequestLog>,
}

impl Operator {
    fn start(backend: &Backend, runtime: &Handle, flags: &[String]) -> Result<Self, BenchError> {
        let mut argv = vec![
            "browser-controller".to_string(),
            "--metrics-addr=0".to_string(),
            "--health-probe-bind-address=0".to_string(),
        ];
        argv.extend_from_slice(flags);
        let args = Cli::try_parse_from(argv)
            .map_err(|e| BenchError::Flags(e.to_string()))?
            .run;
        let metrics = Arc::new(Metrics::new());
        let log = Arc::new(RequestLog::default());
        let (stop, stopped) = oneshot::channel::<()>();
        let backend = backend.clone();
        let (task_metrics, task_log) = (metrics.clone(), log.clone());
        let task = runtime.spawn(async move {
            // Built here so that the client's own task runs on the operator's runtime.
            let client = backend.operator_client(task_log)?;
            let stop = async move {
                let _ = stopped.await;
            };
            operator::run_with_client(client, args, task_metrics, stop)
                .await
                .map_err(BenchError::Operator)
        });
        Ok(Operator {
            stop: Some(stop),
            task,
            metrics,
            log,
        })
    }

    /// An error when the operator has stopped on its own.
    fn check(&mut self) -> Result<(), BenchError> {
        match (&mut self.task).now_or_never() {
            None => Ok(()),
            Some(Ok(Ok(()))) => Err(BenchError::OperatorExited),
            Some(Ok(Err(e))) => Err(e),
            Some(Err(e)) => Err(BenchError::Join(e)),
        }
    }

    fn metrics(&self) -> Result<String, BenchError> {
        Ok(self.metrics.encode()?)
    }

    /// Reconciles run and running now.
    fn reconciles(&self) -> Result<(f64, f64), BenchError> {
        let text = self.metrics()?;
        Ok((
            measure::sum(&text, "browser_controller_reconciles_total", |_| true),
            measure::sum(&text, "browser_controller_reconciles_in_flight", |_| true),
        ))
    }

    async fn stop(mut self) -> Result<(), BenchError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match tokio::time::timeout(Duration::from_secs(60), &mut self.task).await {
            Ok(result) => result?,
            Err(_) => Err(BenchError::Timeout {
                what: "the operator to stop".into(),
                state: "still running after 60s".into(),
            }),
        }
    }
}

/// Waits until `pending` returns `None`; its `Some` says what is still missing.
async fn until(
    what: &str,
    timeout: Duration,
    mut operator: Option<&mut Operator>,
    mut pending: impl FnMut() -> Option<String>,
) -> Result<(), BenchError> {
    let deadline = Instant::now() + timeout;
    loop {
        let Some(state) = pending() else {
            return Ok(());
        };
        if let Some(op) = operator.as_deref_mut() {
            op.check()?;
        }
        if Instant::now() >= deadline {
            return Err(BenchError::Timeout {
                what: what.to_string(),
                state,
            });
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Generous time for a phase over `n` objects on a slow machine.
fn phase_timeout(n: usize) -> Duration {
    Duration::from_secs(60) + Duration::from_millis(50) * n as u32
}

/// Runs `op(i)` for `i` in `0..n`, at most `concurrency` at once, starting them at `rate`
/// per second (all at once without a rate); returns when each was sent and answered.
async fn fan_out<F, Fut>(
    n: usize,
    concurrency: usize,
    rate: Option<f64>,
    op: F,
) -> Result<Vec<(Instant, Instant)>, BenchError>
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Result<(), BenchError>>,
{
    let start = Instant::now();
    let op = &op;
    let mut done: Vec<(usize, Instant, Instant)> = futures::stream::iter(0..n)
        .map(|i| async move {
            if let Some(rate) = rate {
                tokio::time::sleep_until(start + Duration::from_secs_f64(i as f64 / rate)).await;
            }
            let sent = Instant::now();
            op(i).await?;
            Ok::<_, BenchError>((i, sent, Instant::now()))
        })
        .buffer_unordered(concurrency)
        .try_collect()
        .await?;
    done.sort_unstable_by_key(|(i, ..)| *i);
    Ok(done
        .into_iter()
        .map(|(_, sent, answered)| (sent, answered))
        .collect())
}

/// Everything a phase needs.
struct Ctx<'a> {
    plan: &'a Plan,
    client: Client,
    kinds: Kinds,
    fixture: Fixture,
    observer: Observer,
}

impl Ctx<'_> {
    fn browsers(&self) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.client.clone(),
            &self.plan.namespace,
            &self.kinds.browser,
        )
    }

    fn pods(&self) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &self.plan.namespace, &self.kinds.pod)
    }

    fn operator_flags(&self) -> Vec<String> {
        let mut flags = Vec::new();
        if let Some(n) = self.plan.max_workers {
            flags.push(format!("--max-workers={n}"));
        }
        // Against a shared cluster, leave other namespaces' Browsers alone.
        if self.plan.kubeconfig.is_some() {
            flags.push(format!("--namespace={}", self.plan.namespace));
        }
        flags
    }

    async fn create_browsers(
        &self,
        names: &[String],
        rate: Option<f64>,
    ) -> Result<Vec<(Instant, Instant)>, BenchError> {
        let api = self.browsers();
        fan_out(names.len(), self.plan.concurrency, rate, |i| {
            let api = api.clone();
            let object = self.fixture.browser(&names[i]);
            async move {
                api.create(&PostParams::default(), &object?)
                    .await
                    .map_err(api_error("create Browser"))?;
                Ok(())
            }
        })
        .await
    }

    async fn delete_browsers(&self, names: &[String]) -> Result<(), BenchError> {
        let api = self.browsers();
        fan_out(names.len(), self.plan.concurrency, None, |i| {
            let api = api.clone();
            let name = names[i].clone();
            async move {
                tolerate(
                    api.delete(&name, &DeleteParams::default()).await,
                    404,
                    "delete Browser",
                )
            }
        })
        .await?;
        Ok(())
    }

    async fn wait_running(
        &self,
        names: &[String],
        operator: &mut Operator,
    ) -> Result<(), BenchError> {
        until(
            "Browsers to run",
            phase_timeout(names.len()),
            Some(operator),
            || {
                let running = self.observer.with(|s| {
                    names
                        .iter()
                        .filter(|n| s.browser_running.contains_key(*n))
                        .count()
                });
                (running < names.len()).then(|| format!("{running} of {} Running", names.len()))
            },
        )
        .await
    }

    async fn wait_gone(
        &self,
        prefix: &str,
        n: usize,
        operator: Option<&mut Operator>,
    ) -> Result<(), BenchError> {
        until("deletions", phase_timeout(n), operator, || {
            let (browsers, pods) = self.observer.with(|s| s.count_live(prefix));
            (browsers + pods > 0).then(|| format!("{browsers} Browsers and {pods} pods left"))
        })
        .await
    }
}

fn names(prefix: &str, range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("{prefix}{i:05}")).collect()
}

async fn bench(plan: &Plan, operator_rt: Handle, threads: usize) -> Result<Report, BenchError> {
    let backend = match &plan.kubeconfig {
        Some(path) => Backend::from_kubeconfig(path).await?,
        None => {
            let server = ApiServer::new();
            for crd in crd::crds(Layout::Default) {
                server
                    .install_crd(&crd)
                    .map_err(|e| BenchError::Fixture(format!("installing a CRD: {e:?}")))?;
            }
            Backend::Double {
                server,
                serve_on: Handle::current(),
            }
        }
    };
    let client = backend.client()?;
    let kinds = Kinds::new();
    ensure_namespace(&client, &plan.namespace).await?;
    let fixture = Fixture::load(&plan.namespace, &kinds)?;
    let observer = Observer::start(&backend, &plan.namespace, &kinds).await?;
    let _kubelet = Kubelet::start_with(
        backend.client()?,
        "bench-node",
        Script::Run,
        KubeletConfig {
            step_delay: plan.step_delay,
            ..KubeletConfig::default()
        },
    );
    let ctx = Ctx {
        plan,
        client,
        kinds,
        fixture,
        observer,
    };
    let setup = Setup {
        backend: backend.describe(),
        browsers: plan.browsers,
        concurrency: plan.concurrency,
        rate: plan.rate,
        step_delay: plan.step_delay,
        max_workers: plan.max_workers,
        threads,
        smoke: plan.smoke,
    };

    let baseline = baseline(&ctx).await?;

    let mut op = Operator::start(&backend, &operator_rt, &ctx.operator_flags())?;
    create_config(&ctx, &mut op).await?;
    let (run, cost) = provision(&ctx, &mut op).await?;
    let (idle, op) = idle(&ctx, &backend, &operator_rt, op).await?;
    op.stop().await?;
    let configs: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &plan.namespace, &ctx.kinds.config);
    let config_name = ctx.fixture.config["metadata"]["name"]
        .as_str()
        .unwrap_or_default();
    configs
        .delete(config_name, &DeleteParams::default())
        .await
        .map_err(api_error("delete BrowserConfig"))?;
    Ok(Report {
        setup,
        baseline,
        run,
        cost,
        idle,
    })
}

async fn ensure_namespace(client: &Client, ns: &str) -> Result<(), BenchError> {
    let api: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&()),
    );
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns},
    }))?;
    tolerate(
        api.create(&PostParams::default(), &object).await,
        409,
        "create namespace",
    )
}

async fn create_config(ctx: &Ctx<'_>, op: &mut Operator) -> Result<(), BenchError> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &ctx.plan.namespace, &ctx.kinds.config);
    let config: DynamicObject = serde_json::from_value(ctx.fixture.config.clone())?;
    let name = config.metadata.name.clone().unwrap_or_default();
    api.create(&PostParams::default(), &config)
        .await
        .map_err(api_error("create BrowserConfig"))?;
    // Browsers wait for a validated config, as they would in a running installation.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        op.check()?;
        let current = api
            .get(&name)
            .await
            .map_err(api_error("read BrowserConfig"))?;
        let ready = current.data["status"]["conditions"]
            .as_array()
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            });
        if ready {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(BenchError::Timeout {
                what: "the BrowserConfig to be validated".into(),
                state: current.data["status"].to_string(),
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The limit: N bare pods of the same shape, server-side applied at the same concurrency.
async fn baseline(ctx: &Ctx<'_>) -> Result<Baseline, BenchError> {
    let n = ctx.plan.browsers;
    let pods = ctx.pods();
    let names = names("base-", 0..n);
    let params = PatchParams::apply("bench").force();
    let times = fan_out(n, ctx.plan.concurrency, None, |i| {
        let pods = pods.clone();
        let name = names[i].clone();
        let body = ctx.fixture.pod(&name);
        let params = params.clone();
        async move {
            pods.patch(&name, &params, &Patch::Apply(body))
                .await
                .map_err(api_error("apply pod"))?;
            Ok(())
        }
    })
    .await?;
    let first = times.iter().map(|t| t.0).min();
    let last = times.iter().map(|t| t.1).max();
    let elapsed = match (first, last) {
        (Some(first), Some(last)) => last - first,
        _ => Duration::ZERO,
    };
    let latency = measure::summarize(times.iter().map(|(s, a)| *a - *s).collect());
    // Forced deletes: the baseline pods leave nothing behind for the operator run.
    let forced = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    fan_out(n, ctx.plan.concurrency, None, |i| {
        let pods = pods.clone();
        let name = names[i].clone();
        let forced = forced.clone();
        async move { tolerate(pods.delete(&name, &forced).await, 404, "delete pod") }
    })
    .await?;
    ctx.wait_gone("base-", n, None).await?;
    // Let the kubelet simulator's aborted walks settle before the operator starts.
    tokio::time::sleep(Duration::from_millis(300)).await;
    Ok(Baseline {
        pods: n,
        elapsed,
        throughput: per_second(n, elapsed),
        latency,
    })
}

fn per_second(n: usize, elapsed: Duration) -> f64 {
    if elapsed.is_zero() {
        0.0
    } else {
        n as f64 / elapsed.as_secs_f64()
    }
}

/// The operator run: N Browsers created (at `--rate` or all at once), all Running, then all
/// deleted.
async fn provision(ctx: &Ctx<'_>, op: &mut Operator) -> Result<(Run, Cost), BenchError> {
    let n = ctx.plan.browsers;
    let ns = &ctx.plan.namespace;
    let names = names("b-", 0..n);
    let cpu_start = Cpu::now(OPERATOR_THREADS)?;
    let created = ctx.create_browsers(&names, ctx.plan.rate).await?;
    ctx.wait_running(&names, op).await?;
    let cpu_running = Cpu::now(OPERATOR_THREADS)?;
    let metrics_running = op.metrics()?;

    let first_sent = created
        .iter()
        .map(|c| c.0)
        .min()
        .unwrap_or_else(Instant::now);
    let (browser_running, pod_running) = ctx.observer.with(|s| {
        let at = |map: &HashMap<String, Instant>| -> Vec<Option<Instant>> {
            names.iter().map(|n| map.get(n).copied()).collect()
        };
        (at(&s.browser_running), at(&s.pod_running))
    });
    let pod_sent: Vec<Option<Instant>> = names
        .iter()
        .map(|name| op.log.pod_create_sent(ns, name))
        .collect();
    let since = |from: &[Instant], to: &[Option<Instant>]| -> Vec<Duration> {
        from.iter()
            .zip(to)
            .filter_map(|(a, b)| b.map(|b| b.saturating_duration_since(*a)))
            .collect()
    };
    let sent: Vec<Instant> = created.iter().map(|c| c.0).collect();
    let propagation: Vec<Duration> = pod_running
        .iter()
        .zip(&browser_running)
        .filter_map(|(pod, browser)| Some(browser.as_ref()?.saturating_duration_since((*pod)?)))
        .collect();
    let last = |times: &[Option<Instant>]| times.iter().flatten().max().copied();
    let to_pods = last(&pod_sent).map_or(Duration::ZERO, |t| t - first_sent);
    let to_running = last(&browser_running).map_or(Duration::ZERO, |t| t - first_sent);

    let delete_start = Instant::now();
    ctx.delete_browsers(&names).await?;
    ctx.wait_gone("b-", n, Some(op)).await?;
    let (browsers_gone, pods_gone) = ctx.observer.with(|s| (s.browser_gone, s.pod_gone));
    let cpu_end = Cpu::now(OPERATOR_THREADS)?;
    // Let the last reconciles and events finish before the counters are read.
    settle(op).await?;
    let metrics_end = op.metrics()?;

    let run = Run {
        browsers: n,
        rate: ctx.plan.rate,
        create_latency: measure::summarize(created.iter().map(|(s, a)| *a - *s).collect()),
        to_pod_create: measure::summarize(since(&sent, &pod_sent)),
        missing_pod_create: pod_sent.iter().filter(|t| t.is_none()).count(),
        propagation: measure::summarize(propagation),
        end_to_end: measure::summarize(since(&sent, &browser_running)),
        to_pods,
        to_running,
        throughput_pods: per_second(n, to_pods),
        throughput_running: per_second(n, to_running),
        delete_browsers: browsers_gone.map(|t| t.saturating_duration_since(delete_start)),
        delete_pods: pods_gone.map(|t| t.saturating_duration_since(delete_start)),
    };
    let cost = Cost::from_metrics(
        &metrics_running,
        &metrics_end,
        op.log.counts(),
        cpu_running.since(&cpu_start),
        cpu_end.since(&cpu_running),
    );
    Ok((run, cost))
}

/// Waits until no reconcile runs and neither reconciles nor writes (Events are published
/// in the background, after their reconcile) changed for a moment.
async fn settle(op: &mut Operator) -> Result<(), BenchError> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let activity = |op: &Operator| -> Result<(f64, f64, f64), BenchError> {
        let (done, in_flight) = op.reconciles()?;
        let writes = measure::sum(
            &op.metrics()?,
            "browser_controller_api_writes_total",
            |_| true,
        );
        Ok((done, in_flight, writes))
    };
    let mut last = activity(op)?;
    let mut stable_since = Instant::now();
    loop {
        op.check()?;
        tokio::time::sleep(Duration::from_millis(20)).await;
        let current = activity(op)?;
        if current != last {
            last = current;
            stable_since = Instant::now();
        } else if current.1 == 0.0 && stable_since.elapsed() >= Duration::from_millis(200) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(BenchError::Timeout {
                what: "the operator to settle".into(),
                state: format!("{} reconciles, {} in flight", current.0, current.1),
            });
        }
    }
}

/// For each idle size: that many Running Browsers exist; the operator is stopped and started
/// again over them, and its start-up cost, writes, heap and RSS growth and idle CPU are read.
async fn idle(
    ctx: &Ctx<'_>,
    backend: &Backend,
    operator_rt: &Handle,
    mut op: Operator,
) -> Result<(Vec<Idle>, Operator), BenchError> {
    let mut results = Vec::new();
    let mut existing = 0;
    for &size in &ctx.plan.idle {
        let more = names("idle-", existing..size);
        ctx.create_browsers(&more, None).await?;
        let all = names("idle-", 0..size);
        ctx.wait_running(&all, &mut op).await?;
        existing = size;
        settle(&mut op).await?;
        op.stop().await?;
        // Let the stopped operator's tasks wind down and free what they held.
        tokio::time::sleep(Duration::from_millis(300)).await;

        let heap_before = measure::heap();
        let rss_before = measure::memory()?;
        measure::reset_heap_peak();
        let peak_reset = measure::reset_peak_rss();
        let cpu_before = Cpu::now(OPERATOR_THREADS)?;
        let started = Instant::now();
        op = Operator::start(backend, operator_rt, &ctx.operator_flags())?;
        let deadline = started + phase_timeout(size);
        loop {
            op.check()?;
            let (done, in_flight) = op.reconciles()?;
            if done >= size as f64 && in_flight == 0.0 {
                break;
            }
            if Instant::now() >= deadline {
                return Err(BenchError::Timeout {
                    what: "the restarted operator to reconcile every Browser".into(),
                    state: format!("{done} of {size} reconciled"),
                });
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let sync = started.elapsed();
        let cpu_synced = Cpu::now(OPERATOR_THREADS)?;
        let (reconciles_synced, _) = op.reconciles()?;
        tokio::time::sleep(ctx.plan.idle_window).await;
        op.check()?;
        let cpu_end = Cpu::now(OPERATOR_THREADS)?;
        let heap_after = measure::heap();
        let rss_after = measure::memory()?;
        let text = op.metrics()?;
        let (reconciles_end, _) = op.reconciles()?;
        let writes = report::WriteCounts::from_metrics(&text);
        results.push(Idle {
            browsers: size,
            sync,
            startup_cpu: cpu_synced.since(&cpu_before),
            writes,
            window: ctx.plan.idle_window,
            idle_reconciles: reconciles_end - reconciles_synced,
            idle_cpu: cpu_end.since(&cpu_synced),
            heap_before: heap_before.live,
            heap_after: heap_after.live,
            heap_peak: heap_after.peak,
            rss_before: rss_before.rss,
            rss_after: rss_after.rss,
            rss_peak: peak_reset.then_some(rss_after.peak),
        });
    }
    let all = names("idle-", 0..existing);
    ctx.delete_browsers(&all).await?;
    ctx.wait_gone("idle-", existing, Some(&mut op)).await?;
    Ok((results, op))
}
