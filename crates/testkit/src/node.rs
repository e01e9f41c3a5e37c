//! A real node beside a [`ControlPlane`]: containerd with a CNI bridge, the images of
//! [`images`] imported, a kubelet registered with the API server, kube-scheduler to bind pods
//! and kube-controller-manager for DaemonSets, Deployments and what pods with a ServiceAccount
//! token need. With a control plane that serves pods ([`controlplane::Options::pod_address`]),
//! a nat rule takes the `kubernetes` Service's address to the API server, as kube-proxy would. Binaries come from `$E2E_NODE_ASSETS` (kubelet,
//! kube-scheduler, kube-controller-manager); containerd, runc and the CNI plugins from the
//! machine (Debian's `containerd`, `runc`, `containernetworking-plugins`, and
//! `busybox-static` for the images).
//!
//! It changes the host while it runs and undoes it when it stops (also when a test fails):
//! two sysctls (`net.ipv4.ip_forward`, `net.bridge.bridge-nf-call-iptables`) and those the
//! kubelet sets, a bridge, iptables chains of the kubelet and the CNI plugins, cgroups under
//! `kubepods`, network namespaces and `/var/log/pods` entries of its pods, containerd's shims.
//! Pods get IPs from [`POD_CIDR`], reachable from the host. It needs root, cgroup v1 with the
//! cgroupfs driver (as on this machine; a container without `CAP_SYS_RESOURCE` is handled by
//! containerd's `restrict_oom_score_adj`), and overlayfs.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use kube::core::ApiResource;

use super::controlplane::{self, ControlPlane};
use super::host::{TempDir, free_port, kill, wait_exit};
use super::images::{self, ImageSet};

/// The folder of the node's binaries.
pub const NODE_ASSETS: &str = "E2E_NODE_ASSETS";
/// The node's name.
pub const NODE_NAME: &str = "e2e-node";
/// Pod addresses, on the bridge [`BRIDGE`].
pub const POD_CIDR: &str = "10.89.0.0/16";
const BRIDGE: &str = "bce2e0";
/// The nat chain standing in for kube-proxy's (see [`Node::route_service`]).
const SERVICES_CHAIN: &str = "E2E-SERVICES";
const CNI_BIN: &str = "/usr/lib/cni";
const NETNS: &str = "/var/run/netns";
const POD_LOGS: &str = "/var/log/pods";
/// The shims of containerd 1.6 keep their sockets here, whatever its state folder.
const SHIM_SOCKETS: &str = "/run/containerd/s";
/// Sysctls the node sets, and those the kubelet sets by itself.
const SYSCTLS: [(&str, Option<&str>); 8] = [
    ("net.ipv4.ip_forward", Some("1")),
    ("net.bridge.bridge-nf-call-iptables", Some("1")),
    ("vm.overcommit_memory", None),
    ("vm.panic_on_oom", None),
    ("kernel.panic", None),
    ("kernel.panic_on_oops", None),
    ("kernel.keys.root_maxkeys", None),
    ("kernel.keys.root_maxbytes", None),
];
const READY_LIMIT: Duration = Duration::from_secs(120);

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("{0}")]
    Missing(String),
    #[error("{what}: {detail}")]
    Failed { what: String, detail: String },
    #[error(transparent)]
    Images(#[from] images::ImageError),
}

fn failed(what: impl Into<String>, detail: impl ToString) -> NodeError {
    NodeError::Failed {
        what: what.into(),
        detail: detail.to_string(),
    }
}

/// The node's binaries.
#[derive(Clone, Debug)]
pub struct NodeAssets {
    pub dir: PathBuf,
    pub kubelet: PathBuf,
    pub kube_scheduler: PathBuf,
    pub kube_controller_manager: PathBuf,
}

impl NodeAssets {
    /// `None` when [`NODE_ASSETS`] is not set; an error naming what is missing otherwise.
    pub fn from_env() -> Result<Option<Self>, NodeError> {
        let Some(dir) = std::env::var_os(NODE_ASSETS).filter(|d| !d.is_empty()) else {
            return Ok(None);
        };
        let dir = PathBuf::from(dir);
        let find = |name: &str| {
            let path = dir.join(name);
            path.is_file().then_some(path).ok_or_else(|| {
                NodeError::Missing(format!(
                    "{name} not found in ${NODE_ASSETS} ({})",
                    dir.display()
                ))
            })
        };
        Ok(Some(Self {
            kubelet: find("kubelet")?,
            kube_scheduler: find("kube-scheduler")?,
            kube_controller_manager: find("kube-controller-manager")?,
            dir,
        }))
    }
}

/// What this machine lacks for a node, if anything.
pub fn missing_prerequisites() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root".into());
    }
    let needed = [
        "/usr/bin/containerd",
        "/usr/bin/ctr",
        "/usr/sbin/runc",
        "/bin/busybox",
        "/usr/sbin/debootstrap",
        "/usr/sbin/iptables",
    ]
    .into_iter()
    .map(PathBuf::from)
    .chain(
        ["bridge", "host-local", "loopback", "portmap"]
            .iter()
            .map(|p| Path::new(CNI_BIN).join(p)),
    );
    let missing: Vec<String> = needed
        .filter(|p| !p.exists())
        .map(|p| p.display().to_string())
        .collect();
    if !missing.is_empty() {
        return Some(format!("missing {}", missing.join(", ")));
    }
    let filesystems = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
    if !filesystems.split_whitespace().any(|f| f == "overlay") {
        return Some("no overlayfs".into());
    }
    for controller in ["cpu", "cpuacct", "cpuset", "memory", "pids"] {
        if !Path::new("/sys/fs/cgroup").join(controller).is_dir() {
            return Some(format!("cgroup v1 controller {controller} not mounted"));
        }
    }
    None
}

/// The address of the host on its default route, where the kubelet says it is and where
/// pods reach host processes.
pub fn host_ip() -> String {
    Command::new("ip")
        .args(["-4", "route", "get", "1.1.1.1"])
        .output()
        .ok()
        .and_then(|out| {
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            let mut words = text.split_whitespace();
            words.find(|w| *w == "src")?;
            words.next().map(str::to_string)
        })
        .unwrap_or_else(|| "127.0.0.1".into())
}

fn sysctl_path(key: &str) -> PathBuf {
    Path::new("/proc/sys").join(key.replace('.', "/"))
}

fn entries(dir: &str) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .map(|it| {
            it.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// A running node.
pub struct Node {
    // Declared before `dir`: the processes go before their files.
    kubelet: Option<Child>,
    scheduler: Option<Child>,
    controller_manager: Option<Child>,
    containerd: Option<Child>,
    socket: PathBuf,
    kubeconfig: PathBuf,
    /// Sysctl values from before the node.
    sysctls: Vec<(PathBuf, String)>,
    netns_before: BTreeSet<String>,
    pod_logs_before: BTreeSet<String>,
    dir: TempDir,
}

impl Node {
    /// Starts containerd, imports `images`, starts the scheduler, the controller manager and
    /// the kubelet against `plane`, and waits for the node to be Ready.
    pub async fn start(
        assets: &NodeAssets,
        plane: &ControlPlane,
        images: &ImageSet,
    ) -> Result<Self, NodeError> {
        let dir = TempDir::new("node");
        let mut node = Self {
            kubelet: None,
            scheduler: None,
            controller_manager: None,
            containerd: None,
            socket: dir.join("containerd.sock"),
            kubeconfig: plane.admin_kubeconfig(),
            sysctls: Vec::new(),
            netns_before: entries(NETNS),
            pod_logs_before: entries(POD_LOGS),
            dir,
        };
        node.set_sysctls()?;
        node.write_config()?;
        if let (Some(address), Some(port)) = (plane.pod_address, plane.port()) {
            node.route_service(address, port)?;
        }
        node.containerd = Some(node.spawn(
            "/usr/bin/containerd",
            &["--config".into(), node.path("containerd.toml")],
        )?);
        node.wait("containerd", || node.ctr(&["version"]).is_ok())?;
        for tarball in [&images.busybox, &images.pause, &images.chromium] {
            node.ctr(&["images", "import", &tarball.display().to_string()])?;
        }
        let admin = node.kubeconfig.display().to_string();
        // The scheduler's and the controller manager's flags in common: the admin's
        // credentials, serving on loopback, alone (no election).
        let component = || {
            vec![
                format!("--kubeconfig={admin}"),
                format!("--authentication-kubeconfig={admin}"),
                format!("--authorization-kubeconfig={admin}"),
                "--bind-address=127.0.0.1".to_string(),
                format!("--secure-port={}", free_port()),
                "--leader-elect=false".to_string(),
            ]
        };
        node.scheduler =
            Some(node.spawn(&assets.kube_scheduler.display().to_string(), &component())?);
        let mut controller_flags = component();
        controller_flags.extend([
            "--use-service-account-credentials=false".to_string(),
            // DaemonSets, the garbage collector (a deleted DaemonSet's pods go), the node
            // lifecycle controller that lifts the not-ready taint the kubelet registers the
            // node with; for an operator installed as a Deployment: Deployments, ReplicaSets,
            // PodDisruptionBudgets (what an eviction consults), the default ServiceAccounts and
            // the CA's ConfigMap that its pods' token volumes need; ResourceQuotas counted, for
            // the capacity queue against a real node.
            "--controllers=daemonset,garbagecollector,nodelifecycle,deployment,replicaset,disruption,serviceaccount,root-ca-cert-publisher,resourcequota".to_string(),
            format!("--root-ca-file={}", plane.ca_file().display()),
        ]);
        node.controller_manager = Some(node.spawn(
            &assets.kube_controller_manager.display().to_string(),
            &controller_flags,
        )?);
        let client = plane
            .client()
            .await
            .map_err(|e| failed("admin client", e))?;
        // A Node of an earlier run would still say Ready.
        let nodes: Api<DynamicObject> = Api::all_with(
            client.clone(),
            &ApiResource::erase::<k8s_openapi::api::core::v1::Node>(&()),
        );
        let _ = nodes.delete(NODE_NAME, &DeleteParams::default()).await;
        let ip = host_ip();
        node.kubelet = Some(node.spawn(
            &assets.kubelet.display().to_string(),
            &[
                format!("--config={}", node.path("kubelet.yaml")),
                format!("--kubeconfig={admin}"),
                "--container-runtime=remote".into(),
                format!(
                    "--container-runtime-endpoint=unix://{}",
                    node.socket.display()
                ),
                format!("--pod-infra-container-image={}", images::PAUSE),
                format!("--root-dir={}", node.path("kubelet")),
                format!("--cert-dir={}", node.path("kubelet/pki")),
                format!("--hostname-override={NODE_NAME}"),
                format!("--node-ip={ip}"),
                "--v=1".into(),
            ],
        )?);
        let deadline = Instant::now() + READY_LIMIT;
        loop {
            let ready = nodes
                .get_opt(NODE_NAME)
                .await
                .ok()
                .flatten()
                .is_some_and(|n| {
                    n.data["status"]["conditions"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                });
            if ready {
                return Ok(node);
            }
            if Instant::now() > deadline {
                return Err(failed(
                    "node Ready",
                    format!("not within {READY_LIMIT:?}:\n{}", node.logs(30)),
                ));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Imports the image tarball at `tarball` (as `images::pack` makes them) into the node's
    /// containerd, for pods that never pull.
    pub fn import(&self, tarball: &Path) -> Result<(), NodeError> {
        self.ctr(&["images", "import", &tarball.display().to_string()])
            .map(drop)
    }

    /// Tags the imported image `image` as `tag` too, as if pulled under that name.
    pub fn tag(&self, image: &str, tag: &str) -> Result<(), NodeError> {
        self.ctr(&["images", "tag", "--force", image, tag])
            .map(drop)
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    fn spawn(&self, binary: &str, args: &[String]) -> Result<Child, NodeError> {
        let name = Path::new(binary)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        controlplane::spawn(
            Path::new(binary),
            args,
            &self.dir.join(&format!("{name}.log")),
        )
        .map_err(|e| failed(format!("start {name}"), e))
    }

    /// What kube-proxy would do for the `kubernetes` Service, the one Service pods here use:
    /// its address leads to the API server's `address:port` (in-cluster clients connect to
    /// `KUBERNETES_SERVICE_HOST`, which the kubelet sets to it).
    fn route_service(&self, address: std::net::IpAddr, port: u16) -> Result<(), NodeError> {
        let iptables = |args: &[&str]| {
            let out = Command::new("iptables")
                .args(["-w", "-t", "nat"])
                .args(args)
                .output()
                .map_err(|e| failed("iptables", e))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(failed(
                    format!("iptables {}", args.join(" ")),
                    String::from_utf8_lossy(&out.stderr).trim().to_string(),
                ))
            }
        };
        iptables(&["-N", SERVICES_CHAIN])?;
        iptables(&["-A", "PREROUTING", "-j", SERVICES_CHAIN])?;
        iptables(&["-A", "OUTPUT", "-j", SERVICES_CHAIN])?;
        iptables(&[
            "-A",
            SERVICES_CHAIN,
            "-d",
            &format!("{}/32", controlplane::SERVICE_ADDRESS),
            "-p",
            "tcp",
            "--dport",
            "443",
            "-j",
            "DNAT",
            "--to-destination",
            &format!("{address}:{port}"),
        ])
    }

    /// `ctr` on this node's containerd, in the CRI namespace.
    fn ctr(&self, args: &[&str]) -> Result<String, NodeError> {
        let out = Command::new("/usr/bin/ctr")
            .arg("--address")
            .arg(&self.socket)
            .args(["-n", "k8s.io"])
            .args(args)
            .output()
            .map_err(|e| failed("ctr", e))?;
        if !out.status.success() {
            return Err(failed(
                format!("ctr {}", args.join(" ")),
                String::from_utf8_lossy(&out.stderr).trim().to_string(),
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn wait(&self, what: &str, check: impl Fn() -> bool) -> Result<(), NodeError> {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !check() {
            if Instant::now() > deadline {
                return Err(failed(what, format!("not ready:\n{}", self.logs(30))));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(())
    }

    fn set_sysctls(&mut self) -> Result<(), NodeError> {
        for (key, value) in SYSCTLS {
            let path = sysctl_path(key);
            let Ok(original) = std::fs::read_to_string(&path) else {
                continue;
            };
            self.sysctls
                .push((path.clone(), original.trim().to_string()));
            if let Some(value) = value {
                std::fs::write(&path, value).map_err(|e| failed(format!("sysctl {key}"), e))?;
            }
        }
        Ok(())
    }

    fn write_config(&self) -> Result<(), NodeError> {
        let write = |name: &str, text: String| {
            std::fs::write(self.dir.join(name), text).map_err(|e| failed(name.to_string(), e))
        };
        for folder in ["net.d", "containerd", "cni-ipam", "kubelet/pki"] {
            std::fs::create_dir_all(self.dir.join(folder)).map_err(|e| failed(folder, e))?;
        }
        let socket = self.socket.display();
        write(
            "containerd.toml",
            format!(
                r#"version = 2
root = "{root}"
state = "{state}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = "{socket}"
[ttrpc]
  address = "{socket}.ttrpc"
[debug]
  address = "{socket}.debug"
[plugins."io.containerd.internal.v1.opt"]
  path = "{opt}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  # Without CAP_SYS_RESOURCE runc cannot lower oom_score_adj below containerd's own.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{netd}"
    max_conf_num = 1
"#,
                root = self.path("containerd/root"),
                state = self.path("containerd/state"),
                opt = self.path("containerd/opt"),
                sandbox = images::PAUSE,
                netd = self.path("net.d"),
            ),
        )?;
        write(
            "net.d/10-e2e.conflist",
            serde_json::json!({
                "cniVersion": "0.4.0",
                "name": "e2e",
                "plugins": [
                    {"type": "bridge", "bridge": BRIDGE, "isGateway": true, "ipMasq": true, "hairpinMode": true,
                     "ipam": {"type": "host-local", "dataDir": self.path("cni-ipam"),
                              "ranges": [[{"subnet": POD_CIDR}]], "routes": [{"dst": "0.0.0.0/0"}]}},
                    {"type": "portmap", "capabilities": {"portMappings": true}},
                ],
            })
            .to_string(),
        )?;
        write(
            "kubelet.yaml",
            format!(
                "apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: {port}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: {healthz}
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: true}}
authorization: {{mode: Webhook}}
cgroupDriver: cgroupfs
cgroupsPerQOS: true
enforceNodeAllocatable: [pods]
failSwapOn: false
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
volumePluginDir: {plugins}
# Nothing can be pulled again: images are never collected.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {{memory.available: 100Mi, nodefs.available: 2%, imagefs.available: 2%, nodefs.inodesFree: 2%}}
serializeImagePulls: false
maxPods: 110
nodeStatusReportFrequency: 10s
",
                port = free_port(),
                healthz = free_port(),
                plugins = self.path("kubelet-plugins"),
            ),
        )
    }

    /// The last `lines` lines of each component's log.
    pub fn logs(&self, lines: usize) -> String {
        [
            "containerd",
            "kubelet",
            "kube-scheduler",
            "kube-controller-manager",
        ]
        .iter()
        .map(|name| {
            format!(
                "--- {name} (last {lines} lines) ---\n{}",
                super::host::tail(&self.dir.join(&format!("{name}.log")), lines)
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
    }

    /// Deletes every pod while the kubelet still runs (it unmounts volumes and frees the pod
    /// network), then stops everything and undoes what the node changed on the host.
    pub async fn stop(mut self) {
        if let Ok(client) = controlplane::client_from(&self.kubeconfig).await {
            let resource = ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&());
            let all: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
            let pods = all.list(&ListParams::default()).await.map(|l| l.items);
            for pod in pods.unwrap_or_default() {
                if let (Some(ns), Some(name)) = (&pod.metadata.namespace, &pod.metadata.name) {
                    let api: Api<DynamicObject> =
                        Api::namespaced_with(client.clone(), ns, &resource);
                    let _ = api
                        .delete(name, &DeleteParams::default().grace_period(1))
                        .await;
                }
            }
            let deadline = Instant::now() + Duration::from_secs(60);
            while Instant::now() < deadline
                && all
                    .list(&ListParams::default())
                    .await
                    .is_ok_and(|l| !l.items.is_empty())
            {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        self.halt();
    }

    /// Stops every process and undoes the host changes; safe to call twice.
    fn halt(&mut self) {
        for (child, grace) in [
            (&mut self.kubelet, Duration::from_secs(20)),
            (&mut self.scheduler, Duration::from_secs(2)),
            (&mut self.controller_manager, Duration::from_secs(5)),
        ] {
            if let Some(mut child) = child.take() {
                terminate(&mut child, grace);
            }
        }
        if self.containerd.is_some() {
            if let Ok(tasks) = self.ctr(&["tasks", "ls", "-q"]) {
                for task in tasks.lines() {
                    let _ = self.ctr(&["tasks", "kill", "-s", "SIGKILL", task]);
                }
                std::thread::sleep(Duration::from_secs(1));
                for task in tasks.lines() {
                    let _ = self.ctr(&["tasks", "delete", "-f", task]);
                }
            }
            if let Ok(containers) = self.ctr(&["containers", "ls", "-q"]) {
                for container in containers.lines() {
                    let _ = self.ctr(&["containers", "delete", container]);
                }
            }
        }
        if let Some(mut containerd) = self.containerd.take() {
            terminate(&mut containerd, Duration::from_secs(20));
        }
        self.kill_shims();
        self.unmount_leftovers();
        for netns in entries(NETNS).difference(&self.netns_before) {
            let path = Path::new(NETNS).join(netns);
            let _ = Command::new("umount").arg(&path).status();
            let _ = std::fs::remove_file(&path);
        }
        remove_kubepods_cgroups();
        let _ = Command::new("ip").args(["link", "del", BRIDGE]).status();
        remove_iptables_chains();
        for (path, value) in self.sysctls.drain(..) {
            let _ = std::fs::write(path, value);
        }
        for entry in entries(POD_LOGS).difference(&self.pod_logs_before) {
            let _ = std::fs::remove_dir_all(Path::new(POD_LOGS).join(entry));
        }
        if self.pod_logs_before.is_empty() {
            let _ = std::fs::remove_dir(POD_LOGS);
        }
    }

    /// Shims of this node's containerd (their command line names its socket).
    fn kill_shims(&self) {
        let socket = self.socket.display().to_string();
        for pid in entries("/proc")
            .into_iter()
            .filter(|p| p.bytes().all(|b| b.is_ascii_digit()))
        {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if cmdline.contains("containerd-shim") && cmdline.contains(&socket) {
                let _ = Command::new("kill").args(["-KILL", &pid]).status();
            }
        }
        let _ = std::fs::remove_dir(SHIM_SOCKETS);
    }

    fn unmount_leftovers(&self) {
        let ours = self.dir.path().display().to_string();
        let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
        let mut points: Vec<&str> = mounts
            .lines()
            .filter_map(|l| l.split_whitespace().nth(1))
            .filter(|m| m.starts_with(&ours) || m.starts_with("/run/containerd/io.containerd"))
            .collect();
        points.sort_unstable_by(|a, b| b.cmp(a));
        for point in points {
            let _ = Command::new("umount").args(["-l", point]).status();
        }
    }
}

/// SIGTERM, then SIGKILL after `grace`.
fn terminate(child: &mut Child, grace: Duration) {
    // SAFETY: kill with a valid signal on our own child.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    if wait_exit(child, grace).is_none() {
        kill(child);
    }
}

/// Empty cgroups the kubelet made (`kubepods` in each v1 hierarchy), deepest first.
fn remove_kubepods_cgroups() {
    for hierarchy in entries("/sys/fs/cgroup") {
        let root = Path::new("/sys/fs/cgroup").join(hierarchy).join("kubepods");
        if root.is_dir() {
            let _ = Command::new("find")
                .arg(&root)
                .args(["-depth", "-type", "d", "-exec", "rmdir", "{}", ";"])
                .status();
        }
    }
}

/// The chains the kubelet and the CNI plugins add, with the rules that jump to them.
fn remove_iptables_chains() {
    let ours = |chain: &str| {
        chain.starts_with("CNI-")
            || chain == SERVICES_CHAIN
            || [
                "KUBE-FIREWALL",
                "KUBE-POSTROUTING",
                "KUBE-KUBELET-CANARY",
                "KUBE-MARK-DROP",
                "KUBE-MARK-MASQ",
            ]
            .contains(&chain)
    };
    for table in ["filter", "nat", "mangle"] {
        let Ok(out) = Command::new("iptables")
            .args(["-w", "-t", table, "-S"])
            .output()
        else {
            return;
        };
        let rules = String::from_utf8_lossy(&out.stdout).into_owned();
        for rule in rules.lines() {
            let words: Vec<&str> = rule.split_whitespace().collect();
            let jumps_to_ours = words.windows(2).any(|w| w[0] == "-j" && ours(w[1]));
            let in_builtin = words.get(1).is_some_and(|c| !ours(c));
            if let Some(rest) = rule.strip_prefix("-A ")
                && jumps_to_ours
                && in_builtin
            {
                // The rule as `-S` prints it is quoted for a shell (comments hold spaces).
                let _ = Command::new("sh")
                    .arg("-c")
                    .arg(format!("iptables -w -t {table} -D {rest}"))
                    .status();
            }
        }
        let chains: Vec<&str> = rules
            .lines()
            .filter_map(|l| l.strip_prefix("-N "))
            .filter(|c| ours(c))
            .collect();
        for flag in ["-F", "-X"] {
            for chain in &chains {
                let _ = Command::new("iptables")
                    .args(["-w", "-t", table, flag, chain])
                    .status();
            }
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.halt();
    }
}
