//! The system under the soak: an API server (a real control plane from KUBEBUILDER_ASSETS,
//! or the double), two operator replicas with leader election reaching it through a proxy
//! that can be cut or slowed, the kubelet simulator, and the soak's own watches (straight to
//! the API server) that record the history the invariants are judged on. It also carries
//! out the faults and keeps the replicas running, as a kubelet restarts a container.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use serde_json::Value;

use browser_controller::api::crd::Layout;

use crate::SoakError;
use crate::support::apiserver::{ApiServer, ServeHandle};
use crate::support::controlplane::{self, Assets, ControlPlane, Options};
use crate::support::history::{Seen, record_with};
use crate::support::host::{self, TempDir, die_with_parent, free_port, kill};
use crate::support::invariants::ReadySample;
use crate::support::kinds::{browser_resource, pod_resource};
use crate::support::kubelet::{Kubelet, KubeletConfig, KubeletHandle, Script};
use crate::support::partition::{PacketDrop, SilentProxy, packet_filter_available};

/// The namespace of the soak's Browsers.
pub const NAMESPACE: &str = "soak";
/// Where the replicas keep their Lease (rbac/ grants it there).
const LEASE_NAMESPACE: &str = "browser-controller";
const LEASE: &str = "controller.selenosis.io";
/// The uid the replicas run as where packets can be dropped (`nobody`).
const NOBODY: u32 = 65534;
/// How long a standby may take to hold the Lease after the leader went: the default lease
/// duration, then up to one retry period until it looks again.
pub const TAKEOVER: Duration = Duration::from_secs(15 + 2);
/// The pod deletion timeout the replicas run with.
pub const DELETION_TIMEOUT: Duration = Duration::from_secs(30);
const OPERATOR: &str = env!("CARGO_BIN_EXE_browser-controller");

enum Server {
    Double {
        server: ApiServer,
        served: ServeHandle,
    },
    Plane(ControlPlane),
}

/// One replica of the operator, restarted when it exits.
struct Replica {
    name: String,
    child: Option<Child>,
    health: u16,
    /// Stopped with SIGSTOP: alive, not answering.
    frozen: bool,
    /// Exits the soak caused (SIGKILL, SIGTERM) are not reported as the replica's own.
    expected_exit: bool,
    exited_at: Option<Instant>,
}

/// Something the timeline records besides faults: a replica that exited on its own.
#[derive(Clone, Debug)]
pub struct Note {
    pub at: Instant,
    pub text: String,
}

pub struct System {
    server: Server,
    pub admin: kube::Client,
    proxy: SilentProxy,
    packets: Mutex<Option<PacketDrop>>,
    replicas: Mutex<Vec<Replica>>,
    kubeconfig: PathBuf,
    pub kubelet: KubeletHandle,
    history: Arc<Mutex<Vec<Seen>>>,
    recorders: Vec<tokio::task::JoinHandle<()>>,
    ready: Mutex<Vec<ReadySample>>,
    rss: Mutex<BTreeMap<String, u64>>,
    notes: Mutex<Vec<Note>>,
    dir: TempDir,
}

/// What the invariants read of an object: its identity and status. A pod's spec and every
/// object's managed fields would hold most of the soak's memory over half an hour.
fn slim(object: &mut Value) {
    let Some(map) = object.as_object_mut() else {
        return;
    };
    map.remove("spec");
    if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.retain(|k, _| matches!(k.as_str(), "name" | "uid" | "deletionTimestamp"));
    }
    if let Some(status) = map.get_mut("status").and_then(Value::as_object_mut) {
        status.retain(|k, _| {
            matches!(
                k.as_str(),
                "phase"
                    | "reason"
                    | "message"
                    | "podIP"
                    | "containerStatuses"
                    | "initContainerStatuses"
            )
        });
        for key in ["containerStatuses", "initContainerStatuses"] {
            for container in status
                .get_mut(key)
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
                .filter_map(Value::as_object_mut)
            {
                container.retain(|k, _| matches!(k.as_str(), "name" | "state" | "lastState"));
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl System {
    /// A real control plane from `assets`, or the double.
    pub async fn start(assets: Option<&Assets>) -> Result<Self, SoakError> {
        let dir = TempDir::new("soak");
        let user = operator_user()?;
        let (server, admin, target) = match assets {
            Some(assets) => {
                let plane = ControlPlane::start_with(
                    assets,
                    Options {
                        audit: true,
                        ..Options::default()
                    },
                )
                .await
                .map_err(SoakError::setup("control plane"))?;
                let admin = plane
                    .client()
                    .await
                    .map_err(SoakError::setup("admin client"))?;
                let port = plane
                    .url
                    .rsplit(':')
                    .next()
                    .and_then(|p| p.parse::<u16>().ok())
                    .ok_or_else(|| SoakError::Setup(format!("no port in {}", plane.url)))?;
                (Server::Plane(plane), admin, ([127, 0, 0, 1], port).into())
            }
            None => {
                let server = ApiServer::new();
                server.serve_openapi(true, true);
                let served = server
                    .serve()
                    .await
                    .map_err(SoakError::setup("the double"))?;
                let admin = server.client();
                let addr = served.addr();
                (Server::Double { server, served }, admin, addr)
            }
        };
        let repo = crate::support::repo();
        for folder in ["crds", "rbac"] {
            controlplane::apply_dir(&admin, &repo.join(folder))
                .await
                .map_err(SoakError::setup(folder))?;
        }
        for ns in [NAMESPACE, LEASE_NAMESPACE] {
            ensure_namespace(&admin, ns).await?;
        }
        let proxy = SilentProxy::start_slowable(target)
            .await
            .map_err(SoakError::setup("the proxy"))?;
        let kubeconfig = dir.join("operator.kubeconfig");
        match &server {
            Server::Plane(plane) => plane
                .write_kubeconfig_via(
                    &kubeconfig,
                    &format!("https://{}", proxy.addr()),
                    Some(&user),
                )
                .map_err(SoakError::setup("kubeconfig"))?,
            Server::Double { served, .. } => served
                .write_kubeconfig_via(&kubeconfig, &proxy.url(), Some(&user))
                .map_err(SoakError::setup("kubeconfig"))?,
        }
        // Packets are dropped where the kernel lets this process do it; elsewhere the proxy goes
        // silent. The connection mark is this process's own, so that soaks can run side by side.
        let mark = 0x5000_0000 | (std::process::id() & 0x00ff_ffff);
        let packets = match (&server, packet_filter_available()) {
            (Server::Plane(_), Ok(())) => {
                Some(PacketDrop::new(NOBODY, proxy.addr().port(), mark).map_err(SoakError::Setup)?)
            }
            _ => None,
        };
        let kubelet = Kubelet::start_with(
            admin.clone(),
            "soak-node",
            Script::Run,
            KubeletConfig {
                namespace: Some(NAMESPACE.into()),
                ..KubeletConfig::default()
            },
        );
        let history = Arc::new(Mutex::new(Vec::new()));
        let recorders = [
            ("Browser", browser_resource(Layout::Default)),
            ("Pod", pod_resource()),
        ]
        .into_iter()
        .map(|(kind, ar): (&'static str, ApiResource)| {
            let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), NAMESPACE, &ar);
            tokio::spawn(record_with(api, kind, history.clone(), slim))
        })
        .collect();
        let system = Self {
            server,
            admin,
            proxy,
            packets: Mutex::new(packets),
            replicas: Mutex::new(
                ["replica-a", "replica-b"]
                    .into_iter()
                    .map(|name| Replica {
                        name: name.to_string(),
                        child: None,
                        health: free_port(),
                        frozen: false,
                        expected_exit: false,
                        exited_at: None,
                    })
                    .collect(),
            ),
            kubeconfig,
            kubelet,
            history,
            recorders,
            ready: Mutex::new(Vec::new()),
            rss: Mutex::new(BTreeMap::new()),
            notes: Mutex::new(Vec::new()),
            dir,
        };
        {
            let mut replicas = lock(&system.replicas);
            for replica in replicas.iter_mut() {
                system.spawn(replica)?;
            }
        }
        Ok(system)
    }

    /// How a partition is made here.
    pub fn partition_kind(&self) -> &'static str {
        if lock(&self.packets).is_some() {
            "packets of the replicas dropped both ways"
        } else {
            "the replicas' proxy silent"
        }
    }

    pub fn describe(&self) -> String {
        match &self.server {
            Server::Plane(plane) => format!("kube-apiserver at {}", plane.url),
            Server::Double { .. } => "the API server double".into(),
        }
    }

    pub fn is_double(&self) -> bool {
        matches!(self.server, Server::Double { .. })
    }

    fn spawn(&self, replica: &mut Replica) -> Result<(), SoakError> {
        let log = self.dir.join(&format!("{}.log", replica.name));
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(SoakError::setup("replica log"))?;
        let err = out.try_clone().map_err(SoakError::setup("replica log"))?;
        let mut command = Command::new(OPERATOR);
        command
            .args([
                &format!("--namespace={NAMESPACE}"),
                "--enable-leader-election",
                &format!("--leader-election-namespace={LEASE_NAMESPACE}"),
                &format!("--leader-election-id={LEASE}"),
                &format!(
                    "--browser-pod-deletion-timeout={}s",
                    DELETION_TIMEOUT.as_secs()
                ),
                &format!("--health-probe-bind-address=127.0.0.1:{}", replica.health),
                "--metrics-addr=0",
                "--log-level=info",
            ])
            .env("KUBECONFIG", &self.kubeconfig)
            .env("POD_NAME", &replica.name)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err));
        if lock(&self.packets).is_some() {
            use std::os::unix::process::CommandExt;
            command.uid(NOBODY).gid(NOBODY);
        }
        replica.child = Some(
            die_with_parent(&mut command)
                .spawn()
                .map_err(SoakError::setup("start a replica"))?,
        );
        replica.frozen = false;
        replica.expected_exit = false;
        replica.exited_at = None;
        Ok(())
    }

    /// Restarts a replica that exited a second ago or more, as a kubelet restarts a container;
    /// notes an exit the soak did not cause.
    pub fn supervise(&self) -> Result<(), SoakError> {
        let now = Instant::now();
        let mut replicas = lock(&self.replicas);
        for replica in replicas.iter_mut() {
            if let Some(child) = replica.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                replica.child = None;
                replica.exited_at = Some(now);
                if !replica.expected_exit {
                    lock(&self.notes).push(Note {
                        at: now,
                        text: format!("{} exited on its own: {status}", replica.name),
                    });
                }
            }
            let due = replica
                .exited_at
                .is_some_and(|at| now >= at + Duration::from_secs(1));
            if replica.child.is_none() && due {
                self.spawn(replica)?;
            }
        }
        Ok(())
    }

    /// One `/readyz` answer and the resident memory of each running replica.
    pub async fn sample(&self) {
        let now = Instant::now();
        let targets: Vec<(String, u16, u32)> = lock(&self.replicas)
            .iter()
            .filter(|r| !r.frozen)
            .filter_map(|r| Some((r.name.clone(), r.health, r.child.as_ref()?.id())))
            .collect();
        let answers = tokio::task::spawn_blocking(move || {
            targets
                .into_iter()
                .map(|(name, port, pid)| {
                    let code = host::http_get(port, "/readyz").map(|(code, _)| code);
                    (name, code, resident_bytes(pid))
                })
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
        for (replica, code, rss) in answers {
            if let Some(rss) = rss {
                let mut peaks = lock(&self.rss);
                let peak = peaks.entry(replica.clone()).or_default();
                *peak = (*peak).max(rss);
            }
            lock(&self.ready).push(ReadySample {
                replica,
                at: now,
                code,
            });
        }
    }

    pub fn ready_samples(&self) -> Vec<ReadySample> {
        lock(&self.ready).clone()
    }

    pub fn rss_peaks(&self) -> BTreeMap<String, u64> {
        lock(&self.rss).clone()
    }

    pub fn notes(&self) -> Vec<Note> {
        lock(&self.notes).clone()
    }

    /// The replica holding the Lease now, by its holder identity (`<POD_NAME>_<suffix>`).
    pub async fn leader(&self) -> Option<usize> {
        let leases: Api<DynamicObject> = Api::namespaced_with(
            self.admin.clone(),
            LEASE_NAMESPACE,
            &ApiResource::erase::<k8s_openapi::api::coordination::v1::Lease>(&()),
        );
        let lease = leases.get(LEASE).await.ok()?;
        let holder = lease.data["spec"]["holderIdentity"].as_str()?;
        lock(&self.replicas)
            .iter()
            .position(|r| holder.starts_with(&format!("{}_", r.name)))
    }

    /// The leader, else the first replica.
    async fn target(&self) -> usize {
        self.leader().await.unwrap_or(0)
    }

    /// SIGKILLs the leader; the supervisor starts it again a second later. Returns its name.
    pub async fn kill_leader(&self) -> String {
        let i = self.target().await;
        let mut replicas = lock(&self.replicas);
        let replica = &mut replicas[i];
        replica.expected_exit = true;
        if let Some(child) = replica.child.as_mut() {
            kill(child);
        }
        replica.name.clone()
    }

    /// SIGTERMs the leader and waits for it to end (the hand-over); the supervisor starts it
    /// again as a standby. Returns its name.
    pub async fn terminate_leader(&self) -> String {
        let i = self.target().await;
        let name = {
            let mut replicas = lock(&self.replicas);
            let replica = &mut replicas[i];
            replica.expected_exit = true;
            if let Some(child) = replica.child.as_ref() {
                signal(child, libc::SIGTERM);
            }
            replica.name.clone()
        };
        let deadline = Instant::now() + Duration::from_secs(40);
        loop {
            let ended = lock(&self.replicas)[i]
                .child
                .as_mut()
                .is_none_or(|c| !matches!(c.try_wait(), Ok(None)));
            if ended {
                break;
            }
            if Instant::now() > deadline {
                if let Some(child) = lock(&self.replicas)[i].child.as_mut() {
                    kill(child);
                }
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        name
    }

    /// SIGSTOPs the leader's process (CPU starvation): it stays alive and does nothing. Returns
    /// which replica, for [`System::thaw`].
    pub async fn freeze_leader(&self) -> (usize, String) {
        let i = self.target().await;
        let mut replicas = lock(&self.replicas);
        let replica = &mut replicas[i];
        if let Some(child) = replica.child.as_ref() {
            signal(child, libc::SIGSTOP);
        }
        replica.frozen = true;
        (i, replica.name.clone())
    }

    /// SIGCONTs a replica [`System::freeze_leader`] stopped.
    pub fn thaw(&self, i: usize) {
        let mut replicas = lock(&self.replicas);
        let replica = &mut replicas[i];
        if let Some(child) = replica.child.as_ref() {
            signal(child, libc::SIGCONT);
        }
        replica.frozen = false;
    }

    pub fn cut(&self) -> Result<(), SoakError> {
        match lock(&self.packets).as_mut() {
            Some(packets) => packets.cut().map_err(SoakError::Fault),
            None => {
                self.proxy.cut();
                Ok(())
            }
        }
    }

    pub fn heal(&self) -> Result<(), SoakError> {
        match lock(&self.packets).as_mut() {
            Some(packets) => packets.heal().map_err(SoakError::Fault),
            None => {
                self.proxy.heal();
                Ok(())
            }
        }
    }

    pub fn slow(&self, delay: Duration) {
        self.proxy.slow(delay);
    }

    /// The API server goes away and comes back: kube-apiserver restarts; the double answers
    /// 503 for 8 s.
    pub async fn restart_apiserver(&self) -> Result<(), SoakError> {
        match &self.server {
            Server::Plane(plane) => plane.restart_apiserver().await.map_err(fault),
            Server::Double { server, .. } => {
                server.set_unavailable(true);
                tokio::time::sleep(Duration::from_secs(8)).await;
                server.set_unavailable(false);
                Ok(())
            }
        }
    }

    /// etcd is killed and started again (a real control plane only).
    pub async fn restart_etcd(&self) -> Result<(), SoakError> {
        match &self.server {
            Server::Plane(plane) => plane.restart_etcd().await.map_err(fault),
            Server::Double { .. } => Err(SoakError::Fault("the double has no etcd".into())),
        }
    }

    /// The operator's watches resume where the server can no longer serve them (410 Gone):
    /// the double ends every watch so; a real API server restarts while the replicas are cut
    /// off, so that their watches resume on a new watch cache.
    pub async fn expire_watches(&self) -> Result<(), SoakError> {
        match &self.server {
            Server::Double { server, .. } => {
                server.compact();
                server.expire_watches();
                Ok(())
            }
            Server::Plane(_) => {
                self.cut()?;
                let restarted = self.restart_apiserver().await;
                tokio::time::sleep(Duration::from_secs(2)).await;
                self.heal()?;
                restarted
            }
        }
    }

    /// How often each pod was created, by the API server's own records.
    pub fn pod_creates(&self) -> BTreeMap<String, usize> {
        match &self.server {
            Server::Plane(plane) => plane.pod_creates(NAMESPACE),
            Server::Double { server, .. } => server.pod_creates(NAMESPACE),
        }
    }

    /// The history so far.
    pub fn history(&self) -> Vec<Seen> {
        lock(&self.history).clone()
    }

    /// `f` of the recorded history as it is now, without copying it (a copy a minute of a long
    /// run's history is what grows the soak's own memory).
    pub fn with_history<R>(&self, f: impl FnOnce(&[Seen]) -> R) -> R {
        f(&lock(&self.history))
    }

    /// Copies every replica's log to `dir` (kept for a run that broke an invariant).
    pub fn keep_logs(&self, dir: &std::path::Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        for replica in lock(&self.replicas).iter() {
            let name = format!("{}.log", replica.name);
            std::fs::copy(self.dir.join(&name), dir.join(&name))?;
        }
        Ok(())
    }

    /// The last lines of every replica's log.
    pub fn logs(&self, lines: usize) -> String {
        lock(&self.replicas)
            .iter()
            .map(|r| {
                format!(
                    "--- {} (last {lines} lines) ---\n{}\n",
                    r.name,
                    host::tail(&self.dir.join(&format!("{}.log", r.name)), lines)
                )
            })
            .collect()
    }

    pub fn stop(self) {
        for replica in lock(&self.replicas).iter_mut() {
            if let Some(child) = replica.child.as_mut() {
                kill(child);
            }
        }
        for recorder in &self.recorders {
            recorder.abort();
        }
        if let Server::Plane(plane) = self.server {
            plane.stop();
        }
    }
}

fn fault(e: controlplane::ControlPlaneError) -> SoakError {
    SoakError::Fault(e.to_string())
}

fn signal(child: &Child, signal: libc::c_int) {
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: a signal to our own child, not reaped yet.
        unsafe {
            libc::kill(pid, signal);
        }
    }
}

/// `VmRSS` of a process, in bytes.
fn resident_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// `system:serviceaccount:NS:NAME` of `rbac/service-account.yaml`.
fn operator_user() -> Result<String, SoakError> {
    let path = crate::support::repo().join("rbac/service-account.yaml");
    let docs = browser_controller::manifest::read_file(&path).map_err(SoakError::setup("rbac"))?;
    let meta = &docs
        .first()
        .ok_or_else(|| SoakError::Setup(format!("{} is empty", path.display())))?["metadata"];
    Ok(format!(
        "system:serviceaccount:{}:{}",
        meta["namespace"].as_str().unwrap_or("default"),
        meta["name"].as_str().unwrap_or("default")
    ))
}

async fn ensure_namespace(client: &kube::Client, ns: &str) -> Result<(), SoakError> {
    let api: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&()),
    );
    let object: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns},
    }))
    .map_err(SoakError::setup("namespace"))?;
    match api.create(&Default::default(), &object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(SoakError::Setup(format!("namespace {ns}: {e}"))),
    }
}
