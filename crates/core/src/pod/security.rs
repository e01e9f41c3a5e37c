//! The operator's pod security ceiling (docs/security.md, "The pod security ceiling"): which
//! Pod Security Standard a rendered pod must meet (`--pod-security-level`), the fields that
//! break it, named so that a BrowserConfig's author can act, and the defaults that make a pod
//! `restricted` where the configuration leaves a field unset.
//!
//! The checks follow the Pod Security Standards as the API server's `PodSecurity` admission
//! enforces them at `latest`, plus one rule of the operator's own: below `privileged`, a
//! browser pod (which runs arbitrary web content) gets no Kubernetes API credentials.

use std::fmt;

use serde_json::{Map, Value, json};

/// A Pod Security Standard level, each allowing less than the one before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum Level {
    /// Anything the cluster admits.
    Privileged,
    /// No known privilege escalation: no host namespaces, privileged containers, added
    /// capabilities beyond the default set, hostPath volumes, host ports, unsafe sysctls …
    #[default]
    Baseline,
    /// Baseline, and hardened: non-root, no privilege escalation, all capabilities dropped,
    /// a seccomp profile, only volume types that cannot reach the node.
    Restricted,
}

impl Level {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Privileged => "privileged",
            Self::Baseline => "baseline",
            Self::Restricted => "restricted",
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Capabilities a baseline container may add: the container runtimes' default set.
const BASELINE_CAPABILITIES: [&str; 13] = [
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// Sysctls a baseline pod may set: those namespaced to the pod and safe to share a node with.
const SAFE_SYSCTLS: [&str; 10] = [
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];

/// SELinux types a baseline pod may ask for.
const SELINUX_TYPES: [&str; 5] = [
    "",
    "container_t",
    "container_init_t",
    "container_kvm_t",
    "container_engine_t",
];

/// Volume sources a restricted pod may use: none of them reaches the node's filesystem.
const RESTRICTED_VOLUMES: [&str; 8] = [
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

const APPARMOR_ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";

/// The container lists of a pod, in the order violations are reported.
const CONTAINER_LISTS: [&str; 3] = ["initContainers", "containers", "ephemeralContainers"];

/// Every field of `pod` that `level` does not allow, as `path: what is wrong`, in pod order.
pub fn violations(pod: &Value, level: Level) -> Vec<String> {
    let mut out = Vec::new();
    if level == Level::Privileged {
        return out;
    }
    let spec = pod.get("spec").unwrap_or(&Value::Null);
    let pod_security = spec.get("securityContext").unwrap_or(&Value::Null);
    baseline_pod(pod, spec, pod_security, &mut out);
    let containers = containers(spec);
    for container in &containers {
        baseline_container(container, &mut out);
    }
    if level == Level::Restricted {
        restricted_pod(spec, pod_security, &containers, &mut out);
        for container in &containers {
            restricted_container(container, &mut out);
        }
    }
    out
}

/// With `Level::Restricted`, sets what the restricted standard requires where the pod leaves
/// it unset: `runAsNonRoot` and a `RuntimeDefault` seccomp profile for the pod, no privilege
/// escalation and every capability dropped for each container. Fields the configuration set
/// are kept, so a contrary setting stays visible to [`violations`].
pub fn harden(pod: &mut Value, level: Level) {
    if level != Level::Restricted {
        return;
    }
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    if let Some(security) = object_at(spec, "securityContext") {
        security
            .entry("runAsNonRoot")
            .or_insert_with(|| json!(true));
        security
            .entry("seccompProfile")
            .or_insert_with(|| json!({"type": "RuntimeDefault"}));
    }
    for list in CONTAINER_LISTS {
        let Some(containers) = spec.get_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for container in containers.iter_mut().filter_map(Value::as_object_mut) {
            let Some(security) = object_at(container, "securityContext") else {
                continue;
            };
            security
                .entry("allowPrivilegeEscalation")
                .or_insert_with(|| json!(false));
            if let Some(capabilities) = object_at(security, "capabilities") {
                capabilities.entry("drop").or_insert_with(|| json!(["ALL"]));
            }
        }
    }
}

/// The object under `key`, created when absent or null; `None` when something else is there
/// (left for the cluster's validation to name).
fn object_at<'a>(
    parent: &'a mut Map<String, Value>,
    key: &str,
) -> Option<&'a mut Map<String, Value>> {
    let slot = parent
        .entry(key)
        .or_insert_with(|| Value::Object(Map::new()));
    if slot.is_null() {
        *slot = Value::Object(Map::new());
    }
    slot.as_object_mut()
}

/// A container of the pod with the path that names it in messages.
struct Container<'a> {
    path: String,
    spec: &'a Value,
}

impl Container<'_> {
    fn security(&self) -> &Value {
        self.spec.get("securityContext").unwrap_or(&Value::Null)
    }
}

fn containers(spec: &Value) -> Vec<Container<'_>> {
    CONTAINER_LISTS
        .iter()
        .filter_map(|list| Some((list, spec.get(list)?.as_array()?)))
        .flat_map(|(list, items)| {
            items.iter().enumerate().map(move |(index, item)| {
                let path = match item.get("name").and_then(Value::as_str) {
                    Some(name) => format!("spec.{list}[{index}] ({name})"),
                    None => format!("spec.{list}[{index}]"),
                };
                Container { path, spec: item }
            })
        })
        .collect()
}

fn is_true(value: Option<&Value>) -> bool {
    value.and_then(Value::as_bool) == Some(true)
}

fn text(value: Option<&Value>) -> Option<&str> {
    value.and_then(Value::as_str)
}

fn baseline_pod(pod: &Value, spec: &Value, security: &Value, out: &mut Vec<String>) {
    for field in ["hostNetwork", "hostPID", "hostIPC"] {
        if is_true(spec.get(field)) {
            out.push(format!(
                "spec.{field} is true: the pod would share the node's namespaces"
            ));
        }
    }
    if is_true(spec.get("automountServiceAccountToken")) {
        out.push("spec.automountServiceAccountToken is true: a browser pod gets no Kubernetes API credentials below --pod-security-level=privileged".into());
    }
    common_security("spec.securityContext", security, out);
    if let Some(sysctls) = security.get("sysctls").and_then(Value::as_array) {
        for sysctl in sysctls {
            let name = text(sysctl.get("name")).unwrap_or_default();
            if !SAFE_SYSCTLS.contains(&name) {
                out.push(format!(
                    "spec.securityContext.sysctls: {name:?} is not a safe sysctl"
                ));
            }
        }
    }
    if let Some(annotations) = pod
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
    {
        for (key, value) in annotations {
            let profile = value.as_str().unwrap_or_default();
            if key.starts_with(APPARMOR_ANNOTATION_PREFIX)
                && profile != "runtime/default"
                && !profile.starts_with("localhost/")
            {
                out.push(format!(
                    "metadata.annotations[{key}]: AppArmor profile {profile:?} is not allowed (runtime/default or localhost/*)"
                ));
            }
        }
    }
    for (index, volume) in spec
        .get("volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        if volume.get("hostPath").is_some() {
            out.push(format!(
                "{}: hostPath volumes are not allowed",
                volume_path(volume, index)
            ));
        }
        let token = volume
            .pointer("/projected/sources")
            .and_then(Value::as_array)
            .is_some_and(|sources| {
                sources
                    .iter()
                    .any(|s| s.get("serviceAccountToken").is_some())
            });
        if token {
            out.push(format!(
                "{}: a serviceAccountToken projection gives the pod Kubernetes API credentials, not allowed below --pod-security-level=privileged",
                volume_path(volume, index)
            ));
        }
    }
}

fn volume_path(volume: &Value, index: usize) -> String {
    match volume.get("name").and_then(Value::as_str) {
        Some(name) => format!("spec.volumes[{index}] ({name})"),
        None => format!("spec.volumes[{index}]"),
    }
}

/// The checks that apply alike to the pod's and to a container's security context.
fn common_security(path: &str, security: &Value, out: &mut Vec<String>) {
    if is_true(security.pointer("/windowsOptions/hostProcess")) {
        out.push(format!(
            "{path}.windowsOptions.hostProcess is true: host processes are not allowed"
        ));
    }
    if let Some(kind) = text(security.pointer("/seccompProfile/type"))
        && kind == "Unconfined"
    {
        out.push(format!(
            "{path}.seccompProfile.type is Unconfined: use RuntimeDefault or Localhost"
        ));
    }
    if let Some(kind) = text(security.pointer("/appArmorProfile/type"))
        && kind == "Unconfined"
    {
        out.push(format!(
            "{path}.appArmorProfile.type is Unconfined: use RuntimeDefault or Localhost"
        ));
    }
    if let Some(selinux) = security.get("seLinuxOptions") {
        let kind = text(selinux.get("type")).unwrap_or_default();
        if !SELINUX_TYPES.contains(&kind) {
            out.push(format!(
                "{path}.seLinuxOptions.type {kind:?} is not allowed (container_t, container_init_t, container_kvm_t, container_engine_t)"
            ));
        }
        for field in ["user", "role"] {
            if text(selinux.get(field)).is_some_and(|v| !v.is_empty()) {
                out.push(format!(
                    "{path}.seLinuxOptions.{field} is set: custom SELinux users and roles are not allowed"
                ));
            }
        }
    }
}

fn baseline_container(container: &Container, out: &mut Vec<String>) {
    let path = format!("{}.securityContext", container.path);
    let security = container.security();
    if is_true(security.get("privileged")) {
        out.push(format!("{path}.privileged is true"));
    }
    common_security(&path, security, out);
    if let Some(mount) = text(security.get("procMount"))
        && mount != "Default"
    {
        out.push(format!(
            "{path}.procMount is {mount}: only Default is allowed"
        ));
    }
    for cap in added_capabilities(security) {
        if !BASELINE_CAPABILITIES.contains(&cap) {
            out.push(format!(
                "{path}.capabilities.add: {cap} is not in the default set"
            ));
        }
    }
    for port in container
        .spec
        .get("ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(host_port) = port.get("hostPort").and_then(Value::as_i64)
            && host_port != 0
        {
            out.push(format!(
                "{}.ports: hostPort {host_port} is not allowed",
                container.path
            ));
        }
    }
}

fn added_capabilities(security: &Value) -> Vec<&str> {
    security
        .pointer("/capabilities/add")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

fn restricted_pod(spec: &Value, security: &Value, containers: &[Container], out: &mut Vec<String>) {
    for (index, volume) in spec
        .get("volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let sources = volume
            .as_object()
            .into_iter()
            .flat_map(|v| v.keys())
            .filter(|k| *k != "name")
            .filter(|k| !RESTRICTED_VOLUMES.contains(&k.as_str()));
        for source in sources {
            out.push(format!(
                "{}: {source} volumes are not allowed (configMap, csi, downwardAPI, emptyDir, ephemeral, persistentVolumeClaim, projected, secret)",
                volume_path(volume, index)
            ));
        }
    }
    if security.get("runAsUser").and_then(Value::as_i64) == Some(0) {
        out.push("spec.securityContext.runAsUser is 0: running as root is not allowed".into());
    }
    let pod_non_root = is_true(security.get("runAsNonRoot"));
    if security.get("runAsNonRoot").and_then(Value::as_bool) == Some(false) {
        out.push("spec.securityContext.runAsNonRoot is false".into());
    }
    let pod_seccomp = matches!(
        text(security.pointer("/seccompProfile/type")),
        Some("RuntimeDefault" | "Localhost")
    );
    for container in containers {
        let path = format!("{}.securityContext", container.path);
        let security = container.security();
        if !pod_non_root && !is_true(security.get("runAsNonRoot")) {
            out.push(format!(
                "{path}.runAsNonRoot must be true (or spec.securityContext.runAsNonRoot)"
            ));
        }
        if !pod_seccomp
            && !matches!(
                text(security.pointer("/seccompProfile/type")),
                Some("RuntimeDefault" | "Localhost")
            )
        {
            out.push(format!(
                "{path}.seccompProfile.type must be RuntimeDefault or Localhost (or spec.securityContext.seccompProfile)"
            ));
        }
    }
}

fn restricted_container(container: &Container, out: &mut Vec<String>) {
    let path = format!("{}.securityContext", container.path);
    let security = container.security();
    if security
        .get("allowPrivilegeEscalation")
        .and_then(Value::as_bool)
        != Some(false)
    {
        out.push(format!("{path}.allowPrivilegeEscalation must be false"));
    }
    if security.get("runAsNonRoot").and_then(Value::as_bool) == Some(false) {
        out.push(format!("{path}.runAsNonRoot is false"));
    }
    if security.get("runAsUser").and_then(Value::as_i64) == Some(0) {
        out.push(format!(
            "{path}.runAsUser is 0: running as root is not allowed"
        ));
    }
    let drops_all = security
        .pointer("/capabilities/drop")
        .and_then(Value::as_array)
        .is_some_and(|drop| drop.iter().any(|c| c == "ALL"));
    if !drops_all {
        out.push(format!("{path}.capabilities.drop must include ALL"));
    }
    for cap in added_capabilities(security) {
        if cap != "NET_BIND_SERVICE" {
            out.push(format!(
                "{path}.capabilities.add: only NET_BIND_SERVICE may be added, not {cap}"
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(spec: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "s1"}, "spec": spec})
    }

    fn plain() -> Value {
        pod(json!({
            "containers": [
                {"name": "browser", "image": "chrome", "ports": [{"containerPort": 4444}]},
                {"name": "seleniferous", "image": "s"}
            ],
            "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
        }))
    }

    #[test]
    fn a_plain_browser_pod_is_baseline_but_not_restricted() {
        assert!(violations(&plain(), Level::Baseline).is_empty());
        assert!(violations(&plain(), Level::Privileged).is_empty());
        let restricted = violations(&plain(), Level::Restricted);
        assert!(restricted.contains(
            &"spec.containers[0] (browser).securityContext.allowPrivilegeEscalation must be false"
                .to_string()
        ), "{restricted:?}");
        assert!(restricted.contains(
            &"spec.containers[1] (seleniferous).securityContext.capabilities.drop must include ALL"
                .to_string()
        ));
    }

    #[test]
    fn hardening_makes_a_plain_pod_restricted_and_keeps_what_the_config_set() {
        let mut hardened = plain();
        harden(&mut hardened, Level::Restricted);
        assert_eq!(
            violations(&hardened, Level::Restricted),
            Vec::<String>::new()
        );
        assert_eq!(
            hardened["spec"]["securityContext"],
            json!({"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}})
        );
        assert_eq!(
            hardened["spec"]["containers"][1]["securityContext"],
            json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}})
        );
        // Below restricted nothing is added.
        let mut baseline = plain();
        harden(&mut baseline, Level::Baseline);
        assert_eq!(baseline, plain());
        // A contrary setting is kept and then refused.
        let mut root = pod(json!({
            "securityContext": {"runAsUser": 0},
            "containers": [{"name": "browser", "image": "c",
                "securityContext": {"allowPrivilegeEscalation": true, "capabilities": {"drop": ["NET_RAW"]}}}]
        }));
        harden(&mut root, Level::Restricted);
        assert_eq!(
            violations(&root, Level::Restricted),
            [
                "spec.securityContext.runAsUser is 0: running as root is not allowed",
                "spec.containers[0] (browser).securityContext.allowPrivilegeEscalation must be false",
                "spec.containers[0] (browser).securityContext.capabilities.drop must include ALL",
            ]
        );
    }

    #[test]
    fn baseline_refuses_each_privileged_setting_by_its_field() {
        let cases = [
            (
                json!({"hostNetwork": true}),
                "spec.hostNetwork is true: the pod would share the node's namespaces",
            ),
            (
                json!({"hostPID": true}),
                "spec.hostPID is true: the pod would share the node's namespaces",
            ),
            (
                json!({"containers": [{"name": "vnc", "image": "v", "securityContext": {"privileged": true}}]}),
                "spec.containers[0] (vnc).securityContext.privileged is true",
            ),
            (
                json!({"initContainers": [{"name": "setup", "image": "v", "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}]}),
                "spec.initContainers[0] (setup).securityContext.capabilities.add: SYS_ADMIN is not in the default set",
            ),
            (
                json!({"volumes": [{"name": "docker", "hostPath": {"path": "/var/run/docker.sock"}}]}),
                "spec.volumes[0] (docker): hostPath volumes are not allowed",
            ),
            (
                json!({"containers": [{"name": "browser", "image": "c", "ports": [{"containerPort": 4444, "hostPort": 4444}]}]}),
                "spec.containers[0] (browser).ports: hostPort 4444 is not allowed",
            ),
            (
                json!({"securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}}),
                "spec.securityContext.sysctls: \"kernel.msgmax\" is not a safe sysctl",
            ),
            (
                json!({"securityContext": {"seccompProfile": {"type": "Unconfined"}}}),
                "spec.securityContext.seccompProfile.type is Unconfined: use RuntimeDefault or Localhost",
            ),
            (
                json!({"containers": [{"name": "b", "image": "c", "securityContext": {"procMount": "Unmasked"}}]}),
                "spec.containers[0] (b).securityContext.procMount is Unmasked: only Default is allowed",
            ),
            (
                json!({"securityContext": {"seLinuxOptions": {"type": "spc_t"}}}),
                "spec.securityContext.seLinuxOptions.type \"spc_t\" is not allowed (container_t, container_init_t, container_kvm_t, container_engine_t)",
            ),
            (
                json!({"automountServiceAccountToken": true}),
                "spec.automountServiceAccountToken is true: a browser pod gets no Kubernetes API credentials below --pod-security-level=privileged",
            ),
            (
                json!({"volumes": [{"name": "token", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}]}),
                "spec.volumes[0] (token): a serviceAccountToken projection gives the pod Kubernetes API credentials, not allowed below --pod-security-level=privileged",
            ),
            (
                json!({"containers": [{"name": "b", "image": "c", "securityContext": {"windowsOptions": {"hostProcess": true}}}]}),
                "spec.containers[0] (b).securityContext.windowsOptions.hostProcess is true: host processes are not allowed",
            ),
        ];
        for (spec, message) in cases {
            let pod = pod(spec);
            assert_eq!(violations(&pod, Level::Baseline), [message], "{pod}");
            assert!(violations(&pod, Level::Privileged).is_empty());
            assert!(
                violations(&pod, Level::Restricted)
                    .iter()
                    .any(|v| v == message)
            );
        }
        let mut apparmor = plain();
        apparmor["metadata"]["annotations"] = json!({
            "container.apparmor.security.beta.kubernetes.io/browser": "unconfined",
            "container.apparmor.security.beta.kubernetes.io/seleniferous": "runtime/default",
        });
        assert_eq!(
            violations(&apparmor, Level::Baseline),
            [
                "metadata.annotations[container.apparmor.security.beta.kubernetes.io/browser]: AppArmor profile \"unconfined\" is not allowed (runtime/default or localhost/*)"
            ]
        );
    }

    #[test]
    fn baseline_allows_what_the_standard_allows() {
        let pod = pod(json!({
            "securityContext": {"runAsUser": 0, "sysctls": [{"name": "net.ipv4.ip_unprivileged_port_start", "value": "0"}],
                "seccompProfile": {"type": "RuntimeDefault"}, "seLinuxOptions": {"type": "container_t", "level": "s0:c1"}},
            "containers": [{"name": "browser", "image": "c", "securityContext": {
                "capabilities": {"add": ["NET_BIND_SERVICE", "SYS_CHROOT"]}, "procMount": "Default",
                "privileged": false}}],
            "volumes": [{"name": "pvc", "persistentVolumeClaim": {"claimName": "x"}},
                        {"name": "nfs", "nfs": {"server": "s", "path": "/"}}]
        }));
        assert_eq!(violations(&pod, Level::Baseline), Vec::<String>::new());
        let restricted = violations(&pod, Level::Restricted);
        assert!(restricted.contains(&"spec.volumes[1] (nfs): nfs volumes are not allowed (configMap, csi, downwardAPI, emptyDir, ephemeral, persistentVolumeClaim, projected, secret)".to_string()), "{restricted:?}");
        assert!(restricted.contains(&"spec.containers[0] (browser).securityContext.capabilities.add: only NET_BIND_SERVICE may be added, not SYS_CHROOT".to_string()));
    }

    #[test]
    fn restricted_takes_non_root_and_seccomp_from_the_pod_or_every_container() {
        let hardened_container =
            json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}});
        let mut per_container = hardened_container.clone();
        per_container["runAsNonRoot"] = json!(true);
        per_container["seccompProfile"] =
            json!({"type": "Localhost", "localhostProfile": "p.json"});
        let pod = pod(
            json!({"containers": [{"name": "b", "image": "c", "securityContext": per_container}]}),
        );
        assert_eq!(violations(&pod, Level::Restricted), Vec::<String>::new());
        let pod_level = json!({"securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "b", "image": "c", "securityContext": hardened_container}]});
        assert_eq!(
            violations(&super::tests::pod(pod_level), Level::Restricted),
            Vec::<String>::new()
        );
        let missing = super::tests::pod(
            json!({"containers": [{"name": "b", "image": "c", "securityContext": hardened_container}]}),
        );
        assert_eq!(
            violations(&missing, Level::Restricted),
            [
                "spec.containers[0] (b).securityContext.runAsNonRoot must be true (or spec.securityContext.runAsNonRoot)",
                "spec.containers[0] (b).securityContext.seccompProfile.type must be RuntimeDefault or Localhost (or spec.securityContext.seccompProfile)",
            ]
        );
    }

    #[test]
    fn levels_order_and_print() {
        assert!(Level::Privileged < Level::Baseline && Level::Baseline < Level::Restricted);
        assert_eq!(Level::default(), Level::Baseline);
        assert_eq!(Level::Restricted.to_string(), "restricted");
    }
}
