//! A real control plane for tests: `etcd` and `kube-apiserver` from `$KUBEBUILDER_ASSETS` (the
//! layout `setup-envtest` produces; `etcd` may also come from `PATH`), started on free loopback
//! ports with a generated CA and serving certificate, a service-account key pair and a token
//! file whose admin token is in `system:masters`.
//!
//! There is no controller-manager, scheduler or kubelet: no garbage collector, no namespace
//! deletion, no default ServiceAccounts (hence `--disable-admission-plugins=ServiceAccount`),
//! and pods stay Pending until something binds them (see `kubelet.rs`). A plane started with
//! [`Options::pod_address`] serves pods of a real node as a cluster's does (`node.rs`).
//!
//! Children are spawned with `PR_SET_PDEATHSIG`, killed and reaped by [`ControlPlane::stop`]
//! (or on drop), and every file lives in one temporary directory removed with them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::GroupVersionKind;
use kube::discovery::{Scope, pinned_kind};
use serde_json::Value;

use super::host::{TempDir, die_with_parent, free_port, http_get, kill, on_path, tail, wait_exit};

/// Field manager of everything the harness applies.
pub const MANAGER: &str = "e2e-harness";
const ADMIN_TOKEN: &str = "e2e-admin-token";
const START_LIMIT: Duration = Duration::from_secs(90);
/// How long kube-apiserver may take to shut down gracefully before it is killed.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(15);

#[derive(Debug, thiserror::Error)]
pub enum ControlPlaneError {
    #[error("{0} not found in $KUBEBUILDER_ASSETS ({1}){2}")]
    Missing(&'static str, String, &'static str),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("certificate generation: {0}")]
    Cert(#[from] rcgen::Error),
    #[error("{what} did not become ready within {limit:?}:\n{log}")]
    NotReady {
        what: &'static str,
        limit: Duration,
        log: String,
    },
    #[error("kubeconfig: {0}")]
    Kubeconfig(String),
    #[error("{file}: {message}")]
    Apply { file: String, message: String },
}

fn lock(child: &Mutex<Option<Child>>) -> MutexGuard<'_, Option<Child>> {
    child.lock().unwrap_or_else(PoisonError::into_inner)
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ControlPlaneError {
    let what = what.into();
    move |source| ControlPlaneError::Io { what, source }
}

/// The binaries of a control plane.
#[derive(Clone, Debug)]
pub struct Assets {
    /// The folder they were found in.
    pub dir: PathBuf,
    pub kube_apiserver: PathBuf,
    pub etcd: PathBuf,
}

/// Further asset folders for the end-to-end suite, `:`-separated like `PATH`: each gets a
/// control plane and the whole suite, after `KUBEBUILDER_ASSETS`'s.
pub const MORE_ASSETS: &str = "E2E_MORE_ASSETS";

impl Assets {
    /// Every set of assets the environment names: `KUBEBUILDER_ASSETS`, then each folder of
    /// [`MORE_ASSETS`]. An error names a folder that lacks a binary.
    pub fn all_from_env() -> Result<Vec<Self>, ControlPlaneError> {
        let mut all: Vec<Self> = Self::from_env()?.into_iter().collect();
        if let Some(more) = std::env::var_os(MORE_ASSETS) {
            for dir in std::env::split_paths(&more).filter(|d| !d.as_os_str().is_empty()) {
                all.push(Self::find(&dir)?);
            }
        }
        Ok(all)
    }

    /// `None` when `KUBEBUILDER_ASSETS` is not set; an error when it is set but incomplete.
    pub fn from_env() -> Result<Option<Self>, ControlPlaneError> {
        match std::env::var_os("KUBEBUILDER_ASSETS") {
            Some(dir) if !dir.is_empty() => Self::find(Path::new(&dir)).map(Some),
            _ => Ok(None),
        }
    }

    pub fn find(dir: &Path) -> Result<Self, ControlPlaneError> {
        let shown = dir.display().to_string();
        let kube_apiserver = dir.join("kube-apiserver");
        if !kube_apiserver.is_file() {
            return Err(ControlPlaneError::Missing("kube-apiserver", shown, ""));
        }
        let etcd = Some(dir.join("etcd"))
            .filter(|p| p.is_file())
            .or_else(|| on_path("etcd"))
            .ok_or(ControlPlaneError::Missing("etcd", shown, " nor on PATH"))?;
        Ok(Self {
            dir: dir.to_path_buf(),
            kube_apiserver,
            etcd,
        })
    }
}

/// How to start a control plane.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// Record every pod write in an audit log ([`ControlPlane::pod_creates`]). It costs the
    /// API server CPU: off for measurements.
    pub audit: bool,
    /// Serve pods of a real node as a cluster does: listen on this host address too, name it
    /// and the `kubernetes` Service's address in the serving certificate, and admit pods with
    /// their ServiceAccount's token (the node runs the controllers that make the default
    /// ServiceAccounts and publish the CA).
    pub pod_address: Option<std::net::IpAddr>,
}

/// The `kubernetes` Service's address: the first of `--service-cluster-ip-range`.
pub const SERVICE_ADDRESS: &str = "10.0.0.1";

/// A running etcd + kube-apiserver.
pub struct ControlPlane {
    // Declared before `dir` so the processes die before their files go.
    etcd: Mutex<Option<Child>>,
    apiserver: Mutex<Option<Child>>,
    /// The binary and flags of kube-apiserver, for a restart.
    apiserver_command: (PathBuf, Vec<String>),
    /// Those of etcd, likewise.
    etcd_command: (PathBuf, Vec<String>),
    pub url: String,
    /// [`Options::pod_address`].
    pub pod_address: Option<std::net::IpAddr>,
    dir: TempDir,
}

/// Audit policy: writes of pods, Browsers (both layouts, status included) and Leases,
/// metadata only.
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: Metadata
  resources:
  - {group: \"\", resources: [pods]}
  - {group: selenosis.io, resources: [browsers, browsers/status]}
  - {group: browser.selenosis.io, resources: [browsers, browsers/status]}
  - {group: coordination.k8s.io, resources: [leases]}
  verbs: [create, patch, update, delete]
- level: None
";

struct Certs {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    sa_public: PathBuf,
    sa_private: PathBuf,
}

fn write(path: &Path, text: &str) -> Result<(), ControlPlaneError> {
    std::fs::write(path, text).map_err(io(format!("write {}", path.display())))
}

fn generate_certs(dir: &Path, more_names: &[String]) -> Result<Certs, ControlPlaneError> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose,
    };
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "browser-controller e2e CA");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::from_params(&ca_params, &ca_key);

    let key = KeyPair::generate()?;
    let mut names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    names.extend_from_slice(more_names);
    let mut params = CertificateParams::new(names)?;
    params
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.signed_by(&key, &issuer)?;

    // ECDSA P-256: kube-apiserver signs service-account tokens with ES256 from such a key.
    let sa = KeyPair::generate()?;
    let certs = Certs {
        ca: dir.join("ca.crt"),
        cert: dir.join("apiserver.crt"),
        key: dir.join("apiserver.key"),
        sa_public: dir.join("sa.pub"),
        sa_private: dir.join("sa.key"),
    };
    write(&certs.ca, &ca_cert.pem())?;
    write(&certs.cert, &cert.pem())?;
    write(&certs.key, &key.serialize_pem())?;
    write(&certs.sa_public, &sa.public_key_pem())?;
    write(&certs.sa_private, &sa.serialize_pem())?;
    Ok(certs)
}

/// Starts `binary` with `args`, appending its output to `log`; it dies with this process.
pub fn spawn(binary: &Path, args: &[String], log: &Path) -> Result<Child, ControlPlaneError> {
    let name = binary.display().to_string();
    // Appended to: a restarted process continues the log of the one before.
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(io(format!("open {}", log.display())))?;
    let err = out.try_clone().map_err(io("log file"))?;
    die_with_parent(
        Command::new(binary)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err)),
    )
    .spawn()
    .map_err(io(format!("start {name}")))
}

/// Whether `etcd --help` lists `flag` (`--unsafe-no-fsync` came with etcd 3.5).
fn etcd_supports(etcd: &Path, flag: &str) -> bool {
    Command::new(etcd)
        .arg("--help")
        .stdin(Stdio::null())
        .output()
        .is_ok_and(|o| {
            String::from_utf8_lossy(&o.stdout).contains(flag)
                || String::from_utf8_lossy(&o.stderr).contains(flag)
        })
}

impl ControlPlane {
    /// Starts etcd and kube-apiserver and waits until `/readyz` answers 200. Spawns from the
    /// calling thread (see [`die_with_parent`]).
    pub async fn start(assets: &Assets) -> Result<Self, ControlPlaneError> {
        Self::start_with(assets, Options::default()).await
    }

    /// [`ControlPlane::start`] with `options`.
    pub async fn start_with(assets: &Assets, options: Options) -> Result<Self, ControlPlaneError> {
        let dir = TempDir::new("controlplane");
        let mut plane = Self {
            etcd: Mutex::new(None),
            apiserver: Mutex::new(None),
            apiserver_command: (assets.kube_apiserver.clone(), Vec::new()),
            etcd_command: (assets.etcd.clone(), Vec::new()),
            url: String::new(),
            pod_address: options.pod_address,
            dir,
        };
        let data = plane.dir.join("etcd-data");
        let (client_port, peer_port) = (free_port(), free_port());
        let client_url = format!("http://127.0.0.1:{client_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let mut etcd_args = vec![
            "--name=default".to_string(),
            format!("--data-dir={}", data.display()),
            format!("--listen-client-urls={client_url}"),
            format!("--advertise-client-urls={client_url}"),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster=default={peer_url}"),
        ];
        if etcd_supports(&assets.etcd, "--unsafe-no-fsync") {
            etcd_args.push("--unsafe-no-fsync".to_string());
        }
        // Servers from 1.27 serve watches from their cache only up to the newest revision
        // etcd reported; etcd 3.4 reports it for an idle range only with this (else a watch of
        // a quiet resource fails with "Too large resource version").
        let progress = "--experimental-watch-progress-notify-interval";
        if etcd_supports(&assets.etcd, progress) {
            etcd_args.push(format!("{progress}=1s"));
        }
        *lock(&plane.etcd) = Some(spawn(&assets.etcd, &etcd_args, &plane.etcd_log())?);
        plane.etcd_command.1 = etcd_args;
        plane
            .wait("etcd", || {
                http_get(client_port, "/health")
                    .is_some_and(|(s, b)| s == 200 && b.contains("true"))
            })
            .await?;

        // What pods connect to: the Service's address (in-cluster clients' KUBERNETES_SERVICE_HOST)
        // and its names.
        let pod_names: Vec<String> = match options.pod_address {
            Some(address) => [
                address.to_string(),
                SERVICE_ADDRESS.to_string(),
                "kubernetes".to_string(),
                "kubernetes.default".to_string(),
                "kubernetes.default.svc".to_string(),
                "kubernetes.default.svc.cluster.local".to_string(),
            ]
            .into(),
            None => Vec::new(),
        };
        let certs = generate_certs(plane.dir.path(), &pod_names)?;
        let tokens = plane.dir.join("tokens.csv");
        // token,user,uid,"group1,group2"
        write(
            &tokens,
            &format!("{ADMIN_TOKEN},e2e-admin,e2e-admin,\"system:masters\"\n"),
        )?;
        let cert_dir = plane.dir.join("cert-dir");
        std::fs::create_dir_all(&cert_dir).map_err(io("create cert dir"))?;
        let port = free_port();
        let p = |path: &PathBuf| path.display().to_string();
        let mut args = vec![
            format!("--etcd-servers={client_url}"),
            format!("--secure-port={port}"),
            // No `kubernetes` Service endpoint: a loopback address is no valid one (1.37 refuses
            // to start with one; older servers log the refusal every 10 s).
            "--endpoint-reconciler-type=none".to_string(),
            format!("--cert-dir={}", p(&cert_dir)),
            format!("--tls-cert-file={}", p(&certs.cert)),
            format!("--tls-private-key-file={}", p(&certs.key)),
            format!("--token-auth-file={}", p(&tokens)),
            "--authorization-mode=RBAC".to_string(),
            format!("--service-account-key-file={}", p(&certs.sa_public)),
            format!(
                "--service-account-signing-key-file={}",
                p(&certs.sa_private)
            ),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".to_string(),
            "--service-cluster-ip-range=10.0.0.0/24".to_string(),
            "--allow-privileged=true".to_string(),
        ];
        match options.pod_address {
            Some(address) => args.extend([
                "--bind-address=0.0.0.0".to_string(),
                format!("--advertise-address={address}"),
            ]),
            None => args.extend([
                "--bind-address=127.0.0.1".to_string(),
                "--advertise-address=127.0.0.1".to_string(),
                "--disable-admission-plugins=ServiceAccount".to_string(),
            ]),
        }
        if options.audit {
            let policy = plane.dir.join("audit-policy.yaml");
            write(&policy, AUDIT_POLICY)?;
            args.push(format!("--audit-policy-file={}", p(&policy)));
            args.push(format!("--audit-log-path={}", p(&plane.audit_log())));
            // The default rotates the log at 100 MB, which a burst of 50 000 exceeds: the
            // writes of the rotated part would go uncounted.
            args.push("--audit-log-maxsize=1000000".to_string());
        }
        *plane.apiserver_child() = Some(spawn(
            &assets.kube_apiserver,
            &args,
            &plane.apiserver_log(),
        )?);
        plane.apiserver_command.1 = args;
        plane.url = format!("https://127.0.0.1:{port}");
        plane.write_kubeconfig(&plane.admin_kubeconfig(), None)?;
        plane.until_ready().await?;
        Ok(plane)
    }

    fn apiserver_child(&self) -> MutexGuard<'_, Option<Child>> {
        lock(&self.apiserver)
    }

    /// Waits until kube-apiserver answers `/readyz`.
    async fn until_ready(&self) -> Result<(), ControlPlaneError> {
        let client = self.client().await?;
        let deadline = Instant::now() + START_LIMIT;
        loop {
            let request = http::Request::get("/readyz").body(Vec::new());
            let ready = match request {
                Ok(r) => client.request_text(r).await.is_ok(),
                Err(_) => false,
            };
            if ready {
                return Ok(());
            }
            if Instant::now() > deadline || self.exited() {
                return Err(ControlPlaneError::NotReady {
                    what: "kube-apiserver",
                    limit: START_LIMIT,
                    log: self.logs(40),
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Restarts kube-apiserver as an upgrade or a maintenance does: SIGTERM, its own graceful
    /// shutdown (SIGKILL after [`SHUTDOWN_GRACE`], as a kubelet ends a static pod), then the
    /// same flags on the same port and etcd.
    /// Returns once the new one is ready. Spawns from the calling thread.
    pub async fn restart_apiserver(&self) -> Result<(), ControlPlaneError> {
        let old = self.apiserver_child().take();
        if let Some(mut child) = old {
            if let Ok(pid) = i32::try_from(child.id()) {
                // SAFETY: signalling our own child process.
                unsafe {
                    libc::kill(pid, libc::SIGTERM);
                }
            }
            let exited = tokio::task::spawn_blocking(move || {
                if wait_exit(&mut child, SHUTDOWN_GRACE).is_none() {
                    kill(&mut child);
                }
            });
            let _ = exited.await;
        }
        let (binary, args) = &self.apiserver_command;
        *self.apiserver_child() = Some(spawn(binary, args, &self.apiserver_log())?);
        self.until_ready().await
    }

    /// Kills etcd (SIGKILL: no shutdown, as when its machine dies) and starts it again with the
    /// same flags and data. Returns once kube-apiserver is ready again. Spawns from the calling
    /// thread.
    pub async fn restart_etcd(&self) -> Result<(), ControlPlaneError> {
        if let Some(mut etcd) = lock(&self.etcd).take() {
            kill(&mut etcd);
        }
        let (binary, args) = &self.etcd_command;
        *lock(&self.etcd) = Some(spawn(binary, args, &self.etcd_log())?);
        self.until_ready().await
    }

    /// The audit log's file (written with [`Options::audit`]).
    pub fn audit_log(&self) -> PathBuf {
        self.dir.join("audit.log")
    }

    /// How many times each pod of `namespace` was created (a create, or an apply answered
    /// 201; dry runs store nothing), by the audit log. Empty without [`Options::audit`].
    pub fn pod_creates(&self, namespace: &str) -> BTreeMap<String, usize> {
        self.pod_creates_answered(namespace, 201)
    }

    /// How many creates (or applies) of each pod of `namespace`, dry runs left out, the API
    /// server answered with `code` (201 counts creations, 403 refusals), by the audit log.
    pub fn pod_creates_answered(&self, namespace: &str, code: u16) -> BTreeMap<String, usize> {
        let mut creates = BTreeMap::new();
        let text = std::fs::read_to_string(self.audit_log()).unwrap_or_default();
        for event in text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        {
            let target = &event["objectRef"];
            if target["resource"] == "pods"
                && target["subresource"].is_null()
                && target["namespace"] == namespace
                && matches!(event["verb"].as_str(), Some("create" | "patch"))
                && event["responseStatus"]["code"] == code
                && !event["requestURI"]
                    .as_str()
                    .is_some_and(|uri| uri.contains("dryRun="))
                && let Some(name) = target["name"].as_str()
            {
                *creates.entry(name.to_string()).or_insert(0) += 1;
            }
        }
        creates
    }

    /// The writes `user` made through impersonation, as the audit log recorded them: when the
    /// API server received each (RFC 3339, in order), its verb and resource. Empty without
    /// [`Options::audit`].
    pub fn writes_as(&self, user: &str) -> Vec<(String, String, String)> {
        let text = std::fs::read_to_string(self.audit_log()).unwrap_or_default();
        let mut writes: Vec<(String, String, String)> = text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|event| event["impersonatedUser"]["username"] == user)
            .map(|event| {
                let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
                (
                    text(&event["requestReceivedTimestamp"]),
                    text(&event["verb"]),
                    text(&event["objectRef"]["resource"]),
                )
            })
            .collect();
        writes.sort();
        writes
    }

    async fn wait(
        &self,
        what: &'static str,
        mut check: impl FnMut() -> bool,
    ) -> Result<(), ControlPlaneError> {
        let deadline = Instant::now() + START_LIMIT;
        while !check() {
            if Instant::now() > deadline || self.exited() {
                return Err(ControlPlaneError::NotReady {
                    what,
                    limit: START_LIMIT,
                    log: self.logs(40),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    /// Whether a child already exited.
    fn exited(&self) -> bool {
        let gone = |c: &mut Child| matches!(c.try_wait(), Ok(Some(_)));
        lock(&self.apiserver).as_mut().is_some_and(gone)
            || lock(&self.etcd).as_mut().is_some_and(gone)
    }

    fn etcd_log(&self) -> PathBuf {
        self.dir.join("etcd.log")
    }

    fn apiserver_log(&self) -> PathBuf {
        self.dir.join("kube-apiserver.log")
    }

    /// The CA that signed the serving certificate.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    /// The API server's port.
    pub fn port(&self) -> Option<u16> {
        self.url.rsplit_once(':').and_then(|(_, p)| p.parse().ok())
    }

    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.dir.join("admin.kubeconfig")
    }

    /// Process ids of etcd and kube-apiserver.
    pub fn pids(&self) -> Vec<u32> {
        [&self.etcd, &self.apiserver]
            .into_iter()
            .filter_map(|child| lock(child).as_ref().map(Child::id))
            .collect()
    }

    /// The directory holding the control plane's files (removed by [`ControlPlane::stop`]).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Writes a kubeconfig with the admin token that, with `impersonate`, acts as that user
    /// (for example `system:serviceaccount:browser-controller:browser-controller`).
    pub fn write_kubeconfig(
        &self,
        path: &Path,
        impersonate: Option<&str>,
    ) -> Result<(), ControlPlaneError> {
        self.write_kubeconfig_via(path, &self.url, impersonate)
    }

    /// [`ControlPlane::write_kubeconfig`] reaching the API server at `url` (a proxy in front
    /// of it on loopback: the serving certificate names 127.0.0.1).
    pub fn write_kubeconfig_via(
        &self,
        path: &Path,
        url: &str,
        impersonate: Option<&str>,
    ) -> Result<(), ControlPlaneError> {
        let act_as = impersonate
            .map(|user| format!("    as: \"{user}\"\n"))
            .unwrap_or_default();
        let config = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: e2e\n  cluster:\n    server: {url}\n    certificate-authority: {ca}\ncontexts:\n- name: e2e\n  context:\n    cluster: e2e\n    user: e2e\n    namespace: default\ncurrent-context: e2e\nusers:\n- name: e2e\n  user:\n    token: {ADMIN_TOKEN}\n{act_as}",
            ca = self.dir.join("ca.crt").display(),
        );
        write(path, &config)
    }

    /// An admin client.
    pub async fn client(&self) -> Result<kube::Client, ControlPlaneError> {
        client_from(&self.admin_kubeconfig()).await
    }

    /// The last `lines` lines of each component's log.
    pub fn logs(&self, lines: usize) -> String {
        format!(
            "--- etcd (last {lines} lines) ---\n{}\n--- kube-apiserver (last {lines} lines) ---\n{}",
            tail(&self.etcd_log(), lines),
            tail(&self.apiserver_log(), lines)
        )
    }

    /// Kills and reaps both processes, then removes every file.
    pub fn stop(mut self) {
        self.kill_all();
    }

    fn kill_all(&mut self) {
        // The API server first, so it does not log etcd errors on its way out.
        if let Some(mut apiserver) = self.apiserver_child().take() {
            kill(&mut apiserver);
        }
        if let Some(mut etcd) = lock(&self.etcd).take() {
            kill(&mut etcd);
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.kill_all();
    }
}

/// A client from a kubeconfig file (its current context).
pub async fn client_from(kubeconfig: &Path) -> Result<kube::Client, ControlPlaneError> {
    let err = |e: String| ControlPlaneError::Kubeconfig(e);
    let file = Kubeconfig::read_from(kubeconfig).map_err(|e| err(e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
        .await
        .map_err(|e| err(e.to_string()))?;
    kube::Client::try_from(config).map_err(|e| err(e.to_string()))
}

/// Server-side applies every `.yaml`/`.yml`/`.json` file directly in `dir` (not its
/// subdirectories), in file-name order, then waits until every CustomResourceDefinition among
/// them is Established. This is also the hook for CRD upgrade tests: apply an older CRD set,
/// create objects, then apply `crds/`. Returns `kind/name` of what was applied.
pub async fn apply_dir(
    client: &kube::Client,
    dir: &Path,
) -> Result<Vec<String>, ControlPlaneError> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io(format!("read {}", dir.display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file()
                && p.extension()
                    .is_some_and(|x| x == "yaml" || x == "yml" || x == "json")
        })
        .collect();
    files.sort();
    let mut applied = Vec::new();
    let mut crds = Vec::new();
    for file in &files {
        let shown = file.display().to_string();
        let fail = |message: String| ControlPlaneError::Apply {
            file: shown.clone(),
            message,
        };
        let docs =
            browser_controller::manifest::read_file(file).map_err(|e| fail(e.to_string()))?;
        for doc in docs {
            let id = apply_object(client, &doc).await.map_err(fail)?;
            if doc["kind"] == "CustomResourceDefinition" {
                crds.push(doc["metadata"]["name"].as_str().unwrap_or("").to_string());
            }
            applied.push(id);
        }
    }
    for name in crds {
        wait_established(client, &name).await?;
    }
    Ok(applied)
}

/// Applies CustomResourceDefinitions given as objects (an older set, say) and waits until
/// each is Established and served, as [`apply_dir`] does for files.
pub async fn apply_crds(client: &kube::Client, crds: &[Value]) -> Result<(), ControlPlaneError> {
    for crd in crds {
        let name = crd["metadata"]["name"].as_str().unwrap_or("").to_string();
        apply_object(client, crd)
            .await
            .map_err(|message| ControlPlaneError::Apply {
                file: name.clone(),
                message,
            })?;
    }
    for crd in crds {
        wait_established(client, crd["metadata"]["name"].as_str().unwrap_or("")).await?;
    }
    Ok(())
}

/// Server-side applies one object; returns `kind/name`.
pub async fn apply_object(client: &kube::Client, obj: &Value) -> Result<String, String> {
    let (group, version) = match obj["apiVersion"].as_str().unwrap_or("").split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (
            String::new(),
            obj["apiVersion"].as_str().unwrap_or("").to_string(),
        ),
    };
    let kind = obj["kind"].as_str().unwrap_or("");
    let name = obj["metadata"]["name"].as_str().unwrap_or("");
    let gvk = GroupVersionKind::gvk(&group, &version, kind);
    let (resource, caps) = pinned_kind(client, &gvk)
        .await
        .map_err(|e| format!("{kind}: {e}"))?;
    let api: Api<DynamicObject> = match caps.scope {
        Scope::Cluster => Api::all_with(client.clone(), &resource),
        Scope::Namespaced => {
            let ns = obj["metadata"]["namespace"].as_str().unwrap_or("default");
            Api::namespaced_with(client.clone(), ns, &resource)
        }
    };
    api.patch(
        name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(obj),
    )
    .await
    .map_err(|e| format!("apply {kind}/{name}: {e}"))?;
    Ok(format!("{kind}/{name}"))
}

async fn wait_established(client: &kube::Client, name: &str) -> Result<(), ControlPlaneError> {
    let gvk = GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition");
    let (resource, _) = pinned_kind(client, &gvk)
        .await
        .map_err(|e| ControlPlaneError::Kubeconfig(e.to_string()))?;
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let limit = Duration::from_secs(30);
    let deadline = Instant::now() + limit;
    loop {
        let established = api.get(name).await.ok().is_some_and(|crd| {
            crd.data["status"]["conditions"]
                .as_array()
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Established" && c["status"] == "True")
                })
        });
        // Established means served; discovery (which the operator reads at start) may
        // follow a moment later.
        if established && served(client, &api, name).await {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(ControlPlaneError::NotReady {
                what: "CustomResourceDefinition Established",
                limit,
                log: name.to_string(),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether discovery lists the storage version of the CRD `name`.
async fn served(client: &kube::Client, crds: &Api<DynamicObject>, name: &str) -> bool {
    let Ok(crd) = crds.get(name).await else {
        return false;
    };
    let spec = &crd.data["spec"];
    let Some(version) = spec["versions"]
        .as_array()
        .and_then(|vs| vs.iter().find(|v| v["storage"] == true))
        .and_then(|v| v["name"].as_str())
    else {
        return false;
    };
    let gvk = GroupVersionKind::gvk(
        spec["group"].as_str().unwrap_or(""),
        version,
        spec["names"]["kind"].as_str().unwrap_or(""),
    );
    pinned_kind(client, &gvk).await.is_ok()
}
