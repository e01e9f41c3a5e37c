//! Session benchmark on a real node: how long a hub waits from the Browser it creates to a
//! WebDriver session it can use, against a bare pod of the same shape created directly — the
//! operator's own share of a session's start.
//!
//! One process starts etcd and kube-apiserver (`KUBEBUILDER_ASSETS`) and a real node beside
//! them (`E2E_NODE_ASSETS`: kubelet, kube-scheduler, kube-controller-manager, with the
//! machine's containerd; see `crates/testkit/src/node.rs`), whose pods run the Chromium +
//! chromedriver image of the end-to-end suite (`crates/testkit/src/images.rs`). Two phases,
//! each `--sessions` sessions with `--concurrency` of them at a time; a slot takes its next
//! session once the pod of the last one is gone:
//!
//! 1. **Bare pods:** the pod the operator renders for the Chromium BrowserConfig, without its
//!    owner reference, applied (server-side) by the benchmark. Pod create sent → pod
//!    `Running` with an IP → chromedriver's `GET /status` ready and a `POST /session`
//!    answered with a session id.
//! 2. **Operator:** the operator runs in this process on a Tokio runtime of its own (as in
//!    the provisioning benchmark); Browsers are created, and measured the same way from the
//!    Browser create sent, with the address from `status.podIP` once the Browser is
//!    `Running`, as a hub reads it; also created → Browser `Running`, and its pod `Running` →
//!    Browser `Running`, what the operator itself adds before a hub can connect.
//!
//! Each session is closed (`DELETE /session/{id}`) and its pod or Browser deleted outside the
//! figures. One session of each kind goes first as a warm-up, outside the figures too.
//!
//! 3. **Capacity after a session ends** (`--handover-grace`): for each grace period, Browsers
//!    created at once against a ResourceQuota of `--handover-slots` pods, each session closed
//!    and its Browser deleted once it runs; how late each freed slot reaches the next Browser
//!    in line (`handover`).
//!
//! See docs/performance.md, "A real node".

use testkit as support;

#[path = "session/handover.rs"]
mod handover;

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use browser_controller::api::crd::Layout;
use browser_controller::api::keys;
use browser_controller::cli::{Cli, LogFormat};
use browser_controller::link::Link;
use browser_controller::metrics::Metrics;
use browser_controller::{logging, operator};
use clap::Parser;
use futures::{StreamExt, TryStreamExt};
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::ApiResource;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};
use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use support::controlplane::{self, Assets, ControlPlane};
use support::images::{self, CHROMIUM};
use support::kinds;
use support::node::{self as real_node, NODE_NAME, Node, NodeAssets};
use support::rendered::Rendered;
use support::stats::{Summary, summarize};
use support::webdriver;

#[derive(Debug, Parser)]
#[command(
    name = "session",
    about = "Browser created → WebDriver session usable on a real node, against a bare pod of the same shape"
)]
struct Args {
    /// Sessions in each phase (bare pods, then Browsers).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    sessions: u32,
    /// Sessions starting at once in each phase.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    concurrency: u32,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Namespace of the benchmark's objects.
    #[arg(long, default_value = "session")]
    namespace: String,
    /// Capacity after a session ends: one run per grace period in seconds, comma-separated
    /// (none by default).
    #[arg(long, value_delimiter = ',')]
    handover_grace: Vec<u32>,
    /// The ResourceQuota's pods in the --handover-grace runs.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    handover_slots: u32,
    /// Browsers created at once in each --handover-grace run.
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u32).range(1..))]
    handover_sessions: u32,
    /// Passed by `cargo bench` to every bench binary: without it (under `cargo test`) the
    /// benchmark only says how to run it.
    #[arg(long, hide = true)]
    bench: bool,
}

#[derive(Debug, thiserror::Error)]
enum BenchError {
    #[error("{action}: {source}")]
    Api {
        action: String,
        #[source]
        source: kube::Error,
    },
    #[error("timed out waiting for {what} ({state})")]
    Timeout { what: String, state: String },
    #[error("the operator stopped: {0}")]
    Operator(String),
    #[error("{0}")]
    Setup(String),
    #[error("WebDriver at {ip}: {detail}")]
    WebDriver { ip: IpAddr, detail: String },
    #[error("runtime or results file: {0}")]
    Io(#[from] std::io::Error),
    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("task: {0}")]
    Join(#[from] tokio::task::JoinError),
}

fn api_error(action: impl Into<String>) -> impl FnOnce(kube::Error) -> BenchError {
    let action = action.into();
    move |source| BenchError::Api { action, source }
}

/// Success, or the API error `code` that means the goal is already reached.
fn tolerate<T>(result: Result<T, kube::Error>, code: u16, action: &str) -> Result<(), BenchError> {
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == code => Ok(()),
        Err(e) => Err(api_error(action)(e)),
    }
}

/// How long one session may take to become usable, and its pod to go.
const SESSION_LIMIT: Duration = Duration::from_secs(180);
/// How often chromedriver's `/status` is asked while it starts.
const STATUS_POLL: Duration = Duration::from_millis(50);
/// Name of the operator runtime's threads.
const OPERATOR_THREADS: &str = "operator";
const CONFIG_NAME: &str = "chromium";

fn main() -> ExitCode {
    let args = Args::parse();
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = logging::init(LogFormat::Text, "info");
    }
    match run(&args) {
        Ok(None) => ExitCode::SUCCESS,
        Ok(Some(why)) => {
            println!("session: skipped ({why})");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("session: {e}");
            ExitCode::FAILURE
        }
    }
}

/// What the run needs from the machine, or why it cannot run here.
fn prerequisites(args: &Args) -> Result<Result<(Assets, NodeAssets), String>, BenchError> {
    if !args.bench {
        return Ok(Err(
            "a benchmark of a real node: `cargo bench --bench session`; `cargo test` only builds it"
                .into(),
        ));
    }
    let Some(assets) = Assets::from_env().map_err(|e| BenchError::Setup(e.to_string()))? else {
        return Ok(Err(
            "KUBEBUILDER_ASSETS not set: it needs kube-apiserver and etcd".into(),
        ));
    };
    let Some(node) = NodeAssets::from_env().map_err(|e| BenchError::Setup(e.to_string()))? else {
        return Ok(Err(format!(
            "{} not set: it needs kubelet, kube-scheduler and kube-controller-manager",
            real_node::NODE_ASSETS
        )));
    };
    if let Some(missing) = real_node::missing_prerequisites() {
        return Ok(Err(format!("no real node on this machine: {missing}")));
    }
    Ok(Ok((assets, node)))
}

fn run(args: &Args) -> Result<Option<String>, BenchError> {
    let (assets, node_assets) = match prerequisites(args)? {
        Ok(found) => found,
        Err(why) => return Ok(Some(why)),
    };
    let threads = std::thread::available_parallelism().map_or(2, usize::from);
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
    support::host::remove_stale_dirs();
    println!(
        "building or reusing the node's images in {}",
        images::cache_dir().display()
    );
    let image_set =
        images::build(&images::cache_dir()).map_err(|e| BenchError::Setup(e.to_string()))?;
    // Spawned from this thread (block_on runs here), which outlives every process.
    println!("starting kube-apiserver and etcd from KUBEBUILDER_ASSETS");
    let plane = bench_rt.block_on(start_control_plane(&assets))?;
    println!("starting the node (containerd, kubelet, kube-scheduler, kube-controller-manager)");
    let report = match bench_rt.block_on(Node::start(&node_assets, &plane, &image_set)) {
        Ok(node) => {
            let report = bench_rt.block_on(bench(args, &plane, operator_rt.handle().clone()));
            if report.is_err() {
                eprintln!("{}\n{}", plane.logs(20), node.logs(20));
            }
            bench_rt.block_on(node.stop());
            report
        }
        Err(e) => Err(BenchError::Setup(format!("node: {e}"))),
    };
    operator_rt.shutdown_timeout(Duration::from_secs(1));
    bench_rt.shutdown_timeout(Duration::from_secs(1));
    plane.stop();
    let report = report?;
    print!("{}", report.table());
    if let Some(path) = &args.json {
        std::fs::write(
            path,
            serde_json::to_string_pretty(&report.to_json())? + "\n",
        )?;
        println!("results written to {}", path.display());
    }
    Ok(None)
}

/// Starts etcd and kube-apiserver from `assets` (no audit log: it costs the server CPU) and
/// installs `crds/`.
async fn start_control_plane(assets: &Assets) -> Result<ControlPlane, BenchError> {
    let plane = ControlPlane::start(assets)
        .await
        .map_err(|e| BenchError::Setup(format!("control plane: {e}")))?;
    let client = plane
        .client()
        .await
        .map_err(|e| BenchError::Setup(format!("control plane client: {e}")))?;
    let crds = Path::new(env!("CARGO_MANIFEST_DIR")).join("crds");
    controlplane::apply_dir(&client, &crds)
        .await
        .map_err(|e| BenchError::Setup(format!("installing crds/: {e}")))?;
    Ok(plane)
}

/// The Chromium entry of the end-to-end suite's real-node scenario, with a sidecar that
/// stops at once on SIGTERM and a short grace period: the pods of one slot go before its next
/// session, outside the figures.
/// With an entry for each grace period of `graces` ([`handover::entry`]).
fn config_spec(graces: &[u32]) -> Value {
    let mut spec = json!({
        "template": {"terminationGracePeriodSeconds": 2},
        "browsers": {"chrome": {"139.0": webdriver::chromium(
            "trap 'exit 0' TERM; while true; do sleep 1 & wait; done"
        )}},
    });
    for &grace in graces {
        spec["browsers"]["chrome"][handover::version(grace)] = handover::entry(grace);
    }
    spec
}

/// The objects of the run: the BrowserConfig, a Browser as a hub creates it, and the pod the
/// operator renders for it.
type Fixture = Rendered;

fn fixture(
    ns: &str,
    browser_resource: &ApiResource,
    config_resource: &ApiResource,
    graces: &[u32],
) -> Result<Fixture, BenchError> {
    let config = json!({
        "apiVersion": config_resource.api_version,
        "kind": config_resource.kind,
        "metadata": {"name": CONFIG_NAME, "namespace": ns},
        "spec": config_spec(graces),
    });
    let browser = json!({
        "apiVersion": browser_resource.api_version,
        "kind": browser_resource.kind,
        "metadata": {"name": "template", "namespace": ns, "labels": {keys::LABEL_OWNER: "bench"}},
        "spec": {"browserName": "chrome", "browserVersion": "139.0"},
    });
    Rendered::new(config, browser, browser_resource)
        .map_err(|e| BenchError::Setup(format!("the Chromium Browser does not render: {e}")))
}

/// The first moment the benchmark's watches saw each object `Running` with an IP, and each
/// pod at all.
#[derive(Default)]
struct Seen {
    browsers: HashMap<String, (Instant, IpAddr)>,
    pods: HashMap<String, (Instant, IpAddr)>,
    created: HashMap<String, Instant>,
}

#[derive(Clone, Copy)]
enum Watched {
    Browsers,
    Pods,
}

/// Records in `seen` the moment each object of `api` is first seen `Running` with an IP.
async fn watch(
    api: Api<DynamicObject>,
    what: Watched,
    seen: Arc<Mutex<Seen>>,
    synced: oneshot::Sender<()>,
) {
    let mut synced = Some(synced);
    let mut events = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    while let Some(event) = events.next().await {
        let Ok(event) = event else { continue };
        let at = Instant::now();
        let object = match event {
            watcher::Event::Apply(object) | watcher::Event::InitApply(object) => object,
            watcher::Event::InitDone => {
                if let Some(tx) = synced.take() {
                    let _ = tx.send(());
                }
                continue;
            }
            watcher::Event::Init | watcher::Event::Delete(_) => continue,
        };
        if let (Watched::Pods, Some(name)) = (what, &object.metadata.name) {
            let mut seen = seen.lock().unwrap_or_else(PoisonError::into_inner);
            seen.created.entry(name.clone()).or_insert(at);
        }
        let status = &object.data["status"];
        let ip = status["podIP"]
            .as_str()
            .and_then(|ip| ip.parse::<IpAddr>().ok());
        if let (Some(name), Some(ip), true) =
            (object.metadata.name, ip, status["phase"] == "Running")
        {
            let mut seen = seen.lock().unwrap_or_else(PoisonError::into_inner);
            let map = match what {
                Watched::Browsers => &mut seen.browsers,
                Watched::Pods => &mut seen.pods,
            };
            map.entry(name).or_insert((at, ip));
        }
    }
}

/// One session's moments, from its create sent.
#[derive(Clone, Copy, Debug)]
struct Sample {
    /// Pod (bare) or Browser (operator) seen `Running` with an IP.
    running: Duration,
    /// A WebDriver session answered.
    usable: Duration,
    /// Operator: its pod seen `Running` with an IP, before the Browser says so.
    pod_running: Option<Duration>,
}

/// Where a session is started.
#[derive(Clone, Copy, PartialEq)]
enum Phase {
    Bare,
    Operator,
}

struct Bench {
    browsers: Api<DynamicObject>,
    pods: Api<DynamicObject>,
    configs: Api<DynamicObject>,
    quotas: Api<DynamicObject>,
    fixture: Fixture,
    seen: Arc<Mutex<Seen>>,
    sessions: usize,
    concurrency: usize,
}

impl Bench {
    /// One session: created, `Running`, chromedriver ready, a session opened and closed, the
    /// object deleted and its pod gone.
    async fn session(&self, phase: Phase, name: &str) -> Result<Sample, BenchError> {
        let sent = Instant::now();
        match phase {
            Phase::Bare => {
                self.pods
                    .patch(
                        name,
                        &PatchParams::apply("bench").force(),
                        &Patch::Apply(self.fixture.bare_pod(name)),
                    )
                    .await
                    .map_err(api_error("apply pod"))?;
            }
            Phase::Operator => {
                self.browsers
                    .create(&PostParams::default(), &self.fixture.browser(name)?)
                    .await
                    .map_err(api_error("create Browser"))?;
            }
        }
        let deadline = sent + SESSION_LIMIT;
        let (running, ip) = self.until_running(phase, name, deadline).await?;
        let usable = open_and_close_session(ip, deadline).await?;
        let sample = Sample {
            running: running.saturating_duration_since(sent),
            usable: usable.saturating_duration_since(sent),
            pod_running: (phase == Phase::Operator)
                .then(|| self.seen_running(Phase::Bare, name))
                .flatten()
                .map(|(at, _)| at.saturating_duration_since(sent)),
        };
        match phase {
            Phase::Bare => tolerate(
                self.pods.delete(name, &DeleteParams::default()).await,
                404,
                "delete pod",
            )?,
            Phase::Operator => tolerate(
                self.browsers.delete(name, &DeleteParams::default()).await,
                404,
                "delete Browser",
            )?,
        }
        self.gone(name).await?;
        Ok(sample)
    }

    /// Waits until the Browser `name` and its pod are gone.
    async fn gone(&self, name: &str) -> Result<(), BenchError> {
        let gone_by = Instant::now() + SESSION_LIMIT;
        loop {
            let browser = self
                .browsers
                .get_opt(name)
                .await
                .map_err(api_error("read Browser"))?;
            let pod = self
                .pods
                .get_opt(name)
                .await
                .map_err(api_error("read pod"))?;
            if browser.is_none() && pod.is_none() {
                return Ok(());
            }
            if Instant::now() >= gone_by {
                return Err(BenchError::Timeout {
                    what: format!("{name} to go"),
                    state: self.state(name).await,
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// When the benchmark's watches first saw `name` `Running`, and its IP. The lock is held
    /// only here: the watches take it on the runtime's threads.
    fn seen_running(&self, phase: Phase, name: &str) -> Option<(Instant, IpAddr)> {
        let seen = self.seen();
        match phase {
            Phase::Bare => seen.pods.get(name).copied(),
            Phase::Operator => seen.browsers.get(name).copied(),
        }
    }

    /// When the watches first saw `name` `Running`, and its IP, waiting for it until
    /// `deadline`.
    async fn until_running(
        &self,
        phase: Phase,
        name: &str,
        deadline: Instant,
    ) -> Result<(Instant, IpAddr), BenchError> {
        loop {
            if let Some(found) = self.seen_running(phase, name) {
                return Ok(found);
            }
            if Instant::now() >= deadline {
                return Err(BenchError::Timeout {
                    what: format!("{name} Running with an IP"),
                    state: self.state(name).await,
                });
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// What the watches saw; held briefly (the watches take it on the runtime's threads).
    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The Browser's and the pod's status, for an error.
    async fn state(&self, name: &str) -> String {
        let status =
            |o: Option<DynamicObject>| o.map_or(json!("absent"), |o| o.data["status"].clone());
        format!(
            "Browser: {}; pod: {}",
            status(self.browsers.get_opt(name).await.ok().flatten()),
            status(self.pods.get_opt(name).await.ok().flatten()),
        )
    }

    /// `--sessions` sessions named `<prefix>NN`, `--concurrency` at a time.
    async fn phase(&self, phase: Phase, prefix: &str) -> Result<Vec<Sample>, BenchError> {
        futures::stream::iter(0..self.sessions)
            .map(|i| async move {
                let name = format!("{prefix}{i:02}");
                let sample = self.session(phase, &name).await?;
                println!(
                    "  {name}: Running {:.2}s, session usable {:.2}s",
                    sample.running.as_secs_f64(),
                    sample.usable.as_secs_f64()
                );
                Ok::<_, BenchError>(sample)
            })
            .buffer_unordered(self.concurrency)
            .try_collect()
            .await
    }

    /// Creates the BrowserConfig and waits until the operator reports it Ready.
    async fn config_ready(&self, op: &mut InProcess) -> Result<(), BenchError> {
        let config: DynamicObject = serde_json::from_value(self.fixture.config.clone())?;
        tolerate(
            self.configs.create(&PostParams::default(), &config).await,
            409,
            "create BrowserConfig",
        )?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            op.check()?;
            let current = self
                .configs
                .get(CONFIG_NAME)
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
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A WebDriver command to chromedriver at `ip`, on the blocking pool; its answer's `value`.
async fn webdriver(
    ip: IpAddr,
    method: &'static str,
    path: String,
    body: Option<Value>,
    limit: Duration,
) -> Result<Value, String> {
    tokio::task::spawn_blocking(move || webdriver::command(ip, method, &path, body.as_ref(), limit))
        .await
        .map_err(|e| e.to_string())?
}

/// Waits for chromedriver at `ip` to say it is ready, opens a session with headless Chromium
/// (as the end-to-end scenario does) and closes it; returns when the session was answered.
async fn open_and_close_session(ip: IpAddr, deadline: Instant) -> Result<Instant, BenchError> {
    let failed = |detail: String| BenchError::WebDriver { ip, detail };
    loop {
        let status = webdriver(ip, "GET", "/status".into(), None, Duration::from_secs(5)).await;
        match status {
            Ok(value) if value["ready"] == true => break,
            other if Instant::now() >= deadline => {
                return Err(failed(format!("not ready: {other:?}")));
            }
            _ => tokio::time::sleep(STATUS_POLL).await,
        }
    }
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_secs(1));
    let session = webdriver(
        ip,
        "POST",
        "/session".into(),
        Some(webdriver::headless_chrome()),
        left,
    )
    .await
    .map_err(failed)?;
    let usable = Instant::now();
    let id = session["sessionId"]
        .as_str()
        .ok_or_else(|| failed(format!("no session id in {session}")))?;
    webdriver(
        ip,
        "DELETE",
        format!("/session/{id}"),
        None,
        Duration::from_secs(60),
    )
    .await
    .map_err(failed)?;
    Ok(usable)
}

/// The operator on its own runtime, with the admin's credentials, watching `--namespace`.
struct InProcess {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), String>>,
}

impl InProcess {
    fn start(kubeconfig: &Path, runtime: &Handle, ns: &str) -> Result<Self, BenchError> {
        let args = Cli::try_parse_from([
            "browser-controller",
            "--metrics-addr=0",
            "--health-probe-bind-address=0",
            &format!("--namespace={ns}"),
        ])
        .map_err(|e| BenchError::Setup(format!("operator flags: {e}")))?
        .run;
        let kubeconfig = Kubeconfig::read_from(kubeconfig)
            .map_err(|e| BenchError::Setup(format!("kubeconfig: {e}")))?;
        let (stop, stopped) = oneshot::channel::<()>();
        let task = runtime.spawn(async move {
            let mut config =
                kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                    .await
                    .map_err(|e| e.to_string())?;
            // As `Link::client` builds the operator's client.
            config.default_retry = false;
            // Built here so that the client's own task runs on the operator's runtime.
            let client = Client::try_from(config).map_err(|e| e.to_string())?;
            let stop = async move {
                let _ = stopped.await;
            };
            operator::run_with_client(client, Link::new(), args, Arc::new(Metrics::new()), stop)
                .await
                .map_err(|e| e.to_string())
        });
        Ok(InProcess {
            stop: Some(stop),
            task,
        })
    }

    fn check(&mut self) -> Result<(), BenchError> {
        if !self.task.is_finished() {
            return Ok(());
        }
        Err(BenchError::Operator(
            "it returned before it was stopped".into(),
        ))
    }

    async fn stop(mut self) -> Result<(), BenchError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match tokio::time::timeout(Duration::from_secs(60), &mut self.task).await {
            Ok(result) => result?.map_err(BenchError::Operator),
            Err(_) => Err(BenchError::Timeout {
                what: "the operator to stop".into(),
                state: "still running after 60s".into(),
            }),
        }
    }
}

async fn bench(
    args: &Args,
    plane: &ControlPlane,
    operator_rt: Handle,
) -> Result<Report, BenchError> {
    let client = plane
        .client()
        .await
        .map_err(|e| BenchError::Setup(e.to_string()))?;
    let ns = args.namespace.as_str();
    let namespaces: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&()),
    );
    let namespace: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns},
    }))?;
    tolerate(
        namespaces.create(&PostParams::default(), &namespace).await,
        409,
        "create namespace",
    )?;
    let (browser_ar, config_ar, pod_ar) = (
        kinds::browser_resource(Layout::Default),
        kinds::config_resource(Layout::Default),
        kinds::pod_resource(),
    );
    let bench = Bench {
        browsers: Api::namespaced_with(client.clone(), ns, &browser_ar),
        pods: Api::namespaced_with(client.clone(), ns, &pod_ar),
        configs: Api::namespaced_with(client.clone(), ns, &config_ar),
        quotas: Api::namespaced_with(
            client.clone(),
            ns,
            &ApiResource::erase::<k8s_openapi::api::core::v1::ResourceQuota>(&()),
        ),
        fixture: fixture(ns, &browser_ar, &config_ar, &args.handover_grace)?,
        seen: Arc::new(Mutex::new(Seen::default())),
        sessions: args.sessions as usize,
        concurrency: args.concurrency as usize,
    };
    let (browsers_synced, browsers_ready) = oneshot::channel();
    let (pods_synced, pods_ready) = oneshot::channel();
    let watches = [
        tokio::spawn(watch(
            bench.browsers.clone(),
            Watched::Browsers,
            bench.seen.clone(),
            browsers_synced,
        )),
        tokio::spawn(watch(
            bench.pods.clone(),
            Watched::Pods,
            bench.seen.clone(),
            pods_synced,
        )),
    ];
    let synced = tokio::time::timeout(Duration::from_secs(30), async {
        let _ = futures::join!(browsers_ready, pods_ready);
    })
    .await;
    let result = async {
        synced.map_err(|_| {
            BenchError::Setup("the benchmark's watches did not list within 30s".into())
        })?;
        let setup = Setup::read(&client, args).await?;
        println!("{}", setup.describe());

        println!(
            "bare pods: a warm-up session, then {} sessions, {} at a time",
            bench.sessions, bench.concurrency
        );
        bench.session(Phase::Bare, "warm-bare").await?;
        let bare = bench.phase(Phase::Bare, "bare-").await?;

        let mut op = InProcess::start(&plane.admin_kubeconfig(), &operator_rt, ns)?;
        let operator = async {
            bench.config_ready(&mut op).await?;
            println!(
                "operator: a warm-up session, then {} sessions, {} at a time",
                bench.sessions, bench.concurrency
            );
            bench.session(Phase::Operator, "warm-op").await?;
            let samples = bench.phase(Phase::Operator, "browser-").await?;
            let mut handovers = Vec::new();
            for &grace in &args.handover_grace {
                println!(
                    "capacity after a session ends: {} Browsers against a quota of {} pods, grace period {grace} s",
                    args.handover_sessions, args.handover_slots
                );
                let slots = args.handover_slots as usize;
                let run = bench.handover(grace, slots, args.handover_sessions as usize);
                handovers.push(run.await?);
                op.check()?;
            }
            op.check()?;
            Ok::<_, BenchError>((samples, handovers))
        }
        .await;
        let stopped = op.stop().await;
        let (operator, handovers) = operator?;
        stopped?;
        Ok(Report {
            setup,
            bare,
            operator,
            handovers,
        })
    }
    .await;
    for watch in watches {
        watch.abort();
    }
    result
}

/// What the figures were measured on.
struct Setup {
    sessions: usize,
    concurrency: usize,
    apiserver: String,
    kubelet: String,
    runtime: String,
    kernel: String,
    cores: usize,
}

impl Setup {
    async fn read(client: &Client, args: &Args) -> Result<Self, BenchError> {
        let version = client
            .apiserver_version()
            .await
            .map_err(api_error("read the API server's version"))?;
        let nodes: Api<DynamicObject> = Api::all_with(
            client.clone(),
            &ApiResource::erase::<k8s_openapi::api::core::v1::Node>(&()),
        );
        let node = nodes
            .get(NODE_NAME)
            .await
            .map_err(api_error("read the node"))?;
        let info = &node.data["status"]["nodeInfo"];
        let text = |v: &Value| v.as_str().unwrap_or("?").to_string();
        Ok(Setup {
            sessions: args.sessions as usize,
            concurrency: args.concurrency as usize,
            apiserver: version.git_version,
            kubelet: text(&info["kubeletVersion"]),
            runtime: text(&info["containerRuntimeVersion"]),
            kernel: text(&info["kernelVersion"]),
            cores: std::thread::available_parallelism().map_or(0, usize::from),
        })
    }

    fn describe(&self) -> String {
        format!(
            "kube-apiserver {}, kubelet {}, {}, kernel {}, {} cores; image {CHROMIUM}",
            self.apiserver, self.kubelet, self.runtime, self.kernel, self.cores
        )
    }
}

struct Report {
    setup: Setup,
    bare: Vec<Sample>,
    operator: Vec<Sample>,
    handovers: Vec<handover::Handover>,
}

/// The summaries of one phase.
struct Figures {
    running: Option<Summary>,
    usable: Option<Summary>,
    running_to_usable: Option<Summary>,
    /// Operator: pod `Running` → Browser `Running`.
    propagation: Option<Summary>,
}

impl Figures {
    fn of(samples: &[Sample]) -> Self {
        Figures {
            running: summarize(samples.iter().map(|s| s.running).collect()),
            usable: summarize(samples.iter().map(|s| s.usable).collect()),
            running_to_usable: summarize(
                samples
                    .iter()
                    .map(|s| s.usable.saturating_sub(s.running))
                    .collect(),
            ),
            propagation: summarize(
                samples
                    .iter()
                    .filter_map(|s| Some(s.running.saturating_sub(s.pod_running?)))
                    .collect(),
            ),
        }
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn summary_json(s: Option<Summary>) -> Value {
    s.map_or(Value::Null, |s| {
        json!({
            "count": s.count,
            "p50_ms": s.p50.as_secs_f64() * 1e3,
            "p90_ms": s.p90.as_secs_f64() * 1e3,
            "p99_ms": s.p99.as_secs_f64() * 1e3,
            "max_ms": s.max.as_secs_f64() * 1e3,
        })
    })
}

/// The operator's share at one percentile: operator − bare (seconds, may be negative) and
/// operator / bare.
fn share(bare: Duration, operator: Duration) -> (f64, f64) {
    let ratio = if bare.is_zero() {
        f64::NAN
    } else {
        secs(operator) / secs(bare)
    };
    (secs(operator) - secs(bare), ratio)
}

impl Report {
    fn shares(&self) -> Option<[(f64, f64); 2]> {
        let (bare, op) = (
            Figures::of(&self.bare).usable?,
            Figures::of(&self.operator).usable?,
        );
        Some([share(bare.p50, op.p50), share(bare.p99, op.p99)])
    }

    fn table(&self) -> String {
        let (bare, op) = (Figures::of(&self.bare), Figures::of(&self.operator));
        let row = |label: &str, s: Option<Summary>| match s {
            Some(s) => format!(
                "| {label} | {:.2} s | {:.2} s | {:.2} s | {:.2} s |\n",
                secs(s.p50),
                secs(s.p90),
                secs(s.p99),
                secs(s.max)
            ),
            None => format!("| {label} | – | – | – | – |\n"),
        };
        let mut out = format!(
            "\nsession benchmark: {} sessions per phase, {} at a time\n{}\n\n",
            self.setup.sessions,
            self.setup.concurrency,
            self.setup.describe()
        );
        out += "| figure | p50 | p90 | p99 | max |\n|---|---|---|---|---|\n";
        out += &row("bare pod: create sent → pod Running", bare.running);
        out += &row(
            "bare pod: create sent → WebDriver session usable",
            bare.usable,
        );
        out += &row("bare pod: Running → session usable", bare.running_to_usable);
        out += &row(
            "operator: Browser create sent → Browser Running",
            op.running,
        );
        out += &row("operator: pod Running → Browser Running", op.propagation);
        out += &row(
            "operator: Browser create sent → WebDriver session usable",
            op.usable,
        );
        out += &row(
            "operator: Browser Running → session usable",
            op.running_to_usable,
        );
        if let Some([p50, p99]) = self.shares() {
            out += &format!(
                "\noperator's share of a session's start (operator − bare pod, created → usable): p50 {:+.2} s ({:.2} ×), p99 {:+.2} s ({:.2} ×)\n",
                p50.0, p50.1, p99.0, p99.1
            );
        }
        if !self.handovers.is_empty() {
            out += "\ncapacity after a session ends (session's Browser deleted → the next in line's pod seen)\n\n";
            out += "| grace period | quota | Browsers | p50 | max | all sessions done |\n|---|---|---|---|---|---|\n";
            for h in &self.handovers {
                let (p50, max) = h.handover.map_or(("–".into(), "–".into()), |s| {
                    (
                        format!("{:.1} s", secs(s.p50)),
                        format!("{:.1} s", secs(s.max)),
                    )
                });
                out += &format!(
                    "| {} s | {} pods | {} | {p50} | {max} | {:.1} s |\n",
                    h.grace,
                    h.slots,
                    h.sessions,
                    secs(h.total)
                );
            }
        }
        out
    }

    fn to_json(&self) -> Value {
        let (bare, op) = (Figures::of(&self.bare), Figures::of(&self.operator));
        let phase = |f: &Figures| {
            json!({
                "to_running": summary_json(f.running),
                "to_session_usable": summary_json(f.usable),
                "running_to_session_usable": summary_json(f.running_to_usable),
                "pod_running_to_browser_running": summary_json(f.propagation),
            })
        };
        let share = self.shares().map_or(Value::Null, |[p50, p99]| {
            json!({
                "p50_ms": p50.0 * 1e3,
                "p50_ratio": p50.1,
                "p99_ms": p99.0 * 1e3,
                "p99_ratio": p99.1,
            })
        });
        json!({
            "setup": {
                "sessions": self.setup.sessions,
                "concurrency": self.setup.concurrency,
                "kube_apiserver": self.setup.apiserver,
                "kubelet": self.setup.kubelet,
                "container_runtime": self.setup.runtime,
                "kernel": self.setup.kernel,
                "cores": self.setup.cores,
                "image": CHROMIUM,
            },
            "bare_pod": phase(&bare),
            "operator": phase(&op),
            "operator_share": share,
            "capacity_after_a_session_ends": self.handovers.iter().map(|h| json!({
                "grace_period_seconds": h.grace,
                "quota_pods": h.slots,
                "browsers": h.sessions,
                "ended_to_next_pod": summary_json(h.handover),
                "all_sessions_done_ms": h.total.as_secs_f64() * 1e3,
            })).collect::<Vec<_>>(),
        })
    }
}
