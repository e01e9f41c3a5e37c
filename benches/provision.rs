//! Provisioning benchmark: how fast and how cheaply the operator turns Browsers into running
//! pods, measured against the pod-create limit and an ideal client of the same API server in
//! the same run.
//!
//! One process holds the API server double (or a client of the cluster named by
//! `--kubeconfig`, or of the control plane it started from `KUBEBUILDER_ASSETS`), the kubelet
//! simulator, the benchmark's own client, and the operator on a Tokio runtime of its own whose
//! threads are named `operator`: their CPU time is the operator's. Requests of the operator to
//! the double are served on the benchmark's runtime. With `--operator-binary` the operator is a
//! process of its own instead, and with `--go-controller` the Go browser-controller takes its
//! place as a process of its own.
//!
//! Phases: (1) baseline — N bare pods of the Browsers' shape created with server-side apply at
//! the same client concurrency; (2) the ideal client — N Browsers provisioned with exactly the
//! writes of the normal path, the limit for an operator on this server; (3) the operator run —
//! N Browsers created, then deleted; (4) idle — for each `--idle` size, the operator restarted
//! over that many Running Browsers, its memory, start-up cost and idle CPU. The CPU of
//! kube-apiserver and etcd is read per phase when the benchmark started them. With `--quota`
//! the operator run is under a ResourceQuota of pods (the capacity queue), and with `--owners`
//! its Browsers arrive as several owners' (fair share), each owner's wait reported. See
//! docs/performance.md.

use testkit as support;

#[path = "provision/audit.rs"]
mod audit;
#[path = "provision/cluster.rs"]
mod cluster;
#[path = "provision/collector.rs"]
mod collector;
#[path = "provision/copied.rs"]
mod copied;
#[path = "provision/fair_share.rs"]
mod fair_share;
#[path = "provision/flavour.rs"]
mod flavour;
#[path = "provision/ideal.rs"]
mod ideal;
#[path = "provision/measure.rs"]
mod measure;
#[path = "provision/quota.rs"]
mod quota;
#[path = "provision/report.rs"]
mod report;
#[path = "provision/requests.rs"]
mod requests;
#[path = "provision/targets.rs"]
mod targets;
#[path = "provision/under_test.rs"]
mod under_test;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use browser_controller::api::crd::{self, Layout};
use browser_controller::api::keys;
use browser_controller::cached::{CachedPod, cached};
use browser_controller::cli::LogFormat;
use browser_controller::lifecycle::status::StatusBuilder;
use browser_controller::{duration, logging, manifest, operator};
use clap::Parser;
use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::time::Instant;

use audit::Audit;
use cluster::Backend;
use collector::Collector;
use copied::Copied;
use fair_share::Owners;
use flavour::Flavour;
use ideal::IdealClient;
use measure::{Cpu, ServerCpu, ServerPids};
use quota::Quota;
use report::{Baseline, Cost, Flow, Ideal, Idle, IdleMemory, PathToPod, Report, Run, Setup};
use requests::{RequestLog, Step, Timed};
use support::apiserver::ApiServer;
use support::controlplane::{self, Assets, ControlPlane};
use support::host::TempDir;
use support::kinds;
use support::kubelet::{Kubelet, KubeletConfig, KubeletHandle, Script};
use support::rendered::Rendered;
use under_test::{Launch, Operator};

#[global_allocator]
static ALLOCATOR: measure::CountingAllocator = measure::CountingAllocator;

/// The kubelet simulator's node.
const KUBELET_NODE: &str = "bench-node";

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
    /// Bare pods and ideal-client Browsers of the reference phases (default: --browsers): a
    /// burst of 50 000 for the operator measured without three more bursts of that size. The
    /// ratios then compare runs of unequal sizes.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    reference_browsers: Option<u32>,
    /// Client requests in flight at once (baseline pods, Browser creates and deletes).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    concurrency: u32,
    /// Browsers created per second; all at once when absent.
    #[arg(long, value_parser = parse_rate)]
    rate: Option<f64>,
    /// Idle Running Browsers cached for the memory and CPU measurement, comma-separated
    /// (`0`: skip that part). A size given again restarts the operator again over the same
    /// Browsers: the peak RSS of a restart varies from run to run.
    #[arg(long, value_delimiter = ',', default_value = "100,1000")]
    idle: Vec<u32>,
    /// Write the --idle Browsers in their Running state (Browser with finalizer and labels,
    /// its pod bound and running, the Browser's Running status) while the operator is stopped,
    /// instead of having the operator provision them: a restart over tens of thousands of
    /// Browsers measured in minutes.
    #[arg(long)]
    prefill: bool,
    /// How long the operator is watched idle at each --idle size.
    #[arg(long, default_value = "10s", value_parser = duration::parse)]
    idle_window: Duration,
    /// Pause between two steps of the kubelet simulator (bind, Pending, Running).
    #[arg(long, default_value = "5ms", value_parser = duration::parse)]
    step_delay: Duration,
    /// Passed to the operator as --max-workers (default: the operator's own default).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    max_workers: Option<u16>,
    /// Mixed load: each session of the operator run ends this long after its pod runs (the
    /// seleniferous container exits), so that new sessions start while others end and are
    /// cleaned up. Without it, sessions last until the benchmark deletes their Browsers.
    #[arg(long, value_name = "DURATION", num_args = 0..=1, default_missing_value = "1.5s",
          value_parser = duration::parse)]
    session_end: Option<Duration>,
    /// The operator run under a ResourceQuota of this many pods in the namespace (the
    /// capacity queue, the operator started with `--queue-timeout=10m`); the benchmark keeps
    /// the quota's use counted, as the quota controller would.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    quota: Option<u32>,
    /// Fair share: the operator run's first half of Browsers are owner 0's, created at once; a
    /// second later the rest arrive, owners 1 to N-1 in turn. The waits are reported per owner.
    #[arg(long, requires = "quota", conflicts_with = "rate",
          value_parser = clap::value_parser!(u32).range(1..))]
    owners: Option<u32>,
    /// With --owners: the same arrivals, every Browser of one owner (the figure fair share is
    /// compared with). The waits are still reported by the group each would be in.
    #[arg(long, requires = "owners")]
    single_owner: bool,
    /// Run the operator before the ideal client (default: after it), to see whether the order
    /// of the phases favours either: each phase leaves the server with the objects the last one
    /// created and deleted.
    #[arg(long)]
    operator_first: bool,
    /// Skip the unmeasured phase of the ideal client over as many Browsers that runs before
    /// the measured ones. Without it the first measured burst of Browsers is the server's
    /// first, which is slower than the next whichever client makes it, and the order of the
    /// phases favours the client run second.
    #[arg(long = "no-warm-phase", action = clap::ArgAction::SetFalse)]
    warm_phase: bool,
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
    /// Run this operator binary (e.g. the shipped build) as a separate process against the
    /// same cluster instead of the operator in this process; needs a real API server
    /// (`KUBEBUILDER_ASSETS` or --kubeconfig).
    #[arg(long, value_name = "PATH")]
    operator_binary: Option<PathBuf>,
    /// The loopback port the --operator-binary process serves `/metrics` on (default: a free
    /// one), for a Prometheus of your own to scrape during the run.
    #[arg(long, value_name = "PORT", requires = "operator_binary",
          value_parser = clap::value_parser!(u16).range(1..))]
    metrics_port: Option<u16>,
    /// Run this build of the Go browser-controller (the operator Selenosis users run today)
    /// as a separate process in the operator's place, measured by the same phases on the same
    /// server; needs a real API server like --operator-binary. It watches every namespace.
    #[arg(long, value_name = "PATH", conflicts_with = "operator_binary")]
    go_controller: Option<PathBuf>,
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
    #[error("the operator stopped unexpectedly: {0}")]
    OperatorExited(String),
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
    /// Size of the bare pods' and the ideal client's phases.
    reference: usize,
    concurrency: usize,
    rate: Option<f64>,
    idle: Vec<usize>,
    idle_window: Duration,
    prefill: bool,
    step_delay: Duration,
    max_workers: Option<u16>,
    session_end: Option<Duration>,
    quota: Option<usize>,
    owners: Option<Owners>,
    operator_first: bool,
    warm_phase: bool,
    namespace: String,
    kubeconfig: Option<PathBuf>,
    /// The binary run as a process of its own (ours, or the Go controller's: `flavour`);
    /// `None`: ours in this process.
    operator_binary: Option<PathBuf>,
    /// The operator process's metrics port; `None`: a free one.
    metrics_port: Option<u16>,
    flavour: Flavour,
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
        let mut plan = Plan {
            browsers: args.browsers as usize,
            reference: args.reference_browsers.unwrap_or(args.browsers) as usize,
            concurrency: args.concurrency as usize,
            rate: args.rate,
            idle,
            idle_window: args.idle_window,
            prefill: args.prefill,
            step_delay: args.step_delay,
            max_workers: args.max_workers,
            session_end: args.session_end,
            quota: args.quota.map(|q| q as usize),
            owners: args.owners.map(|n| Owners {
                groups: n as usize,
                single: args.single_owner,
            }),
            operator_first: args.operator_first,
            warm_phase: args.warm_phase,
            namespace: args.namespace.clone(),
            kubeconfig: args.kubeconfig.clone(),
            operator_binary: args
                .operator_binary
                .clone()
                .or_else(|| args.go_controller.clone()),
            metrics_port: args.metrics_port,
            flavour: if args.go_controller.is_some() {
                Flavour::Go
            } else {
                Flavour::Ours
            },
            smoke: args.smoke,
        };
        if args.smoke {
            plan.browsers = 10;
            plan.reference = 10;
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
    if let Some(binary) = &plan.operator_binary {
        let flag = match plan.flavour {
            Flavour::Ours => "--operator-binary",
            Flavour::Go => "--go-controller",
        };
        if plan.kubeconfig.is_none() && !matches!(Assets::from_env(), Ok(Some(_))) {
            return Err(BenchError::Flags(format!(
                "{flag} runs the operator against a real API server: set KUBEBUILDER_ASSETS or --kubeconfig"
            )));
        }
        if !binary.is_file() {
            return Err(BenchError::Flags(format!(
                "{flag} {}: no such file",
                binary.display()
            )));
        }
    }
    if plan.flavour == Flavour::Go && plan.max_workers.is_some() {
        return Err(BenchError::Flags(
            "--max-workers: the Go controller has no such flag (it reconciles one Browser at a time)".into(),
        ));
    }
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
    // An operator process acts as a user of its own there, whose writes the audit log
    // tells apart.
    let process = plan.operator_binary.is_some();
    let (plane, identity) = match (&plan.kubeconfig, Assets::from_env()) {
        (None, Ok(Some(assets))) => {
            let plane = bench_rt.block_on(start_control_plane(&assets, process))?;
            plan.kubeconfig = Some(plane.admin_kubeconfig());
            let identity = if process {
                Some(bench_rt.block_on(audit::grant(&plane, plan.flavour))?)
            } else {
                None
            };
            (Some(plane), identity)
        }
        (None, Err(e)) => return Err(BenchError::Fixture(e.to_string())),
        _ => (None, None),
    };
    // The API server's CPU is only known when this process started it.
    let server = plane
        .as_ref()
        .and_then(|plane| ServerPids::identify(&plane.pids()));
    let report = bench_rt.block_on(bench(
        &plan,
        operator_rt.handle().clone(),
        threads,
        server,
        identity,
    ));
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

/// Starts etcd and kube-apiserver from `assets`, with the audit log of pod and Browser writes
/// when `audit`, and installs `crds/`.
async fn start_control_plane(assets: &Assets, audit: bool) -> Result<ControlPlane, BenchError> {
    println!("starting kube-apiserver and etcd from KUBEBUILDER_ASSETS");
    let plane = ControlPlane::start_with(
        assets,
        controlplane::Options {
            audit,
            ..controlplane::Options::default()
        },
    )
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
pub type Fixture = Rendered;

fn testdata(path: &str) -> Result<Value, BenchError> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata")
        .join(path);
    manifest::read_file(&path)?
        .into_iter()
        .next()
        .ok_or_else(|| BenchError::Fixture(format!("{} is empty", path.display())))
}

fn load_fixture(ns: &str, kinds: &Kinds) -> Result<Fixture, BenchError> {
    let mut config = testdata("configs/single-sidecar.yaml")?;
    config["metadata"]["namespace"] = json!(ns);
    let mut browser = testdata("browsers/chrome.yaml")?;
    browser["metadata"]["namespace"] = json!(ns);
    Rendered::new(config, browser, &kinds.browser)
        .map_err(|e| BenchError::Fixture(format!("the example Browser does not render: {e}")))
}

/// What the benchmark's own watches saw, with the moment each thing was first seen.
#[derive(Default)]
struct Seen {
    browsers: HashSet<String>,
    pods: HashSet<String>,
    /// First event showing the pod: its creation.
    pod_created: HashMap<String, Instant>,
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
                self.pod_created.entry(name.clone()).or_insert(at);
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

/// Waits until `pending` returns `None`; its `Some` says what is still missing. `alive`
/// fails when whatever should make progress stopped.
async fn until(
    what: &str,
    timeout: Duration,
    mut alive: impl FnMut() -> Result<(), BenchError>,
    mut pending: impl FnMut() -> Option<String>,
) -> Result<(), BenchError> {
    let deadline = Instant::now() + timeout;
    loop {
        let Some(state) = pending() else {
            return Ok(());
        };
        alive()?;
        if Instant::now() >= deadline {
            return Err(BenchError::Timeout {
                what: what.to_string(),
                state,
            });
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
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
    /// kube-apiserver and etcd, when the benchmark started them.
    server: Option<ServerPids>,
    kubelet: KubeletHandle,
    /// The operator process's writes, when the benchmark started the API server.
    audit: Option<Audit>,
    /// The garbage collector's stand-in, for an operator that relies on one.
    collector: Option<Collector>,
}

impl Ctx<'_> {
    /// Generous time for a phase over `n` objects on a slow machine.
    fn phase_timeout(&self, n: usize) -> Duration {
        Duration::from_secs(60) + self.plan.flavour.pace() * n as u32
    }

    /// Now in the audit log, when there is one.
    fn audit_mark(&self) -> Result<Option<audit::Mark>, BenchError> {
        self.audit.as_ref().map(Audit::mark).transpose()
    }

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
        // The Go controller takes none of these (--max-workers was refused).
        if self.plan.flavour == Flavour::Go {
            return flags;
        }
        if let Some(n) = self.plan.max_workers {
            flags.push(format!("--max-workers={n}"));
        }
        // Under a quota the line may be long: nobody gives up waiting during the run.
        if self.plan.quota.is_some() {
            flags.push("--queue-timeout=10m".into());
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
        self.create_browsers_of(names, None, rate).await
    }

    /// Creates the Browsers `names`, each of its owner in `owners` (by position) if given.
    async fn create_browsers_of(
        &self,
        names: &[String],
        owners: Option<&[String]>,
        rate: Option<f64>,
    ) -> Result<Vec<(Instant, Instant)>, BenchError> {
        let api = self.browsers();
        fan_out(names.len(), self.plan.concurrency, rate, |i| {
            let api = api.clone();
            let object = self.fixture.browser(&names[i]);
            let owner = owners.map(|o| o[i].clone());
            async move {
                let mut object = object?;
                if let Some(owner) = owner {
                    fair_share::label(&mut object, &owner);
                }
                api.create(&PostParams::default(), &object)
                    .await
                    .map_err(api_error("create Browser"))?;
                Ok(())
            }
        })
        .await
    }

    /// Writes the Browsers of `names` as the operator and the kubelet simulator leave them
    /// Running: the Browser with the operator's finalizer and labels, its pod applied by the
    /// operator's field manager, bound to the simulator's node and given its Running status,
    /// and the Browser's Running status.
    async fn prefill(&self, names: &[String]) -> Result<(), BenchError> {
        let (browsers, pods) = (self.browsers(), self.pods());
        let apply = PatchParams::apply(keys::FIELD_MANAGER).force();
        fan_out(names.len(), self.plan.concurrency, None, |i| {
            let (browsers, pods, apply) = (browsers.clone(), pods.clone(), apply.clone());
            let browser = self.fixture.browser(&names[i]);
            async move {
                let browser = browser?;
                let mut body = serde_json::to_value(&browser)?;
                ideal::operated(&mut body, &browser);
                let created = browsers
                    .create(&PostParams::default(), &serde_json::from_value(body)?)
                    .await
                    .map_err(api_error("prefill: create Browser"))?;
                let (name, uid) = (created.name_any(), created.uid().unwrap_or_default());
                let mut pod = self.fixture.owned_pod(&name, &uid);
                pod["spec"]["nodeName"] = json!(KUBELET_NODE);
                pod["metadata"]["annotations"][support::kubelet::PREFILLED] = json!("true");
                let pod = pods
                    .patch(&name, &apply, &Patch::Apply(pod))
                    .await
                    .map_err(api_error("prefill: apply pod"))?;
                let status = support::kubelet::running_pod_status(&pod.data);
                let pod = pods
                    .patch_status(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"status": status})),
                    )
                    .await
                    .map_err(api_error("prefill: pod status"))?;
                // The status the operator derives from that pod as its cache holds it.
                let pod: CachedPod = cached(&pod)?;
                let status =
                    StatusBuilder::new(&json!({}), jiff::Timestamp::now()).mirror(&pod.json()?);
                let body = json!({
                    "apiVersion": self.kinds.browser.api_version,
                    "kind": self.kinds.browser.kind,
                    "metadata": {"name": name, "uid": uid},
                    "status": status,
                });
                browsers
                    .patch_status(&name, &apply, &Patch::Apply(body))
                    .await
                    .map_err(api_error("prefill: Browser status"))?;
                Ok(())
            }
        })
        .await?;
        Ok(())
    }

    /// Writes the Browsers of `names` as copies of `model`, the way the operator that left it
    /// Running writes them (creates, and merge patches of the status), and the kubelet
    /// simulator's running status of each pod.
    async fn prefill_copies(&self, names: &[String], model: &Copied) -> Result<(), BenchError> {
        let (browsers, pods) = (self.browsers(), self.pods());
        fan_out(names.len(), self.plan.concurrency, None, |i| {
            let (browsers, pods) = (browsers.clone(), pods.clone());
            let name = names[i].clone();
            async move {
                let created = browsers
                    .create(&PostParams::default(), &model.browser(&name)?)
                    .await
                    .map_err(api_error("prefill: create Browser"))?;
                let mut pod = model.pod(&name, &created.uid().unwrap_or_default())?;
                pod.annotations_mut()
                    .insert(support::kubelet::PREFILLED.into(), "true".into());
                let pod = pods
                    .create(&PostParams::default(), &pod)
                    .await
                    .map_err(api_error("prefill: create pod"))?;
                let status = support::kubelet::running_pod_status(&pod.data);
                pods.patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": status})),
                )
                .await
                .map_err(api_error("prefill: pod status"))?;
                browsers
                    .patch_status(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(model.status(&status)),
                    )
                    .await
                    .map_err(api_error("prefill: Browser status"))?;
                Ok(())
            }
        })
        .await?;
        Ok(())
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

    /// Waits until every Browser of `names` was seen Running, and returns how many were.
    /// With `partial`, a phase in which some never show Running ends when no more did for
    /// [`STALL`] (their share is a figure of the run); without, that is an error.
    async fn wait_running(
        &self,
        names: &[String],
        mut alive: impl FnMut() -> Result<(), BenchError>,
        partial: bool,
    ) -> Result<usize, BenchError> {
        let n = names.len();
        let deadline = Instant::now() + self.phase_timeout(n);
        let mut last = (0, Instant::now());
        loop {
            let running = self.observer.with(|s| {
                names
                    .iter()
                    .filter(|n| s.browser_running.contains_key(*n))
                    .count()
            });
            if running == n {
                return Ok(running);
            }
            alive()?;
            if running != last.0 {
                last = (running, Instant::now());
            }
            let now = Instant::now();
            if partial && running > 0 && (now - last.1 >= STALL || now >= deadline) {
                return Ok(running);
            }
            if now >= deadline || (!partial && now - last.1 >= self.phase_timeout(0)) {
                return Err(BenchError::Timeout {
                    what: "Browsers to run".into(),
                    state: format!("{running} of {n} Running"),
                });
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    async fn wait_gone(
        &self,
        prefix: &str,
        n: usize,
        alive: impl FnMut() -> Result<(), BenchError>,
    ) -> Result<(), BenchError> {
        until("deletions", self.phase_timeout(n), alive, || {
            let (browsers, pods) = self.observer.with(|s| s.count_live(prefix));
            (browsers + pods > 0).then(|| format!("{browsers} Browsers and {pods} pods left"))
        })
        .await
    }

    /// kube-apiserver and etcd CPU now, when the benchmark started them.
    fn server_cpu(&self) -> Result<Option<ServerCpu>, BenchError> {
        Ok(self.server.map(|s| s.cpu()).transpose()?)
    }

    /// What the benchmark's watches saw of the Browsers `names` created at `created`, with
    /// the pod create moments of `log` and the phase's CPU.
    fn flow(
        &self,
        names: &[String],
        created: &[(Instant, Instant)],
        log: Option<&RequestLog>,
        server_cpu: Option<ServerCpu>,
        client_cpu: Cpu,
    ) -> Flow {
        let at = |map: &HashMap<String, Instant>| -> Vec<Option<Instant>> {
            names.iter().map(|n| map.get(n).copied()).collect()
        };
        let (browser_running, pod_running, pod_created) = self.observer.with(|s| {
            (
                at(&s.browser_running),
                at(&s.pod_running),
                at(&s.pod_created),
            )
        });
        let sent: Vec<Instant> = created.iter().map(|c| c.0).collect();
        let first_sent = sent.iter().min().copied().unwrap_or_else(Instant::now);
        let since = |to: &[Option<Instant>]| -> Vec<Duration> {
            sent.iter()
                .zip(to)
                .filter_map(|(a, b)| b.map(|b| b.saturating_duration_since(*a)))
                .collect()
        };
        let path = log.map(|log| {
            let steps = |step| -> Vec<Option<Timed>> {
                names
                    .iter()
                    .map(|name| log.step(step, &self.plan.namespace, name))
                    .collect()
            };
            let (metadata, pod) = (steps(Step::Metadata), steps(Step::Pod));
            let sent_at = |steps: &[Option<Timed>]| -> Vec<Option<Instant>> {
                steps.iter().map(|t| t.map(|t| t.sent)).collect()
            };
            let round_trips = |steps: &[Option<Timed>]| -> Vec<Duration> {
                steps
                    .iter()
                    .flatten()
                    .filter_map(|t| Some(t.answered?.saturating_duration_since(t.sent)))
                    .collect()
            };
            let decided: Vec<Duration> = metadata
                .iter()
                .zip(&pod)
                .filter_map(|(m, p)| {
                    Some(
                        p.as_ref()?
                            .sent
                            .saturating_duration_since(m.as_ref()?.answered?),
                    )
                })
                .collect();
            PathToPod {
                to_metadata_sent: measure::summarize(since(&sent_at(&metadata))),
                metadata_round_trip: measure::summarize(round_trips(&metadata)),
                metadata_to_pod_sent: measure::summarize(decided),
                to_pod_sent: measure::summarize(since(&sent_at(&pod))),
                pod_round_trip: measure::summarize(round_trips(&pod)),
            }
        });
        let propagation: Vec<Duration> = pod_running
            .iter()
            .zip(&browser_running)
            .filter_map(|(pod, browser)| Some(browser.as_ref()?.saturating_duration_since((*pod)?)))
            .collect();
        let last = |times: &[Option<Instant>]| {
            times
                .iter()
                .flatten()
                .max()
                .map_or(Duration::ZERO, |t| t.saturating_duration_since(first_sent))
        };
        let seen = |times: &[Option<Instant>]| times.iter().flatten().count();
        Flow {
            browsers: names.len(),
            create_latency: measure::summarize(created.iter().map(|(s, a)| *a - *s).collect()),
            to_pod_created: measure::summarize(since(&pod_created)),
            path,
            pods_seen: seen(&pod_created),
            propagation: measure::summarize(propagation),
            end_to_end: measure::summarize(since(&browser_running)),
            seen_running: seen(&browser_running),
            to_pods: last(&pod_created),
            to_running: last(&browser_running),
            server_cpu,
            client_cpu,
        }
    }
}

/// A phase whose Browsers stopped turning Running for this long is over.
const STALL: Duration = Duration::from_secs(30);

fn names(prefix: &str, range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("{prefix}{i:05}")).collect()
}

fn server_since(end: Option<ServerCpu>, start: Option<ServerCpu>) -> Option<ServerCpu> {
    Some(end?.since(&start?))
}

async fn bench(
    plan: &Plan,
    operator_rt: Handle,
    threads: usize,
    server: Option<ServerPids>,
    identity: Option<(PathBuf, Audit)>,
) -> Result<Report, BenchError> {
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
    let (operator_kubeconfig, audit) = match identity {
        Some((kubeconfig, audit)) => (Some(kubeconfig), Some(audit)),
        None => (plan.kubeconfig.clone(), None),
    };
    let launch = match (&plan.operator_binary, operator_kubeconfig) {
        (Some(binary), Some(kubeconfig)) => Launch::Binary {
            binary: binary.clone(),
            kubeconfig,
            logs: TempDir::new("bench-operator"),
            metrics_port: plan.metrics_port,
            flavour: plan.flavour,
        },
        _ => Launch::InProcess {
            backend: backend.clone(),
            runtime: operator_rt.clone(),
            threads: OPERATOR_THREADS,
        },
    };
    let client = backend.client()?;
    let kinds = Kinds::new();
    ensure_namespace(&client, &plan.namespace).await?;
    let fixture = load_fixture(&plan.namespace, &kinds)?;
    let observer = Observer::start(&backend, &plan.namespace, &kinds).await?;
    let kubelet = Kubelet::start_with(
        backend.client()?,
        KUBELET_NODE,
        Script::Run,
        KubeletConfig {
            step_delay: plan.step_delay,
            ..KubeletConfig::default()
        },
    );
    let collector = plan
        .flavour
        .needs_collector()
        .then(|| Collector::start(client.clone(), &plan.namespace, &kinds));
    let writes = match &audit {
        Some(audit) => format!(
            "the operator's writes to Browsers and pods from kube-apiserver's audit log, by its user {} (duplicates: beyond {})",
            audit.user(),
            audit::NEEDED
        ),
        None => match plan.flavour {
            Flavour::Ours => {
                "the operator's writes from its browser_controller_api_writes_total".to_string()
            }
            Flavour::Go => "the operator's writes from its rest_client_requests_total, by method only (every resource)".to_string(),
        },
    };
    let ctx = Ctx {
        plan,
        client,
        kinds,
        fixture,
        observer,
        server,
        kubelet,
        audit,
        collector,
    };
    let setup = Setup {
        backend: backend.describe()
            + if server.is_some() {
                " (kube-apiserver and etcd started by the benchmark)"
            } else {
                ""
            },
        operator: launch.describe(),
        writes,
        browsers: plan.browsers,
        reference: plan.reference,
        concurrency: plan.concurrency,
        rate: plan.rate,
        step_delay: plan.step_delay,
        max_workers: plan.max_workers,
        session_end: plan.session_end,
        quota: plan.quota,
        owners: plan.owners,
        operator_first: plan.operator_first,
        warm_phase: plan.warm_phase,
        threads,
        smoke: plan.smoke,
    };

    warm_up(&ctx).await?;
    let baseline = baseline(&ctx).await?;
    if plan.warm_phase {
        ideal(&ctx, &backend, &operator_rt, "warm-").await?;
    }
    let ideal_first = if plan.operator_first {
        None
    } else {
        Some(ideal(&ctx, &backend, &operator_rt, IDEAL).await?)
    };
    let mut op = Operator::start(&launch, &ctx.operator_flags()).await?;
    create_config(&ctx, &mut op).await?;
    let (run, cost) = provision(&ctx, &mut op).await?;
    let (ideal, op) = match ideal_first {
        Some(ideal) => (ideal, op),
        None => {
            // Stopped while the ideal client works: it would take the ideal client's Browsers.
            op.stop().await?;
            let ideal = ideal(&ctx, &backend, &operator_rt, IDEAL).await?;
            (
                ideal,
                Operator::start(&launch, &ctx.operator_flags()).await?,
            )
        }
    };
    let (idle, op) = idle(&ctx, &launch, op).await?;
    op.stop().await?;
    let configs: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &plan.namespace, &ctx.kinds.config);
    let config_name = ctx.fixture.config["metadata"]["name"]
        .as_str()
        .unwrap_or_default();
    // The Go controller's finalizer on the config, which only it removes.
    if plan.flavour == Flavour::Go {
        configs
            .patch(
                config_name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await
            .map_err(api_error("release the BrowserConfig"))?;
    }
    configs
        .delete(config_name, &DeleteParams::default())
        .await
        .map_err(api_error("delete BrowserConfig"))?;
    Ok(Report {
        setup,
        baseline,
        ideal,
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
    let flavour = ctx.plan.flavour;
    let config: DynamicObject = serde_json::from_value(flavour.config(&ctx.fixture.config)?)?;
    let name = config.metadata.name.clone().unwrap_or_default();
    api.create(&PostParams::default(), &config)
        .await
        .map_err(api_error("create BrowserConfig"))?;
    // Browsers wait for a config the operator has read, as they would in a running
    // installation.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        op.check()?;
        let current = api
            .get(&name)
            .await
            .map_err(api_error("read BrowserConfig"))?;
        if flavour.config_read(&current) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(BenchError::Timeout {
                what: format!("the {} to read the BrowserConfig", flavour.name()),
                state: format!(
                    "finalizers {:?}, status {}",
                    current.metadata.finalizers, current.data["status"]
                ),
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One Browser and one pod through each kind of write of the phases, outside the figures:
/// a kube-apiserver whose CRDs were just installed takes seconds over its first write to them.
async fn warm_up(ctx: &Ctx<'_>) -> Result<(), BenchError> {
    let name = "warmup";
    let browsers = ctx.browsers();
    let browser = browsers
        .create(&PostParams::default(), &ctx.fixture.browser(name)?)
        .await
        .map_err(api_error("warm-up: create Browser"))?;
    let uid = browser.metadata.uid.clone().unwrap_or_default();
    let params = PatchParams::apply("bench").force();
    let head = json!({
        "apiVersion": ctx.kinds.browser.api_version,
        "kind": ctx.kinds.browser.kind,
        "metadata": {"name": name, "uid": uid, "labels": {keys::LABEL_BROWSER: name}},
    });
    browsers
        .patch(name, &params, &Patch::Apply(&head))
        .await
        .map_err(api_error("warm-up: apply Browser"))?;
    let mut status = head.clone();
    status["status"] = json!({"phase": "Pending"});
    browsers
        .patch_status(name, &params, &Patch::Apply(&status))
        .await
        .map_err(api_error("warm-up: apply Browser status"))?;
    ctx.pods()
        .patch(
            name,
            &params,
            &Patch::Apply(ctx.fixture.owned_pod(name, &uid)),
        )
        .await
        .map_err(api_error("warm-up: apply pod"))?;
    let names = [name.to_string()];
    force_delete_pods(ctx, &names).await?;
    ctx.delete_browsers(&names).await?;
    ctx.wait_gone(name, 1, || Ok(())).await
}

/// The limit: N bare pods of the same shape, server-side applied at the same concurrency.
async fn baseline(ctx: &Ctx<'_>) -> Result<Baseline, BenchError> {
    let n = ctx.plan.reference;
    let pods = ctx.pods();
    let names = names("base-", 0..n);
    let params = PatchParams::apply("bench").force();
    let server_start = ctx.server_cpu()?;
    let times = fan_out(n, ctx.plan.concurrency, None, |i| {
        let pods = pods.clone();
        let name = names[i].clone();
        let body = ctx.fixture.bare_pod(&name);
        let params = params.clone();
        async move {
            pods.patch(&name, &params, &Patch::Apply(body))
                .await
                .map_err(api_error("apply pod"))?;
            Ok(())
        }
    })
    .await?;
    let server_cpu = server_since(ctx.server_cpu()?, server_start);
    let first = times.iter().map(|t| t.0).min();
    let last = times.iter().map(|t| t.1).max();
    let elapsed = match (first, last) {
        (Some(first), Some(last)) => last - first,
        _ => Duration::ZERO,
    };
    let latency = measure::summarize(times.iter().map(|(s, a)| *a - *s).collect());
    force_delete_pods(ctx, &names).await?;
    ctx.wait_gone("base-", n, || Ok(())).await?;
    // Let the kubelet simulator's aborted walks settle before the next phase.
    tokio::time::sleep(Duration::from_millis(300)).await;
    Ok(Baseline {
        pods: n,
        elapsed,
        throughput: report::per_second(n, elapsed),
        latency,
        server_cpu,
    })
}

/// Forced deletes (no kubelet confirmation): a phase leaves nothing behind for the next.
async fn force_delete_pods(ctx: &Ctx<'_>, names: &[String]) -> Result<(), BenchError> {
    let pods = ctx.pods();
    let forced = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    fan_out(names.len(), ctx.plan.concurrency, None, |i| {
        let pods = pods.clone();
        let name = names[i].clone();
        let forced = forced.clone();
        async move { tolerate(pods.delete(&name, &forced).await, 404, "delete pod") }
    })
    .await?;
    Ok(())
}

/// Name prefix of the ideal client's measured Browsers.
const IDEAL: &str = "ideal-";

/// The ideal client's phase: N Browsers named `prefix` and a number, created as for the
/// operator and provisioned by the ideal client, then removed by the benchmark (pods
/// force-deleted, finalizers removed, Browsers deleted) outside the figures. Under mixed load
/// their sessions end as the operator run's do, and the ideal client cleans them up itself.
async fn ideal(
    ctx: &Ctx<'_>,
    backend: &Backend,
    runtime: &Handle,
    prefix: &str,
) -> Result<Ideal, BenchError> {
    let n = ctx.plan.reference;
    let names = names(prefix, 0..n);
    let mut client = IdealClient::start(
        backend,
        runtime,
        ideal::Scope {
            namespace: ctx.plan.namespace.clone(),
            prefix: prefix.to_string(),
            concurrency: ctx.plan.concurrency,
            browser: ctx.kinds.browser.clone(),
            pod: ctx.kinds.pod.clone(),
            fixture: ctx.fixture.clone(),
        },
    );
    client.synced().await?;
    end_sessions(ctx, &names);
    let server_start = ctx.server_cpu()?;
    let cpu_start = Cpu::now(OPERATOR_THREADS)?;
    let created = ctx.create_browsers(&names, ctx.plan.rate).await?;
    if ctx.plan.session_end.is_some() {
        ctx.wait_gone(prefix, n, || client.check()).await?;
    } else {
        ctx.wait_running(&names, || client.check(), !ctx.plan.smoke)
            .await?;
    }
    let client_cpu = Cpu::now(OPERATOR_THREADS)?.since(&cpu_start);
    let server_cpu = server_since(ctx.server_cpu()?, server_start);
    let flow = ctx.flow(&names, &created, Some(&client.log), server_cpu, client_cpu);
    let writes = report::writes_of(&client.log.counts());
    let duplicates = client.log.duplicates(ctx.plan.session_end.is_some());
    drop(client);

    // Under mixed load the ideal client removed its sessions itself (waited for above).
    if ctx.plan.session_end.is_none() {
        force_delete_pods(ctx, &names).await?;
        let browsers = ctx.browsers();
        let release = Patch::Merge(json!({"metadata": {"finalizers": null}}));
        fan_out(n, ctx.plan.concurrency, None, |i| {
            let browsers = browsers.clone();
            let name = names[i].clone();
            let release = &release;
            async move {
                tolerate(
                    browsers
                        .patch(&name, &PatchParams::default(), release)
                        .await,
                    404,
                    "remove finalizers",
                )
            }
        })
        .await?;
        ctx.delete_browsers(&names).await?;
        ctx.wait_gone(prefix, n, || Ok(())).await?;
    }
    Ok(Ideal {
        flow,
        writes,
        duplicates,
    })
}

/// Mixed load: the session of each of `names` ends (its seleniferous container exits) the
/// planned time after its pod runs.
fn end_sessions(ctx: &Ctx<'_>, names: &[String]) {
    if let Some(after) = ctx.plan.session_end {
        for name in names {
            ctx.kubelet.set(
                name,
                Script::ExitAfterRunning {
                    container: "seleniferous".into(),
                    exit_code: 0,
                    after,
                },
            );
        }
    }
}

/// The operator run: N Browsers created (at `--rate` or all at once), Running, then all
/// deleted.
async fn provision(ctx: &Ctx<'_>, op: &mut Operator) -> Result<(Run, Cost), BenchError> {
    let n = ctx.plan.browsers;
    let names = names("b-", 0..n);
    let server_start = ctx.server_cpu()?;
    let cpu_start = op.cpu()?;
    let audit_start = ctx.audit_mark()?;
    let quota = match ctx.plan.quota {
        Some(pods) => Some(Quota::start(ctx.client.clone(), &ctx.plan.namespace, pods).await?),
        None => None,
    };
    end_sessions(ctx, &names);
    let created = match &ctx.plan.owners {
        Some(owners) => arrive(ctx, owners, &names).await?,
        None => ctx.create_browsers(&names, ctx.plan.rate).await?,
    };
    if ctx.plan.session_end.is_some() {
        // Mixed load: every session ends by itself; the phase is over when the operator has
        // cleaned all of them up. What the watches saw on the way is the figure.
        ctx.wait_gone("b-", n, || op.check()).await?;
    } else {
        ctx.wait_running(&names, || op.check(), !ctx.plan.smoke)
            .await?;
    }
    let cpu_running = op.cpu()?;
    let server_running = ctx.server_cpu()?;
    let metrics_running = op.metrics().await?;
    let audit_running = ctx.audit_mark()?;
    let flow = ctx.flow(
        &names,
        &created,
        op.log(),
        server_since(server_running, server_start),
        cpu_running.since(&cpu_start),
    );
    let waits = ctx.plan.owners.map(|owners| {
        let groups: Vec<usize> = (0..n).map(|i| owners.group(i, n)).collect();
        let sent: Vec<Instant> = created.iter().map(|c| c.0).collect();
        let running: Vec<Option<Instant>> = ctx.observer.with(|s| {
            let at = |name: &String| s.browser_running.get(name).copied();
            names.iter().map(at).collect()
        });
        fair_share::waits(&owners, &groups, &sent, &running)
    });

    let delete_start = Instant::now();
    if ctx.plan.session_end.is_none() {
        ctx.delete_browsers(&names).await?;
    }
    ctx.wait_gone("b-", n, || op.check()).await?;
    if let Some(quota) = quota {
        quota.stop().await?;
    }
    let (browsers_gone, pods_gone) = ctx.observer.with(|s| (s.browser_gone, s.pod_gone));
    let cpu_end = op.cpu()?;
    let server_end = ctx.server_cpu()?;
    // Let the last reconciles and events finish before the counters are read.
    settle(op).await?;
    let metrics_end = op.metrics().await?;
    let audit_end = ctx.audit_mark()?;

    let mut run = Run {
        flow,
        rate: ctx.plan.rate,
        delete_browsers: browsers_gone.map(|t| t.saturating_duration_since(delete_start)),
        delete_pods: pods_gone.map(|t| t.saturating_duration_since(delete_start)),
        server_cpu_with_deletion: server_since(server_end, server_start),
        waits: waits.unwrap_or_default(),
        refused_pod_creates: None,
    };
    let ended = ctx.plan.session_end.is_some();
    let mut cost = Cost::from_metrics(op.flavour(), &metrics_running, &metrics_end);
    cost.requests = op.log().map(RequestLog::counts);
    cost.duplicates = op.log().map(|log| log.duplicates(ended));
    if let (Some(audit), Some(start), Some(running), Some(end)) =
        (&ctx.audit, audit_start, audit_running, audit_end)
    {
        let all = audit.writes(start, end)?;
        cost.writes_running.lifecycle = audit::counts(&audit.writes(start, running)?);
        cost.writes.lifecycle = audit::counts(&all);
        cost.duplicates = Some(audit::duplicates(&all, ended));
        run.refused_pod_creates = Some(audit::refused_pod_creates(&all));
    }
    cost.cpu_delete = cpu_end.since(&cpu_running);
    cost.memory = op.memory()?;
    cost.collected = ctx.collector.as_ref().map(Collector::collected);
    Ok((run, cost))
}

/// Fair share's arrivals: the first wave at once, the second a moment after it.
async fn arrive(
    ctx: &Ctx<'_>,
    owners: &Owners,
    names: &[String],
) -> Result<Vec<(Instant, Instant)>, BenchError> {
    let n = names.len();
    let labels: Vec<String> = (0..n).map(|i| owners.owner(owners.group(i, n))).collect();
    let first = owners.first_wave(n);
    let mut created = ctx
        .create_browsers_of(&names[..first], Some(&labels[..first]), None)
        .await?;
    tokio::time::sleep(fair_share::SECOND_WAVE).await;
    let second = ctx
        .create_browsers_of(&names[first..], Some(&labels[first..]), None)
        .await?;
    created.extend(second);
    Ok(created)
}

/// Waits until no reconcile runs and neither reconciles nor writes (Events are published
/// in the background, after their reconcile) changed for a moment.
async fn settle(op: &mut Operator) -> Result<(), BenchError> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let poll = op.poll_interval().max(Duration::from_millis(20));
    let flavour = op.flavour();
    let activity = |text: String| flavour.activity(&text);
    let mut last = activity(op.metrics().await?);
    let mut stable_since = Instant::now();
    loop {
        op.check()?;
        tokio::time::sleep(poll).await;
        let current = activity(op.metrics().await?);
        if current != last {
            last = current;
            stable_since = Instant::now();
        } else if current.in_flight == 0.0 && stable_since.elapsed() >= Duration::from_millis(200) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(BenchError::Timeout {
                what: "the operator to settle".into(),
                state: format!("counters {:?}, {} in flight", last.counters, last.in_flight),
            });
        }
    }
}

/// For each idle size: that many Running Browsers exist; the operator is stopped and started
/// again over them, and its start-up cost, writes, memory and idle CPU are read.
async fn idle(
    ctx: &Ctx<'_>,
    launch: &Launch,
    mut op: Operator,
) -> Result<(Vec<Idle>, Operator), BenchError> {
    let mut results = Vec::new();
    let mut existing = 0;
    // What the Go controller writes is copied from a Browser it provisioned itself.
    let mut model = None;
    for &size in &ctx.plan.idle {
        let all = names("idle-", 0..size);
        let mut provisioned = None;
        if ctx.plan.prefill {
            if ctx.plan.flavour == Flavour::Go && model.is_none() {
                let first = names("idle-", existing..existing + 1);
                ctx.create_browsers(&first, None).await?;
                ctx.wait_running(&first, || op.check(), false).await?;
                settle(&mut op).await?;
                model = Some(Copied::read(&ctx.browsers(), &ctx.pods(), &first[0]).await?);
                existing += 1;
            }
            op.stop().await?;
            let more = names("idle-", existing..size);
            match &model {
                Some(model) => ctx.prefill_copies(&more, model).await?,
                None => ctx.prefill(&more).await?,
            }
            ctx.wait_running(&all, || Ok(()), false).await?;
        } else {
            let more = names("idle-", existing..size);
            ctx.create_browsers(&more, None).await?;
            ctx.wait_running(&all, || op.check(), false).await?;
            settle(&mut op).await?;
            provisioned = op.memory()?;
            op.stop().await?;
        }
        existing = size;
        // Let the stopped operator's tasks wind down and free what they held.
        tokio::time::sleep(Duration::from_millis(300)).await;

        let heap_before = measure::heap();
        let rss_before = measure::memory()?;
        measure::reset_heap_peak();
        let peak_reset = measure::reset_peak_rss();
        let cpu_before = launch.cpu_before_start()?;
        let audit_start = ctx.audit_mark()?;
        let started = Instant::now();
        op = Operator::start(launch, &ctx.operator_flags()).await?;
        let deadline = started + ctx.phase_timeout(size);
        loop {
            op.check()?;
            let (done, in_flight) = op.reconciles().await?;
            if done >= size as f64 && in_flight == 0.0 {
                break;
            }
            if Instant::now() >= deadline {
                return Err(BenchError::Timeout {
                    what: "the restarted operator to reconcile every Browser".into(),
                    state: format!("{done} of {size} reconciled"),
                });
            }
            tokio::time::sleep(op.poll_interval()).await;
        }
        let sync = started.elapsed();
        let cpu_synced = op.cpu()?;
        let (reconciles_synced, _) = op.reconciles().await?;
        tokio::time::sleep(ctx.plan.idle_window).await;
        op.check()?;
        let cpu_end = op.cpu()?;
        let memory = match op.memory()? {
            Some(process) => IdleMemory::Process(process),
            None => {
                let heap_after = measure::heap();
                let rss_after = measure::memory()?;
                IdleMemory::InProcess {
                    heap_before: heap_before.live,
                    heap_after: heap_after.live,
                    heap_peak: heap_after.peak,
                    rss_before: rss_before.rss,
                    rss_after: rss_after.rss,
                    rss_peak: peak_reset.then_some(rss_after.peak),
                }
            }
        };
        let text = op.metrics().await?;
        let (reconciles_end, _) = op.reconciles().await?;
        let mut writes = op.flavour().writes(&text);
        if let (Some(audit), Some(start)) = (&ctx.audit, audit_start) {
            writes.lifecycle = audit::counts(&audit.writes(start, audit.mark()?)?);
        }
        results.push(Idle {
            browsers: size,
            sync,
            startup_cpu: cpu_synced.since(&cpu_before),
            writes,
            window: ctx.plan.idle_window,
            idle_reconciles: reconciles_end - reconciles_synced,
            idle_cpu: cpu_end.since(&cpu_synced),
            memory,
            provisioned,
        });
    }
    // A control plane the benchmark started goes with them: deleting tens of thousands of
    // Browsers would only make the run longer.
    if ctx.server.is_none() {
        let all = names("idle-", 0..existing);
        ctx.delete_browsers(&all).await?;
        ctx.wait_gone("idle-", existing, || op.check()).await?;
    }
    Ok((results, op))
}
