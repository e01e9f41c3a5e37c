//! Network partitions between the operator and the API server: connections stay open while
//! nothing passes. On the double, a proxy in front of it goes silent; on the control plane,
//! the packets of the operator (run as its own uid) are dropped both ways by the packet
//! filter. Everything else (the test's own client, the kubelet simulator) keeps its link.
//! Transitions are read from the recorded watch history, with the times they were seen.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject};
use serde_json::{Value, json};

use crate::support::controlplane;
use crate::support::host;
use crate::support::partition::{PacketDrop, SilentProxy, packet_filter_available};
use crate::{Ctx, Kind, Process, Seen, operator_user, poll, probe_readiness, resource};

/// The uid the partitioned operator runs as on the control plane (`nobody`).
const NOBODY: u32 = 65534;

enum Cut {
    Proxy(SilentProxy),
    Packets(PacketDrop),
}

/// The operator's way to the API server, which the scenario cuts and heals.
pub(crate) struct Partition {
    pub(crate) kubeconfig: PathBuf,
    pub(crate) process: Process,
    cut: Cut,
}

impl Partition {
    /// `None` (said why) where the backend cannot be partitioned here.
    pub(crate) async fn new(cx: &Ctx, mark: u32) -> Option<Self> {
        match cx.be.kind {
            Kind::Double => {
                let (_, served) = cx.be.double.as_ref()?;
                let proxy = SilentProxy::start(served.addr())
                    .await
                    .expect("the partition proxy starts");
                let kubeconfig = cx.be.dir.join(&format!("{}.partitioned.kubeconfig", cx.ns));
                served
                    .write_kubeconfig_via(&kubeconfig, &proxy.url(), Some(&operator_user()))
                    .expect("kubeconfig written");
                Some(Self {
                    kubeconfig,
                    process: Process::default(),
                    cut: Cut::Proxy(proxy),
                })
            }
            Kind::ControlPlane => {
                if let Err(why) = packet_filter_available() {
                    println!(
                        "    {}: no packet filter here ({why}): scenario skipped",
                        cx.ns
                    );
                    return None;
                }
                let plane = cx.be.plane.as_ref()?;
                let port = plane
                    .url
                    .rsplit(':')
                    .next()
                    .and_then(|p| p.parse().ok())
                    .expect("the API server's port");
                let drop = PacketDrop::new(NOBODY, port, mark).expect("the marking rule");
                Some(Self {
                    kubeconfig: cx.be.operator_kubeconfig.clone(),
                    process: Process {
                        uid: Some(NOBODY),
                        env: Vec::new(),
                    },
                    cut: Cut::Packets(drop),
                })
            }
            Kind::Cluster | Kind::Node => {
                println!(
                    "    {}: only the double and the bare control plane are partitioned: scenario skipped",
                    cx.ns
                );
                None
            }
        }
    }

    pub(crate) fn cut(&mut self) {
        match &mut self.cut {
            Cut::Proxy(proxy) => proxy.cut(),
            Cut::Packets(drop) => drop.cut().expect("packets dropped"),
        }
    }

    pub(crate) fn heal(&mut self) {
        match &mut self.cut {
            Cut::Proxy(proxy) => proxy.heal(),
            Cut::Packets(drop) => drop.heal().expect("packets flow again"),
        }
    }

    /// The same process settings with `POD_NAME` (the replica's identity in the Lease).
    fn process_named(&self, pod_name: &str) -> Process {
        Process {
            uid: self.process.uid,
            env: vec![("POD_NAME".into(), pod_name.into())],
        }
    }
}

/// How long the operator's link is cut: the 30 s on a real API server; the double
/// has no kernel timers to outwait, so 10 s show the same.
pub(crate) fn cut_length(cx: &Ctx) -> Duration {
    if cx.be.kind == Kind::Double {
        Duration::from_secs(10)
    } else {
        Duration::from_secs(30)
    }
}

/// The latest Browser and pod of one name as the history had them.
#[derive(Default)]
pub(crate) struct Latest {
    browser: Option<Value>,
    browser_deleted: bool,
    pod: Option<Value>,
    pod_deleted: bool,
}

impl Latest {
    fn apply(&mut self, seen: &Seen) {
        match seen.kind {
            "Browser" => {
                self.browser = Some(seen.object.clone());
                self.browser_deleted = seen.deleted;
            }
            _ => {
                self.pod = Some(seen.object.clone());
                self.pod_deleted = seen.deleted;
            }
        }
    }

    /// Has a status (or is gone).
    fn has_status(&self) -> bool {
        self.browser_deleted
            || self
                .browser
                .as_ref()
                .is_some_and(|b| b["status"]["phase"].is_string())
    }

    /// Settled and true to its pod: gone, failed with a reason, succeeded, or Running with
    /// its IP while its pod runs with no container ended.
    pub(crate) fn settled(&self) -> bool {
        if self.browser_deleted {
            return true;
        }
        let Some(status) = self.browser.as_ref().map(|b| &b["status"]) else {
            return false;
        };
        match status["phase"].as_str() {
            Some("Failed") => status["reason"].is_string(),
            Some("Succeeded") => true,
            Some("Running") => {
                let pod_runs = !self.pod_deleted
                    && self.pod.as_ref().is_some_and(|p| {
                        p["status"]["phase"] == "Running"
                            && !p["status"]["containerStatuses"]
                                .as_array()
                                .into_iter()
                                .flatten()
                                .any(|c| c["state"]["terminated"].is_object())
                    });
                status["podIP"].is_string() && pod_runs
            }
            _ => false,
        }
    }
}

/// The first moment at or after `from` when `check` held for every one of `names` at once, by
/// the recorded history.
pub(crate) fn first_moment_all(
    cx: &Ctx,
    names: &[String],
    from: Instant,
    check: impl Fn(&Latest) -> bool,
) -> Option<Instant> {
    let mut history: Vec<Seen> = cx.seen.lock().unwrap().clone();
    history.sort_by_key(|s| s.at);
    let mut latest: BTreeMap<String, Latest> = names
        .iter()
        .map(|n| (n.clone(), Latest::default()))
        .collect();
    let all = |latest: &BTreeMap<String, Latest>| latest.values().all(&check);
    let mut events = history.iter().peekable();
    while let Some(seen) = events.next_if(|s| s.at < from) {
        apply(&mut latest, seen);
    }
    if all(&latest) {
        return Some(from);
    }
    for seen in events {
        apply(&mut latest, seen);
        if all(&latest) {
            return Some(seen.at);
        }
    }
    None
}

fn apply(latest: &mut BTreeMap<String, Latest>, seen: &Seen) {
    if let Some(name) = seen.object["metadata"]["name"].as_str()
        && let Some(entry) = latest.get_mut(name)
    {
        entry.apply(seen);
    }
}

/// A burst of 100 Browsers (a third end their sessions on their own), an operator SIGKILL and
/// restart, then the operator's link cut (30 s on a real API server) while sessions end and
/// ten more Browsers are created: `/readyz` is not ready while the link is lost, every
/// Browser has a status within 5 s of the heal and is settled within 8 s (the pod's own start
/// on top), each got at most one pod (the watch spans the partition; the API server's
/// records agree), and nothing is left once all are deleted.
pub(crate) async fn partition_of_the_operator_during_a_burst_one_pod_each_and_recovery_within_seconds(
    cx: Arc<Ctx>,
) {
    const STATUS_BOUND: Duration = Duration::from_secs(5);
    const SETTLE_BOUND: Duration = Duration::from_secs(8);
    /// Two probes without an answer (each waits 2 s) lose the link; then `/readyz` fails.
    const DETECTION: Duration = Duration::from_secs(6);
    let Some(mut partition) = Partition::new(&cx, 0x4e21).await else {
        return;
    };
    let probe = host::free_port();
    let health = format!("--health-probe-bind-address=127.0.0.1:{probe}");
    let start = || {
        let child = cx.spawn_operator(&partition.kubeconfig, &partition.process, &[&health]);
        let previous = cx.operator.lock().unwrap().replace(child);
        assert!(previous.is_none(), "one operator at a time");
    };
    start();
    cx.chrome_config().await;
    // The operator serves no Browser of a config it has not seen yet.
    cx.until_config("chrome", "Valid", "True").await;
    let names = cx.burst("p", 100).await;
    let (every, limit) = (Duration::from_millis(100), Duration::from_secs(120));
    cx.until_within(limit, every, "20 pods", |s| s.pods.len() >= 20)
        .await;
    cx.kill_operator();
    start();
    cx.until_within(limit, every, "the restarted operator ready", |_| {
        host::http_get(probe, "/readyz").is_some_and(|(code, _)| code == 200)
    })
    .await;
    let (probing, prober) = probe_readiness(probe);

    let cut_at = Instant::now();
    partition.cut();
    let late: Vec<String> = (0..10).map(|i| format!("late{i}")).collect();
    cx.create_browsers(&late).await;
    tokio::time::sleep_until((cut_at + cut_length(&cx)).into()).await;
    partition.heal();
    let healed = Instant::now();

    let all: Vec<String> = names.iter().chain(&late).cloned().collect();
    // Each Browser's catching up: the first moment from the heal on when it was true to the
    // cluster (sessions keep ending meanwhile, each followed by its own transitions).
    let caught_up = |check: fn(&Latest) -> bool| -> Result<Duration, String> {
        let mut latest = Duration::ZERO;
        for name in &all {
            match first_moment_all(&cx, std::slice::from_ref(name), healed, check) {
                Some(at) => latest = latest.max(at - healed),
                None => return Err(format!("{name}: {:#?}", cx.seen_statuses(name))),
            }
        }
        Ok(latest)
    };
    let settled = poll(SETTLE_BOUND + Duration::from_secs(2), every, || async {
        caught_up(Latest::settled).map_err(|e| format!("every Browser settled; not yet {e}"))
    })
    .await;
    let statused = caught_up(Latest::has_status).expect("statuses before settling");
    // Readiness may come a little after the Browsers settled: the prober runs until the bound
    // has passed, or it saw the operator ready.
    while Instant::now() < healed + STATUS_BOUND
        && host::http_get(probe, "/readyz").is_none_or(|(code, _)| code != 200)
    {
        tokio::time::sleep(every).await;
    }
    probing.store(false, Ordering::Relaxed);
    let samples = prober.await.expect("readiness prober");
    println!(
        "    link cut {:.0}s; statuses {:.1}s and settled {:.1}s after the heal",
        (healed - cut_at).as_secs_f64(),
        statused.as_secs_f64(),
        settled.as_secs_f64()
    );
    assert!(
        statused <= STATUS_BOUND,
        "statuses {statused:?} after the heal"
    );
    assert!(
        settled <= SETTLE_BOUND,
        "settled {settled:?} after the heal"
    );

    let while_cut: Vec<Option<u16>> = samples
        .iter()
        .filter(|(t, _)| *t > cut_at + DETECTION && *t < healed)
        .map(|(_, code)| *code)
        .collect();
    assert!(
        !while_cut.is_empty() && while_cut.iter().all(|c| *c == Some(503)),
        "/readyz while the link was cut: {while_cut:?}"
    );
    let not_ready_from = samples
        .iter()
        .find(|(t, code)| *t > cut_at && *code == Some(503))
        .map(|(t, _)| *t - cut_at);
    let ready_again = samples
        .iter()
        .find(|(t, code)| *t >= healed && *code == Some(200))
        .map(|(t, _)| *t - healed);
    println!(
        "    /readyz not ready {:.1}s into the cut, ready {:.1}s after the heal",
        not_ready_from.map_or(f64::NAN, |d| d.as_secs_f64()),
        ready_again.map_or(f64::NAN, |d| d.as_secs_f64())
    );
    assert!(
        ready_again.is_some_and(|after| after <= STATUS_BOUND),
        "/readyz ready again {ready_again:?} after the heal"
    );

    for name in &all {
        assert!(cx.pod_uids(name).len() <= 1, "{name}: one pod at most");
    }
    if let Some(creates) = cx.be.pod_creates(&cx.ns) {
        let twice: Vec<_> = creates.iter().filter(|(_, n)| **n > 1).collect();
        assert!(twice.is_empty(), "pods created twice: {twice:?}");
    }
    cx.delete_everything().await;
}

/// The identity of the second replica in the leader scenario.
const STANDBY: &str = "e2e-standby";

/// The Lease rules of `rbac/leader-election.yaml` in the scenario's namespace for both
/// replicas' identities, and the operator's ClusterRole for the standby's.
async fn grant_replicas(cx: &Ctx) {
    let objects = [
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": format!("{STANDBY}-{}", cx.ns)},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "browser-controller"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": STANDBY}],
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "leases", "namespace": cx.ns},
            "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "patch"]}],
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "leases", "namespace": cx.ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "leases"},
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": operator_user()},
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": STANDBY},
            ],
        }),
    ];
    for object in objects {
        controlplane::apply_object(&cx.be.client, &object)
            .await
            .expect("RBAC for the replicas");
    }
}

/// A replica process, killed when the scenario ends however it ends.
struct Replica(std::process::Child);

impl Drop for Replica {
    fn drop(&mut self) {
        host::kill(&mut self.0);
    }
}

/// The holder of the scenario's Lease, if any.
async fn lease_holder(cx: &Ctx) -> Option<String> {
    let leases: Api<DynamicObject> = Api::namespaced_with(
        cx.be.client.clone(),
        &cx.ns,
        &resource("coordination.k8s.io", "Lease", "leases"),
    );
    let lease = leases.get_opt("controller.selenosis.io").await.ok()??;
    lease.data["spec"]["holderIdentity"]
        .as_str()
        .map(String::from)
}

/// Writes the API server received from `user`, in the order it received them (verb and
/// resource; access reviews, which change nothing, aside); `None` on an existing cluster.
fn writes_by(cx: &Ctx, user: &str) -> Option<Vec<(String, String)>> {
    if let Some((server, _)) = &cx.be.double {
        return Some(
            server
                .requests()
                .into_iter()
                .enumerate()
                .filter(|(_, r)| {
                    r.user.as_deref() == Some(user)
                        && r.is_write()
                        && !r.dry_run
                        && r.resource != "selfsubjectaccessreviews"
                })
                .map(|(i, r)| (format!("{i:09}"), format!("{} {}", r.verb, r.resource)))
                .collect(),
        );
    }
    cx.be.plane.as_ref().map(|plane| {
        plane
            .writes_as(user)
            .into_iter()
            .map(|(at, verb, resource)| (at, format!("{verb} {resource}")))
            .collect()
    })
}

/// Two replicas with leader election; the leader's link is cut. It stops (its Lease
/// unrenewed for the renew deadline) before the standby takes over (once the Lease went
/// unrenewed for its duration), the standby serves the Browsers created meanwhile, and no
/// write of the old leader reaches the API server after the new leader's first, not even
/// once the link heals (its connections were reset when it stopped).
pub(crate) async fn partition_of_the_leader_the_standby_takes_over_and_the_old_leader_writes_no_more(
    cx: Arc<Ctx>,
) {
    const LEASE: Duration = Duration::from_secs(6);
    const RETRY: Duration = Duration::from_secs(1);
    let Some(mut partition) = Partition::new(&cx, 0x4e22).await else {
        return;
    };
    grant_replicas(&cx).await;
    let lease_namespace = format!("--leader-election-namespace={}", cx.ns);
    let flags = [
        "--enable-leader-election",
        lease_namespace.as_str(),
        "--leader-election-lease-duration=6s",
        "--leader-election-renew-deadline=4s",
        "--leader-election-retry-period=1s",
    ];
    let mut leader = Replica(cx.spawn_operator(
        &partition.kubeconfig,
        &partition.process_named("replica-a"),
        &flags,
    ));
    poll(crate::WAIT, Duration::from_millis(100), || async {
        match lease_holder(&cx).await {
            Some(holder) if holder.starts_with("replica-a") => Ok(()),
            other => Err(format!("replica-a to lead; holder: {other:?}")),
        }
    })
    .await;
    let standby_kubeconfig = cx.be.dir.join(&format!("{}.standby.kubeconfig", cx.ns));
    cx.be
        .write_kubeconfig_as(&standby_kubeconfig, STANDBY)
        .expect("standby kubeconfig");
    let standby_process = Process {
        uid: None,
        env: vec![("POD_NAME".into(), "replica-b".into())],
    };
    let _standby = Replica(cx.spawn_operator(&standby_kubeconfig, &standby_process, &flags));
    cx.chrome_config().await;
    // The operator serves no Browser of a config it has not seen yet.
    cx.until_config("chrome", "Valid", "True").await;
    let before: Vec<String> = (0..20).map(|i| format!("before{i:02}")).collect();
    for name in &before {
        cx.create_browser(name, json!({})).await;
    }
    for name in &before {
        cx.seen_running(name).await;
    }

    let cut_at = Instant::now();
    partition.cut();
    let during: Vec<String> = (0..10).map(|i| format!("during{i}")).collect();
    for name in &during {
        cx.create_browser(name, json!({})).await;
    }
    // The old leader exits (it lost its Lease); the standby takes the Lease.
    let (mut leader_stopped, mut taken) = (None, None);
    let deadline = cut_at + Duration::from_secs(30);
    while (leader_stopped.is_none() || taken.is_none()) && Instant::now() < deadline {
        if leader_stopped.is_none() && matches!(leader.0.try_wait(), Ok(Some(_))) {
            leader_stopped = Some(Instant::now());
        }
        if taken.is_none()
            && lease_holder(&cx)
                .await
                .is_some_and(|h| h.starts_with("replica-b"))
        {
            taken = Some(Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let leader_stopped = leader_stopped.expect("the cut-off leader stopped");
    let taken = taken.expect("the standby took the Lease");
    println!(
        "    the cut-off leader stopped {:.1}s and the standby took over {:.1}s into the cut",
        (leader_stopped - cut_at).as_secs_f64(),
        (taken - cut_at).as_secs_f64()
    );
    assert!(leader_stopped < taken, "the old leader stopped first");
    assert!(
        taken - cut_at <= LEASE + 2 * RETRY,
        "the standby took over within the lease duration (and a look at the Lease)"
    );
    for name in &during {
        cx.seen_running(name).await;
    }
    let served = first_moment_all(&cx, &during, cut_at, Latest::settled)
        .expect("the Browsers of the cut settled");
    println!(
        "    Browsers created during the cut Running {:.1}s after the takeover",
        served.saturating_duration_since(taken).as_secs_f64()
    );

    partition.heal();
    // Anything of the old leader still on its way would arrive now.
    tokio::time::sleep(Duration::from_secs(3)).await;
    if let (Some(old), Some(new)) = (writes_by(&cx, &operator_user()), writes_by(&cx, STANDBY)) {
        let first_new = new.first().expect("the new leader wrote").0.clone();
        let late: Vec<&(String, String)> = old.iter().filter(|(at, _)| *at >= first_new).collect();
        assert!(
            late.is_empty(),
            "writes of the old leader after the new leader's first ({first_new}): {late:?}"
        );
        assert!(!old.is_empty(), "the old leader wrote while it led");
    }
    cx.delete_everything().await;
}

/// A session ends while the operator's link is cut: once the link is back, the Browser shows
/// how it ended and stays for `--outage-retention` past the heal, so that a client whose watch
/// reconnects late (the hub through browser-service, after an API server restart) still
/// lists it `Failed` instead of finding it gone and waiting out its own timeout.
pub(crate) async fn a_session_that_ended_while_the_link_was_cut_stays_visible_after_the_heal(
    cx: Arc<Ctx>,
) {
    const RETENTION: Duration = Duration::from_secs(20);
    let Some(mut partition) = Partition::new(&cx, 0x4e22).await else {
        return;
    };
    let retention = format!("--outage-retention={}s", RETENTION.as_secs());
    let child = cx.spawn_operator(&partition.kubeconfig, &partition.process, &[&retention]);
    *cx.operator.lock().unwrap() = Some(child);
    cx.chrome_config().await;
    cx.until_config("chrome", "Valid", "True").await;
    // The sidecar exits 4 s after the pod runs: inside the cut.
    cx.kubelet().set(
        "ends",
        crate::support::kubelet::Script::ExitAfterRunning {
            container: "seleniferous".into(),
            exit_code: 1,
            after: Duration::from_secs(4),
        },
    );
    cx.create_browser("ends", json!({})).await;
    cx.seen_running("ends").await;
    partition.cut();
    let cut_at = Instant::now();
    tokio::time::sleep_until((cut_at + cut_length(&cx)).into()).await;
    partition.heal();
    let healed = Instant::now();
    let failure = cx.failure_of("ends").await;
    assert_eq!(failure["reason"], "ContainerTerminated", "{failure}");
    // A client that relists 5 s after the heal.
    tokio::time::sleep_until((healed + Duration::from_secs(5)).into()).await;
    let listed = Ctx::list(&cx.browsers()).await;
    let late = listed
        .iter()
        .find(|b| b["metadata"]["name"] == "ends")
        .unwrap_or_else(|| panic!("a late list shows the ended Browser: {listed:#?}"));
    assert_eq!(late["status"]["phase"], "Failed", "{late}");
    cx.until_gone("ends").await;
    let deleted = cx
        .history("Browser", "ends")
        .iter()
        .find(|s| s.deleted)
        .map(|s| s.at)
        .expect("the Browser seen deleted");
    println!(
        "    link cut {:.0}s; the ended Browser deleted {:.1}s after the heal",
        (healed - cut_at).as_secs_f64(),
        (deleted - healed).as_secs_f64()
    );
    assert!(
        deleted - healed >= RETENTION - Duration::from_secs(1),
        "kept {RETENTION:?} past the heal: deleted {:?} after it",
        deleted - healed
    );
    assert_eq!(cx.pod_uids("ends").len(), 1);
}
