//! Leader election and graceful shutdown (docs/operations.md, "Leader election and shutdown")
//! with several operator replicas in process, each with its own client of one API server
//! double: only the Lease holder reconciles, never two at once; a released Lease is taken over
//! at once, an abandoned one after it expires; a lost Lease stops reconciling at once, and a
//! leader frozen past its renew deadline frees the Lease as it exits; a stop finishes in-flight
//! reconciles within `--shutdown-timeout`.

use testkit as support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tower::ServiceExt;

use browser_controller::api::crd::{self, Layout};
use browser_controller::cli::Cli;
use browser_controller::link::Link;
use browser_controller::metrics::Metrics;
use browser_controller::operator::{self, RunError};
use support::apiserver::{ApiServer, Fault, ServeHandle};
use support::fixtures::{browser, config};
use support::host::{TempDir, free_port, http_get, kill, wait_exit};
use support::kinds::{browser_resource, config_resource};
use support::kubelet::{Kubelet, KubeletHandle, Script};

const NS: &str = "sessions";
const LEASE_NS: &str = "browser-controller";
const LEASE: &str = "controller.selenosis.io";
const WAIT: Duration = Duration::from_secs(20);
/// Short timings keep the suite fast: the leader renews every second and gives up after two.
const LEASE_DURATION: Duration = Duration::from_secs(3);
const ELECTION: [&str; 5] = [
    "--enable-leader-election",
    "--leader-election-namespace=browser-controller",
    "--leader-election-lease-duration=3s",
    "--leader-election-renew-deadline=2s",
    "--leader-election-retry-period=250ms",
];

/// One API server double with the CRDs, a kubelet that ends each session shortly after it
/// runs, and a BrowserConfig for chrome.
struct Cluster {
    server: ApiServer,
    client: Client,
    _kubelet: KubeletHandle,
}

impl Cluster {
    async fn new() -> Self {
        let server = ApiServer::new();
        for crd in crd::crds(Layout::Default) {
            server.install_crd(&crd).expect("CRD installs");
        }
        let client = server.client();
        let kubelet = Kubelet::start(
            client.clone(),
            "node-1",
            Script::ExitAfterRunning {
                container: "seleniferous".into(),
                exit_code: 0,
                after: Duration::from_millis(200),
            },
        );
        let cluster = Self {
            server,
            client,
            _kubelet: kubelet,
        };
        cluster.create_config().await;
        cluster
    }

    async fn create_config(&self) {
        let ar = config_resource(Layout::Default);
        let obj = config("chrome").namespace(NS).spec(json!({
            "template": {"sidecars": [{"name": "seleniferous", "image": "alcounit/seleniferous:v2"}]},
            "browsers": {"chrome": {"139.0": {"image": "selenium/standalone-chrome:139.0"}}}
        }))
        .object();
        Api::<DynamicObject>::namespaced_with(self.client.clone(), NS, &ar)
            .create(&PostParams::default(), &obj)
            .await
            .expect("config created");
    }

    async fn create_browser(&self, name: &str) {
        create_browser(&self.client, name).await;
    }

    /// Creates Browsers `{prefix}-0`, `{prefix}-1`, … every 20 ms until the task is aborted,
    /// so that there is always work to reconcile.
    fn keep_creating(&self, prefix: &'static str) -> JoinHandle<()> {
        let client = self.client.clone();
        tokio::spawn(async move {
            for i in 0.. {
                create_browser(&client, &format!("{prefix}-{i}")).await;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    }

    fn browser(&self, name: &str) -> Option<Value> {
        self.server.get("browsers", NS, name)
    }

    fn holder(&self) -> Option<String> {
        self.server.get("leases", LEASE_NS, LEASE)?["spec"]["holderIdentity"]
            .as_str()
            .map(String::from)
    }

    async fn until(&self, what: &str, check: impl Fn(&Cluster) -> bool) {
        let deadline = Instant::now() + WAIT;
        while !check(self) {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Waits until `name` has published its pod IP.
    async fn until_running(&self, name: &str) {
        self.until(&format!("{name} to run"), |c| {
            c.browser(name)
                .is_some_and(|b| b["status"]["podIP"].is_string())
        })
        .await;
    }
}

async fn create_browser(client: &Client, name: &str) {
    let obj = browser(name).namespace(NS).object();
    Api::<DynamicObject>::namespaced_with(client.clone(), NS, &browser_resource(Layout::Default))
        .create(&PostParams::default(), &obj)
        .await
        .expect("browser created");
}

/// One operator replica, run in process with its own client and metrics.
struct Replica {
    metrics: Arc<Metrics>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), RunError>>,
}

impl Replica {
    fn start(cluster: &Cluster, flags: &[&str]) -> Self {
        Self::start_with(cluster.server.client(), flags)
    }

    fn start_with(client: Client, flags: &[&str]) -> Self {
        let mut argv = vec!["browser-controller"];
        for default in ["--metrics-addr=0", "--health-probe-bind-address=0"] {
            let name = default.split('=').next().unwrap_or(default);
            if !flags.iter().any(|f| f.starts_with(name)) {
                argv.push(default);
            }
        }
        argv.extend_from_slice(flags);
        let args = Cli::try_parse_from(argv).expect("flags parse").run;
        let metrics = Arc::new(Metrics::new());
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(operator::run_with_client(
            client,
            Link::new(),
            args,
            metrics.clone(),
            async move {
                let _ = rx.await;
            },
        ));
        Self {
            metrics,
            stop: Some(tx),
            task,
        }
    }

    /// Reconciles this replica ran so far.
    fn reconciles(&self) -> u64 {
        counter(&self.metrics, "browser_controller_reconciles_total")
    }

    /// API writes this replica issued so far.
    fn writes(&self) -> u64 {
        counter(&self.metrics, "browser_controller_api_writes_total")
    }

    /// Stops the replica as SIGTERM does; returns how `run_with_client` ended.
    async fn stop(mut self) -> Result<(), RunError> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        tokio::time::timeout(WAIT, self.task)
            .await
            .expect("the replica stops in time")
            .expect("the replica task does not panic")
    }
}

/// The sum of a metric family's samples.
fn counter(metrics: &Metrics, family: &str) -> u64 {
    metrics
        .encode()
        .unwrap()
        .lines()
        .filter(|l| l.starts_with(family))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// Records both replicas' reconcile counts every few milliseconds.
struct Sampler {
    replicas: (Arc<Metrics>, Arc<Metrics>),
    samples: Arc<Mutex<Vec<(u64, u64)>>>,
    task: JoinHandle<()>,
}

fn sample(a: &Metrics, b: &Metrics) -> (u64, u64) {
    (
        counter(a, "browser_controller_reconciles_total"),
        counter(b, "browser_controller_reconciles_total"),
    )
}

impl Sampler {
    fn start(a: Arc<Metrics>, b: Arc<Metrics>) -> Self {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let (out, a2, b2) = (samples.clone(), a.clone(), b.clone());
        let task = tokio::spawn(async move {
            loop {
                out.lock().unwrap().push(sample(&a2, &b2));
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        });
        Self {
            replicas: (a, b),
            samples,
            task,
        }
    }

    /// Asserts that `a` reconciled first, `b` after it, and `a` never again once `b` had
    /// started: the two never reconciled at the same time.
    fn assert_one_after_the_other(self) {
        self.task.abort();
        let mut samples = self.samples.lock().unwrap().clone();
        samples.push(sample(&self.replicas.0, &self.replicas.1));
        let first_b = samples
            .iter()
            .position(|&(_, b)| b > 0)
            .expect("the second replica reconciled");
        let a_then = samples[first_b].0;
        assert!(a_then > 0, "the first replica reconciled before");
        assert!(
            samples[first_b..].iter().all(|&(a, _)| a == a_then),
            "the first replica still reconciled after the second had started"
        );
    }
}

/// A client of `server` whose requests matching `stall` never get an answer, as with an API
/// server that hangs.
fn stalling_client(
    server: &ApiServer,
    stall: impl Fn(&http::Request<kube::client::Body>) -> bool + Send + Sync + 'static,
) -> Client {
    let router = server.router();
    let stall = Arc::new(stall);
    let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        let router = router.clone();
        let stalled = stall(&request);
        async move {
            if stalled {
                std::future::pending::<()>().await;
            }
            router.oneshot(request).await
        }
    });
    Client::new(service, "default")
}

/// `browser_controller_leader` as the replica's /metrics shows it.
async fn leader_gauge(port: u16) -> Option<i64> {
    let (_, body) = tokio::task::spawn_blocking(move || http_get(port, "/metrics"))
        .await
        .unwrap()?;
    body.lines()
        .find_map(|l| l.strip_prefix("browser_controller_leader "))
        .and_then(|v| v.trim().parse().ok())
}

async fn readyz(port: u16) -> Option<(u16, String)> {
    tokio::task::spawn_blocking(move || http_get(port, "/readyz"))
        .await
        .unwrap()
}

/// Starts `a`, waits until it holds the Lease, then starts `b` as its standby.
async fn leader_and_standby(cluster: &Cluster, b_flags: &[&str]) -> (Replica, Replica, String) {
    let a = Replica::start(cluster, &ELECTION);
    cluster
        .until("the first replica to take the Lease", |c| {
            c.holder().is_some()
        })
        .await;
    let a_identity = cluster.holder().unwrap();
    let flags: Vec<&str> = ELECTION.iter().chain(b_flags).copied().collect();
    let b = Replica::start(cluster, &flags);
    (a, b, a_identity)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_holder_reconciles_and_a_released_lease_is_taken_over_at_once() {
    let cluster = Cluster::new().await;
    let health = free_port();
    let (a, b, a_identity) = leader_and_standby(
        &cluster,
        &[
            &format!("--health-probe-bind-address=127.0.0.1:{health}"),
            &format!("--metrics-addr=127.0.0.1:{health}"),
        ],
    )
    .await;

    // The standby is ready but idle.
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some((200, body)) = readyz(health).await {
            assert!(body.contains("standby"), "{body}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the standby never reported ready"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(leader_gauge(health).await, Some(0), "the standby's gauge");
    let sampler = Sampler::start(a.metrics.clone(), b.metrics.clone());
    let creator = cluster.keep_creating("s");
    cluster.until_running("s-0").await;
    cluster.until_running("s-10").await;
    assert!(a.reconciles() > 0 && a.writes() > 0);
    assert_eq!(
        (b.reconciles(), b.writes()),
        (0, 0),
        "the standby reconciled"
    );
    assert_eq!(cluster.holder().as_deref(), Some(a_identity.as_str()));

    // A graceful stop releases the Lease: the standby takes over well within the lease
    // duration, while Browsers keep coming.
    let stopped = Instant::now();
    a.stop().await.expect("the leader stops cleanly");
    cluster
        .until("the standby to take the Lease", |c| {
            c.holder().is_some_and(|h| h != a_identity)
        })
        .await;
    let takeover = stopped.elapsed();
    println!("takeover after a graceful stop (Lease released): {takeover:?}");
    assert!(
        takeover < LEASE_DURATION / 2,
        "takeover took {takeover:?}, lease duration {LEASE_DURATION:?}"
    );
    let b_before = b.reconciles();
    cluster
        .until("the new leader to reconcile", |_| b.reconciles() > b_before)
        .await;
    creator.abort();
    sampler.assert_one_after_the_other();

    // The new leader reports ready once its caches are synced, and releases on its stop too.
    let (status, body) = readyz(health).await.expect("/readyz answers");
    assert_eq!((status, body.as_str()), (200, "ok"));
    assert_eq!(
        leader_gauge(health).await,
        Some(1),
        "the new leader's gauge"
    );
    b.stop().await.expect("the new leader stops cleanly");
    assert_eq!(cluster.holder(), None, "the Lease was released");
    assert_lease_verbs_are_granted(&cluster.server);
}

/// Every verb the replicas used on Leases is one the Lease's Role (`rbac/leader-election.yaml`)
/// grants.
fn assert_lease_verbs_are_granted(server: &ApiServer) {
    let docs = browser_controller::manifest::read_file(std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/rbac/leader-election.yaml"
    )))
    .unwrap();
    let role = docs.iter().find(|d| d["kind"] == "Role").unwrap();
    let granted: Vec<&str> = role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| {
            r["resources"]
                .as_array()
                .unwrap()
                .contains(&json!("leases"))
        })
        .flat_map(|r| r["verbs"].as_array().unwrap())
        .filter_map(Value::as_str)
        .collect();
    let used: std::collections::BTreeSet<String> = server
        .requests()
        .into_iter()
        .filter(|r| r.resource == "leases")
        .map(|r| r.verb)
        .collect();
    assert!(
        used.contains("patch") && used.contains("create"),
        "{used:?}"
    );
    for verb in &used {
        assert!(
            granted.contains(&verb.as_str()),
            "{verb} on leases is not granted: {granted:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leaders_lease_is_taken_over_once_it_expires() {
    let cluster = Cluster::new().await;
    let (a, b, a_identity) = leader_and_standby(&cluster, &[]).await;
    let sampler = Sampler::start(a.metrics.clone(), b.metrics.clone());
    let creator = cluster.keep_creating("k");
    cluster.until_running("k-5").await;
    assert_eq!(b.reconciles(), 0, "the standby reconciled");

    // Killed: no release, no more renewals.
    a.task.abort();
    let killed = Instant::now();
    cluster
        .until("the standby to take the Lease", |c| {
            c.holder().is_some_and(|h| h != a_identity)
        })
        .await;
    let takeover = killed.elapsed();
    println!(
        "takeover after a kill (Lease left to expire, duration {LEASE_DURATION:?}): {takeover:?}"
    );
    // The leader renewed at most a second before the kill, so its lease still ran for two
    // seconds at least; the standby looks every 250 ms once it has expired.
    assert!(
        takeover > Duration::from_millis(1900),
        "the standby took a lease that had not expired: {takeover:?}"
    );
    assert!(
        takeover < LEASE_DURATION + Duration::from_secs(2),
        "takeover took {takeover:?}"
    );
    let b_before = b.reconciles();
    cluster
        .until("the new leader to reconcile", |_| b.reconciles() > b_before)
        .await;
    creator.abort();
    sampler.assert_one_after_the_other();
    b.stop().await.expect("the new leader stops cleanly");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_taken_by_another_holder_stops_reconciling_at_once() {
    let cluster = Cluster::new().await;
    let a = Replica::start(&cluster, &ELECTION);
    cluster
        .until("the Lease to be taken", |c| c.holder().is_some())
        .await;
    cluster.create_browser("s1").await;
    cluster.until_running("s1").await;

    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(cluster.client.clone(), LEASE_NS);
    let now = jiff::Timestamp::now().to_string();
    leases
        .patch(
            LEASE,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"holderIdentity": "intruder", "renewTime": now, "acquireTime": now}})),
        )
        .await
        .unwrap();
    let taken = Instant::now();
    let ended = tokio::time::timeout(WAIT, a.task)
        .await
        .expect("the replica stops")
        .unwrap();
    let after = taken.elapsed();
    println!("stopped reconciling {after:?} after the Lease was taken");
    match ended {
        Err(RunError::LostLease(lost)) => {
            let text = lost.to_string();
            assert!(
                text.contains("lost the leader Lease browser-controller/controller.selenosis.io"),
                "{text}"
            );
        }
        other => panic!("expected LostLease, got {other:?}"),
    }
    // Within the retry period (250 ms) plus scheduling, well before the renew deadline.
    assert!(after < Duration::from_secs(1), "{after:?}");
    assert_eq!(
        cluster.holder().as_deref(),
        Some("intruder"),
        "no release of someone else's Lease"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_cannot_renew_gives_up_within_the_renew_deadline() {
    let cluster = Cluster::new().await;
    let a = Replica::start(&cluster, &ELECTION);
    // Reconciling: it leads.
    cluster.create_browser("s1").await;
    cluster.until_running("s1").await;
    for verb in ["get", "patch"] {
        cluster.server.inject(Fault::new(
            verb,
            "leases",
            503,
            "ServiceUnavailable",
            "etcd is down",
        ));
    }
    let cut = Instant::now();
    let ended = tokio::time::timeout(WAIT, a.task)
        .await
        .expect("the replica stops")
        .unwrap();
    let after = cut.elapsed();
    println!("gave up {after:?} after the Lease became unreachable (renew deadline 2s)");
    match ended {
        Err(RunError::LostLease(lost)) => {
            assert!(lost.to_string().contains("not renewed for 2s"), "{lost}")
        }
        other => panic!("expected LostLease, got {other:?}"),
    }
    // Before the lease (3s) could expire and a standby take it.
    assert!(after < LEASE_DURATION, "{after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_standby_exits_cleanly_and_leaves_the_lease_alone() {
    let cluster = Cluster::new().await;
    let (a, b, a_identity) = leader_and_standby(&cluster, &[]).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    b.stop().await.expect("the standby stops cleanly");
    assert_eq!(cluster.holder(), Some(a_identity));
    a.stop().await.expect("the leader stops cleanly");
    assert_eq!(cluster.holder(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_leader_election_there_is_no_lease_traffic() {
    let cluster = Cluster::new().await;
    let a = Replica::start(&cluster, &[]);
    cluster.create_browser("s1").await;
    cluster.until_running("s1").await;
    a.stop().await.expect("stops cleanly");
    let lease_requests = cluster
        .server
        .requests()
        .iter()
        .filter(|r| r.resource == "leases")
        .count();
    assert_eq!(lease_requests, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_waits_for_in_flight_reconciles_only_up_to_the_shutdown_timeout() {
    let cluster = Cluster::new().await;
    // Pod creation hangs, so the reconcile that creates the pod never finishes.
    let client = stalling_client(&cluster.server, |r| {
        r.method() == http::Method::PATCH
            && r.uri().path().contains("/pods/")
            && !r.uri().query().unwrap_or("").contains("dryRun")
    });
    let a = Replica::start_with(client, &["--shutdown-timeout=1s"]);
    cluster.create_browser("stuck").await;
    cluster
        .until("the Browser to get its finalizer", |c| {
            c.browser("stuck")
                .is_some_and(|b| b["metadata"]["finalizers"].is_array())
        })
        .await;
    let in_flight = || counter(&a.metrics, "browser_controller_reconciles_in_flight");
    let deadline = Instant::now() + WAIT;
    while in_flight() == 0 {
        assert!(Instant::now() < deadline, "no reconcile in flight");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(in_flight(), 1, "the reconcile is stuck creating the pod");
    let stopping = Instant::now();
    a.stop().await.expect("stops cleanly");
    let took = stopping.elapsed();
    println!("stopped {took:?} after the stop signal with a reconcile stuck in flight");
    assert!(took >= Duration::from_millis(900), "{took:?}");
    assert!(took < Duration::from_secs(3), "{took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_while_the_caches_are_still_loading_ends_at_once() {
    let cluster = Cluster::new().await;
    cluster.create_browser("waiting").await;
    // Only the first list of BrowserConfigs is answered: one of the three caches over them
    // completes, the others never do.
    let lists = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let client = stalling_client(&cluster.server, move |r| {
        let list = r.method() == http::Method::GET
            && r.uri().path().ends_with("/browserconfigs")
            && !r.uri().query().unwrap_or("").contains("watch=true");
        list && lists.fetch_add(1, std::sync::atomic::Ordering::SeqCst) > 0
    });
    let a = Replica::start_with(client, &[]);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stopping = Instant::now();
    a.stop().await.expect("stops cleanly");
    let took = stopping.elapsed();
    println!("stopped {took:?} after the stop signal while caches were loading");
    // Far below the default --shutdown-timeout of 25s.
    assert!(took < Duration::from_secs(2), "{took:?}");
}

/// The operator's binary against the cluster's double as `POD_NAME` browser-controller-0, with
/// `args` after the endpoint flags and `env` set; what it runs on lives as long as the handles.
async fn spawn_binary(
    cluster: &Cluster,
    args: &[&str],
    env: &[(&str, &str)],
) -> (std::process::Child, ServeHandle, TempDir) {
    let served = cluster.server.serve().await.unwrap();
    let dir = TempDir::new("leader");
    let kubeconfig = dir.join("kubeconfig");
    served.write_kubeconfig(&kubeconfig).unwrap();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_browser-controller"))
        .args([
            "--metrics-addr=0",
            "--health-probe-bind-address=0",
            "--log-level=off",
        ])
        .args(args)
        .env("KUBECONFIG", &kubeconfig)
        .env("POD_NAME", "browser-controller-0")
        .envs(env.iter().copied())
        .env_remove("RUST_LOG")
        .env_remove("LEADER_ELECTION_NAMESPACE")
        .spawn()
        .expect("binary starts");
    (child, served, dir)
}

/// Sends `signal` (`-TERM`, `-STOP` …) to `child`.
fn signal(child: &std::process::Child, signal: &str) {
    let pid = child.id().to_string();
    let sent = std::process::Command::new("kill")
        .args([signal, &pid])
        .status();
    assert!(sent.unwrap().success(), "kill {signal} {pid}");
}

/// The exit status of `child`, which must exit within [`WAIT`].
async fn exit_status(mut child: std::process::Child, what: &str) -> std::process::ExitStatus {
    let status = tokio::task::spawn_blocking(move || {
        let status = wait_exit(&mut child, WAIT);
        kill(&mut child);
        status
    });
    status.await.unwrap().unwrap_or_else(|| panic!("{what}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_takes_the_lease_in_pod_namespace_and_releases_it_on_sigterm() {
    let cluster = Cluster::new().await;
    let env = [("POD_NAMESPACE", LEASE_NS)];
    let (child, _served, _dir) = spawn_binary(&cluster, &["--enable-leader-election"], &env).await;
    cluster
        .until("the process to take the Lease", |c| c.holder().is_some())
        .await;
    let holder = cluster.holder().unwrap();
    assert!(holder.starts_with("browser-controller-0_"), "{holder}");
    signal(&child, "-TERM");
    let status = exit_status(child, "the process stops on SIGTERM").await;
    assert_eq!(status.code(), Some(0));
    assert_eq!(cluster.holder(), None, "the Lease was released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_frozen_past_its_renew_deadline_exits_and_frees_the_lease() {
    let cluster = Cluster::new().await;
    let (child, _served, _dir) = spawn_binary(&cluster, &ELECTION, &[]).await;
    // Reconciling: it leads, past taking the Lease.
    cluster.create_browser("s1").await;
    cluster.until_running("s1").await;
    // Frozen (a CPU-starved or paused container) past the renew deadline (2s), not past the
    // lease duration (3s): as it thaws it may renew the Lease before it sees its hold is gone.
    signal(&child, "-STOP");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    signal(&child, "-CONT");
    let status = exit_status(child, "the frozen leader gives up its hold").await;
    assert_eq!(status.code(), Some(1), "exits on the lost Lease");
    // Free at once, not left to expire: a standby need not wait out the lease duration.
    assert_eq!(cluster.holder(), None, "the Lease was released");
}
