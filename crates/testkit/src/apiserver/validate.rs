//! Pod defaulting and validation: a useful subset of `pkg/apis/core/validation` with the real
//! message format, so callers see the same `Pod "x" is invalid: ...` texts as from a cluster.

use std::collections::HashSet;

use serde_json::{Value, json};

use super::error::Cause;

const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
/// The decode error the apiserver returns (400) for a malformed resource quantity.
pub const QUANTITY_MSG: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";
/// The message of `ValidatePodUpdate` for a changed pod spec.
const POD_UPDATE_MSG: &str = "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

fn is_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// Errors of a DNS-1123 label value (container, volume and port names).
pub fn check_label(field: &str, value: &str, out: &mut Vec<Cause>) {
    if !is_label(value) {
        out.push(Cause::invalid(field, &json!(value), LABEL_MSG));
    }
    if value.len() > 63 {
        out.push(Cause::invalid(
            field,
            &json!(value),
            "must be no more than 63 characters",
        ));
    }
}

/// Errors of a DNS-1123 subdomain (object names of most built-in kinds).
pub fn check_subdomain(field: &str, value: &str, out: &mut Vec<Cause>) {
    if !value.split('.').all(is_label) {
        out.push(Cause::invalid(field, &json!(value), SUBDOMAIN_MSG));
    }
    if value.len() > 253 {
        out.push(Cause::invalid(
            field,
            &json!(value),
            "must be no more than 253 characters",
        ));
    }
}

/// A resource quantity as `resource.ParseQuantity` accepts it.
fn is_quantity(value: &Value) -> bool {
    let s = match value {
        Value::Number(_) => return true,
        Value::String(s) => s.as_str(),
        _ => return false,
    };
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    let digits = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(digits);
    if number.is_empty() || number == "." || number.matches('.').count() > 1 {
        return false;
    }
    const SUFFIXES: [&str; 16] = [
        "", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n", "u", "m", "k", "M", "G", "T", "P", "E",
    ];
    if SUFFIXES.contains(&suffix) {
        return true;
    }
    let exp = suffix.strip_prefix(['e', 'E']);
    exp.map(|e| e.strip_prefix(['+', '-']).unwrap_or(e))
        .is_some_and(|e| !e.is_empty() && e.bytes().all(|c| c.is_ascii_digit()))
}

fn containers(spec: &Value, list: &str) -> Vec<Value> {
    spec[list].as_array().cloned().unwrap_or_default()
}

/// Whether every resource quantity of the pod parses (else the request fails to decode).
pub fn quantities_valid(pod: &Value) -> bool {
    ["containers", "initContainers"].iter().all(|list| {
        containers(&pod["spec"], list).iter().all(|c| {
            ["requests", "limits"].iter().all(|k| {
                c["resources"][k]
                    .as_object()
                    .is_none_or(|m| m.values().all(is_quantity))
            })
        })
    })
}

fn image_pull_policy(image: &str) -> &'static str {
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.split_once(':') {
        _ if image.contains('@') => "IfNotPresent",
        Some((_, "latest")) | None => "Always",
        Some(_) => "IfNotPresent",
    }
}

fn set_default(obj: &mut Value, key: &str, value: Value) {
    if let Some(map) = obj.as_object_mut() {
        map.entry(key.to_string()).or_insert(value);
    }
}

/// QoS class from requests and limits (`pkg/apis/core/helper/qos`), simplified to cpu/memory.
fn qos_class(spec: &Value) -> &'static str {
    let all: Vec<Value> = ["containers", "initContainers"]
        .iter()
        .flat_map(|l| containers(spec, l))
        .collect();
    let empty = |c: &Value, k: &str| c["resources"][k].as_object().is_none_or(|m| m.is_empty());
    if all
        .iter()
        .all(|c| empty(c, "requests") && empty(c, "limits"))
    {
        return "BestEffort";
    }
    let guaranteed = all.iter().all(|c| {
        let limits = &c["resources"]["limits"];
        let requests = &c["resources"]["requests"];
        ["cpu", "memory"].iter().all(|r| {
            limits.get(*r).is_some() && requests.get(*r).is_none_or(|v| Some(v) == limits.get(*r))
        })
    });
    if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// What defaulting and admission add to a new pod, and its initial status.
pub fn default_pod(pod: &mut Value) {
    let spec = &mut pod["spec"];
    for (k, v) in [
        ("restartPolicy", json!("Always")),
        ("terminationGracePeriodSeconds", json!(30)),
        ("dnsPolicy", json!("ClusterFirst")),
        ("schedulerName", json!("default-scheduler")),
        ("securityContext", json!({})),
        ("enableServiceLinks", json!(true)),
        ("serviceAccountName", json!("default")),
        ("priority", json!(0)),
        ("preemptionPolicy", json!("PreemptLowerPriority")),
    ] {
        set_default(spec, k, v);
    }
    if spec.get("serviceAccount").is_none() {
        let sa = spec["serviceAccountName"].clone();
        set_default(spec, "serviceAccount", sa);
    }
    for list in ["containers", "initContainers"] {
        let Some(items) = spec.get_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for c in items {
            let policy = image_pull_policy(c["image"].as_str().unwrap_or(""));
            set_default(c, "imagePullPolicy", json!(policy));
            set_default(c, "terminationMessagePath", json!("/dev/termination-log"));
            set_default(c, "terminationMessagePolicy", json!("File"));
            set_default(c, "resources", json!({}));
            if let Some(ports) = c.get_mut("ports").and_then(Value::as_array_mut) {
                for p in ports {
                    set_default(p, "protocol", json!("TCP"));
                }
            }
        }
    }
    let qos = qos_class(&pod["spec"]);
    pod["status"] = json!({"phase": "Pending", "qosClass": qos});
}

fn check_container(c: &Value, path: &str, volumes: &HashSet<String>, out: &mut Vec<Cause>) {
    match c["name"].as_str().filter(|n| !n.is_empty()) {
        None => out.push(Cause::required(format!("{path}.name"))),
        Some(name) => check_label(&format!("{path}.name"), name, out),
    }
    if c["image"].as_str().is_none_or(|i| i.trim().is_empty()) {
        out.push(Cause::required(format!("{path}.image")));
    }
    for (j, p) in c["ports"].as_array().into_iter().flatten().enumerate() {
        let pp = format!("{path}.ports[{j}]");
        match p["containerPort"].as_i64() {
            None | Some(0) => out.push(Cause::required(format!("{pp}.containerPort"))),
            Some(n) if !(1..=65535).contains(&n) => out.push(Cause::invalid(
                format!("{pp}.containerPort"),
                &json!(n),
                "must be between 1 and 65535, inclusive",
            )),
            Some(_) => {}
        }
        if let Some(n) = p["hostPort"].as_i64().filter(|n| *n != 0)
            && !(1..=65535).contains(&n)
        {
            out.push(Cause::invalid(
                format!("{pp}.hostPort"),
                &json!(n),
                "must be between 1 and 65535, inclusive",
            ));
        }
        if let Some(proto) = p["protocol"].as_str()
            && !["SCTP", "TCP", "UDP"].contains(&proto)
        {
            out.push(Cause::not_supported(
                format!("{pp}.protocol"),
                &json!(proto),
                &["SCTP", "TCP", "UDP"],
            ));
        }
        if let Some(name) = p["name"].as_str() {
            check_label(&format!("{pp}.name"), name, out);
        }
    }
    for (j, e) in c["env"].as_array().into_iter().flatten().enumerate() {
        if e["name"].as_str().is_none_or(str::is_empty) {
            out.push(Cause::required(format!("{path}.env[{j}].name")));
        }
    }
    for (j, m) in c["volumeMounts"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let mp = format!("{path}.volumeMounts[{j}]");
        match m["name"].as_str().filter(|n| !n.is_empty()) {
            None => out.push(Cause::required(format!("{mp}.name"))),
            Some(n) if !volumes.contains(n) => {
                out.push(Cause::not_found(format!("{mp}.name"), &json!(n)))
            }
            Some(_) => {}
        }
        if m["mountPath"].as_str().is_none_or(str::is_empty) {
            out.push(Cause::required(format!("{mp}.mountPath")));
        }
    }
}

/// Field errors of a (defaulted) pod, in the order `ValidatePodSpec` reports them.
pub fn validate_pod(pod: &Value) -> Vec<Cause> {
    let mut out = Vec::new();
    if let Some(name) = pod["metadata"]["name"].as_str() {
        check_subdomain("metadata.name", name, &mut out);
    }
    // `ValidatePodSpecificAnnotations`: the deletion cost must be an int32.
    const DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";
    if let Some(cost) = pod["metadata"]["annotations"][DELETION_COST].as_str()
        && cost.parse::<i32>().is_err()
    {
        out.push(Cause::invalid(
            format!("metadata.annotations[{DELETION_COST}]"),
            &json!(cost),
            "must be a 32bit integer",
        ));
    }
    let spec = &pod["spec"];
    let mut volumes = HashSet::new();
    for (i, v) in spec["volumes"].as_array().into_iter().flatten().enumerate() {
        let field = format!("spec.volumes[{i}].name");
        match v["name"].as_str().filter(|n| !n.is_empty()) {
            None => out.push(Cause::required(field)),
            Some(name) => {
                check_label(&field, name, &mut out);
                if !volumes.insert(name.to_string()) {
                    out.push(Cause::duplicate(field, &json!(name)));
                }
            }
        }
    }
    let regular = containers(spec, "containers");
    if regular.is_empty() {
        out.push(Cause::required("spec.containers"));
    }
    let mut names = HashSet::new();
    for (list, items) in [
        ("containers", regular),
        ("initContainers", containers(spec, "initContainers")),
    ] {
        for (i, c) in items.iter().enumerate() {
            let path = format!("spec.{list}[{i}]");
            check_container(c, &path, &volumes, &mut out);
            if let Some(name) = c["name"].as_str().filter(|n| !n.is_empty())
                && !names.insert(name.to_string())
            {
                out.push(Cause::duplicate(format!("{path}.name"), &json!(name)));
            }
        }
    }
    if let Some(policy) = spec.get("restartPolicy").and_then(Value::as_str)
        && !["Always", "OnFailure", "Never"].contains(&policy)
    {
        out.push(Cause::not_supported(
            "spec.restartPolicy",
            &json!(policy),
            &["Always", "OnFailure", "Never"],
        ));
    }
    out
}

/// `top` laid over `base`: objects merge key by key, equally long lists item by item,
/// anything else is replaced. Keeps server defaults under a re-applied pod spec.
pub fn overlay(base: &Value, top: &Value) -> Value {
    match (base, top) {
        (Value::Object(b), Value::Object(t)) => {
            let mut out = b.clone();
            for (k, v) in t {
                let merged = match b.get(k) {
                    Some(bv) => overlay(bv, v),
                    None => v.clone(),
                };
                out.insert(k.clone(), merged);
            }
            Value::Object(out)
        }
        (Value::Array(b), Value::Array(t)) if b.len() == t.len() => {
            Value::Array(b.iter().zip(t).map(|(x, y)| overlay(x, y)).collect())
        }
        (_, t) => t.clone(),
    }
}

/// The spec with everything a pod update may change taken out.
fn immutable_part(spec: &Value) -> Value {
    let mut s = spec.clone();
    if let Some(map) = s.as_object_mut() {
        map.remove("activeDeadlineSeconds");
        map.remove("tolerations");
        for list in ["containers", "initContainers"] {
            if let Some(items) = map.get_mut(list).and_then(Value::as_array_mut) {
                for c in items.iter_mut().filter_map(Value::as_object_mut) {
                    c.remove("image");
                }
            }
        }
    }
    s
}

/// `ValidatePodUpdate`'s spec rule: only images, activeDeadlineSeconds and added
/// tolerations may change.
pub fn check_pod_update(old_spec: &Value, new_spec: &Value) -> Vec<Cause> {
    let mut out = Vec::new();
    if immutable_part(old_spec) != immutable_part(new_spec) {
        out.push(Cause::forbidden("spec", POD_UPDATE_MSG));
    }
    let new_tolerations = new_spec["tolerations"].as_array();
    let kept = old_spec["tolerations"]
        .as_array()
        .into_iter()
        .flatten()
        .all(|t| new_tolerations.is_some_and(|n| n.contains(t)));
    if !kept {
        out.push(Cause::forbidden(
            "spec.tolerations",
            "existing toleration can not be modified except its tolerationSeconds",
        ));
    }
    out
}
