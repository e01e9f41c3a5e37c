//! The resources the double serves (built-ins plus installed CRDs) and the discovery documents
//! describing them.

use std::cmp::Ordering;

use serde_json::{Value, json};

/// Storage identity of a resource: objects live per group + plural, whatever version a request
/// names (CRDs here use the `None` conversion strategy: only `apiVersion` differs).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResKey {
    pub group: String,
    pub plural: String,
}

/// Resource-specific server behaviour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Special {
    Plain,
    Pod,
    Namespace,
    Node,
    AccessReview,
    Crd,
    /// core/v1 Events: a read-only view of the events.k8s.io/v1 objects.
    EventView,
    /// core/v1 ResourceQuotas: pod creates are charged against them.
    Quota,
}

#[derive(Clone, Debug)]
pub struct Version {
    pub name: String,
    pub served: bool,
    pub status: bool,
    /// `additionalPrinterColumns` of a CRD version (server-side printing).
    pub columns: Vec<Value>,
}

#[derive(Clone, Debug)]
pub struct ResourceDef {
    pub group: String,
    pub plural: String,
    pub singular: String,
    pub kind: String,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub namespaced: bool,
    pub versions: Vec<Version>,
    pub special: Special,
    /// Defined by a CustomResourceDefinition.
    pub crd: bool,
}

const ALL_VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

impl ResourceDef {
    fn builtin(group: &str, version: &str, plural: &str, kind: &str, namespaced: bool) -> Self {
        Self {
            group: group.to_string(),
            plural: plural.to_string(),
            singular: kind.to_lowercase(),
            kind: kind.to_string(),
            short_names: Vec::new(),
            categories: Vec::new(),
            namespaced,
            versions: vec![Version {
                name: version.to_string(),
                served: true,
                status: false,
                columns: Vec::new(),
            }],
            special: Special::Plain,
            crd: false,
        }
    }

    fn special(mut self, special: Special) -> Self {
        self.special = special;
        self
    }

    fn status(mut self) -> Self {
        for v in &mut self.versions {
            v.status = true;
        }
        self
    }

    fn short(mut self, names: &[&str], categories: &[&str]) -> Self {
        self.short_names = names.iter().map(|s| s.to_string()).collect();
        self.categories = categories.iter().map(|s| s.to_string()).collect();
        self
    }

    pub fn key(&self) -> ResKey {
        ResKey {
            group: self.group.clone(),
            plural: self.plural.clone(),
        }
    }

    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{version}", self.group)
        }
    }

    pub fn served(&self, version: &str) -> bool {
        self.versions.iter().any(|v| v.name == version && v.served)
    }

    /// Whether `version` has the status subresource (status then only changes through it).
    pub fn has_status(&self, version: &str) -> bool {
        self.versions.iter().any(|v| v.name == version && v.status)
    }

    /// The printer columns of `version`.
    pub fn columns(&self, version: &str) -> &[Value] {
        self.versions
            .iter()
            .find(|v| v.name == version)
            .map(|v| v.columns.as_slice())
            .unwrap_or_default()
    }

    /// `pods` or `browsers.selenosis.io`, as error messages name a resource.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// `Pod` or `Browser.selenosis.io`, as validation messages name a kind.
    pub fn qualified_kind(&self) -> String {
        if self.group.is_empty() {
            self.kind.clone()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }

    pub fn verbs(&self) -> Vec<&'static str> {
        match self.special {
            Special::AccessReview => vec!["create"],
            Special::EventView => vec!["get", "list"],
            _ => ALL_VERBS.to_vec(),
        }
    }

    /// Subresources as discovery lists them: (name, kind, verbs).
    fn subresources(&self, version: &str) -> Vec<(&'static str, &'static str, Vec<&'static str>)> {
        let mut subs = Vec::new();
        if self.has_status(version) {
            subs.push(("status", "", vec!["get", "patch", "update"]));
        }
        if self.special == Special::Pod {
            subs.push(("binding", "Binding", vec!["create"]));
        }
        subs
    }

    /// Served versions, highest priority first (the first is the preferred version).
    pub fn served_versions(&self) -> Vec<String> {
        let mut versions: Vec<String> = self
            .versions
            .iter()
            .filter(|v| v.served)
            .map(|v| v.name.clone())
            .collect();
        versions.sort_by(|a, b| version_priority(a, b));
        versions
    }
}

/// The built-in resources the operator and the kubelet simulator use.
pub fn builtins() -> Vec<ResourceDef> {
    vec![
        ResourceDef::builtin("", "v1", "pods", "Pod", true)
            .special(Special::Pod)
            .status()
            .short(&["po"], &["all"]),
        ResourceDef::builtin("", "v1", "events", "Event", true)
            .special(Special::EventView)
            .short(&["ev"], &[]),
        ResourceDef::builtin("", "v1", "namespaces", "Namespace", false)
            .special(Special::Namespace)
            .status()
            .short(&["ns"], &[]),
        ResourceDef::builtin("", "v1", "nodes", "Node", false)
            .special(Special::Node)
            .status()
            .short(&["no"], &[]),
        // Charged by the pod admission as the ResourceQuota admission does (pods only); no
        // quota controller runs (nor on a bare control plane): tests write the status.
        ResourceDef::builtin("", "v1", "resourcequotas", "ResourceQuota", true)
            .special(Special::Quota)
            .status()
            .short(&["quota"], &[]),
        ResourceDef::builtin("events.k8s.io", "v1", "events", "Event", true).short(&["ev"], &[]),
        ResourceDef::builtin("coordination.k8s.io", "v1", "leases", "Lease", true),
        // No DaemonSet controller runs here (nor on a bare control plane): tests write the
        // status.
        ResourceDef::builtin("apps", "v1", "daemonsets", "DaemonSet", true)
            .status()
            .short(&["ds"], &["all"]),
        ResourceDef::builtin("", "v1", "serviceaccounts", "ServiceAccount", true)
            .short(&["sa"], &[]),
        ResourceDef::builtin("rbac.authorization.k8s.io", "v1", "roles", "Role", true),
        ResourceDef::builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "rolebindings",
            "RoleBinding",
            true,
        ),
        ResourceDef::builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "clusterroles",
            "ClusterRole",
            false,
        ),
        ResourceDef::builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "clusterrolebindings",
            "ClusterRoleBinding",
            false,
        ),
        ResourceDef::builtin(
            "authorization.k8s.io",
            "v1",
            "selfsubjectaccessreviews",
            "SelfSubjectAccessReview",
            false,
        )
        .special(Special::AccessReview),
        ResourceDef::builtin(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            false,
        )
        .special(Special::Crd)
        .status()
        .short(&["crd", "crds"], &["api-extensions"]),
    ]
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Reads the served shape of a resource from a `CustomResourceDefinition` object.
pub fn from_crd(crd: &Value) -> Result<ResourceDef, String> {
    let spec = &crd["spec"];
    let field = |v: &Value, path: &str| -> Result<String, String> {
        v.as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .ok_or_else(|| format!("spec.{path}: Required value"))
    };
    let group = field(&spec["group"], "group")?;
    let names = &spec["names"];
    let plural = field(&names["plural"], "names.plural")?;
    let kind = field(&names["kind"], "names.kind")?;
    let singular = names["singular"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| kind.to_lowercase());
    let namespaced = match spec["scope"].as_str() {
        Some("Namespaced") => true,
        Some("Cluster") => false,
        _ => return Err("spec.scope: Unsupported value".to_string()),
    };
    let versions: Vec<Version> = spec["versions"]
        .as_array()
        .map(|vs| {
            vs.iter()
                .filter_map(|v| {
                    Some(Version {
                        name: v["name"].as_str()?.to_string(),
                        served: v["served"].as_bool().unwrap_or(false),
                        status: v["subresources"]["status"].is_object(),
                        columns: v["additionalPrinterColumns"]
                            .as_array()
                            .cloned()
                            .unwrap_or_default(),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    if versions.is_empty() {
        return Err("spec.versions: Required value".to_string());
    }
    Ok(ResourceDef {
        group,
        plural,
        singular,
        kind,
        short_names: strings(&names["shortNames"]),
        categories: strings(&names["categories"]),
        namespaced,
        versions,
        special: Special::Plain,
        crd: true,
    })
}

/// Kubernetes' version priority: GA > beta > alpha, higher numbers first, then anything else
/// alphabetically (the order `preferredVersion` follows).
pub fn version_priority(a: &str, b: &str) -> Ordering {
    fn parse(v: &str) -> Option<(u8, u64, u64)> {
        let rest = v.strip_prefix('v')?;
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        let major: u64 = rest[..digits].parse().ok()?;
        let tail = &rest[digits..];
        let (stability, minor) = if tail.is_empty() {
            (2, 0)
        } else if let Some(n) = tail.strip_prefix("beta") {
            (1, n.parse().ok()?)
        } else if let Some(n) = tail.strip_prefix("alpha") {
            (0, n.parse().ok()?)
        } else {
            return None;
        };
        Some((stability, major, minor))
    }
    match (parse(a), parse(b)) {
        (Some(x), Some(y)) => y.cmp(&x),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}

/// `GET /version`.
pub fn version_info(git_version: &str) -> Value {
    let numbers: Vec<&str> = git_version
        .trim_start_matches('v')
        .split(['.', '-', '+'])
        .collect();
    json!({
        "major": numbers.first().copied().unwrap_or("1"),
        "minor": numbers.get(1).copied().unwrap_or("0"),
        "gitVersion": git_version,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// `GET /api`.
pub fn core_versions() -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:6443"}],
    })
}

fn group_doc(name: &str, versions: &[String]) -> Value {
    let entries: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    json!({
        "name": name,
        "versions": entries,
        "preferredVersion": entries.first().cloned().unwrap_or(Value::Null),
    })
}

/// Groups in first-registration order with their served versions, highest priority first.
fn groups(defs: &[ResourceDef]) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for def in defs.iter().filter(|d| !d.group.is_empty()) {
        let idx = match out.iter().position(|(g, _)| *g == def.group) {
            Some(i) => i,
            None => {
                out.push((def.group.clone(), Vec::new()));
                out.len() - 1
            }
        };
        let versions = &mut out[idx].1;
        for v in def.served_versions() {
            if !versions.contains(&v) {
                versions.push(v);
            }
        }
        versions.sort_by(|a, b| version_priority(a, b));
    }
    out.retain(|(_, vs)| !vs.is_empty());
    out
}

/// `GET /apis`.
pub fn group_list(defs: &[ResourceDef]) -> Value {
    let groups: Vec<Value> = groups(defs)
        .iter()
        .map(|(g, vs)| group_doc(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `GET /apis/{group}`.
pub fn group(defs: &[ResourceDef], name: &str) -> Option<Value> {
    groups(defs).iter().find(|(g, _)| g == name).map(|(g, vs)| {
        let mut doc = group_doc(g, vs);
        doc["kind"] = json!("APIGroup");
        doc["apiVersion"] = json!("v1");
        doc
    })
}

/// `GET /api/v1` or `GET /apis/{group}/{version}`; `None` when nothing is served there.
pub fn resource_list(defs: &[ResourceDef], group: &str, version: &str) -> Option<Value> {
    let mut resources = Vec::new();
    for def in defs
        .iter()
        .filter(|d| d.group == group && d.served(version))
    {
        let mut entry = json!({
            "name": def.plural,
            "singularName": def.singular,
            "namespaced": def.namespaced,
            "kind": def.kind,
            "verbs": def.verbs(),
        });
        if !def.short_names.is_empty() {
            entry["shortNames"] = json!(def.short_names);
        }
        if !def.categories.is_empty() {
            entry["categories"] = json!(def.categories);
        }
        resources.push(entry);
        for (sub, kind, verbs) in def.subresources(version) {
            let kind = if kind.is_empty() { &def.kind } else { kind };
            resources.push(json!({
                "name": format!("{}/{sub}", def.plural),
                "singularName": "",
                "namespaced": def.namespaced,
                "kind": kind,
                "verbs": verbs,
            }));
        }
    }
    if resources.is_empty() {
        return None;
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }))
}

/// Aggregated discovery (`apidiscovery.k8s.io/v2`) of the core group (`core`) or of every
/// named group, as served for `Accept: ...;as=APIGroupDiscoveryList`.
pub fn aggregated(defs: &[ResourceDef], core: bool) -> Value {
    let groups: Vec<(String, Vec<String>)> = if core {
        vec![(String::new(), vec!["v1".to_string()])]
    } else {
        groups(defs)
    };
    let items: Vec<Value> = groups
        .iter()
        .map(|(group, versions)| {
            let versions: Vec<Value> = versions
                .iter()
                .map(|version| {
                    let resources: Vec<Value> = defs
                        .iter()
                        .filter(|d| d.group == *group && d.served(version))
                        .map(|d| {
                            let gvk = |kind: &str| json!({"group": d.group, "version": version, "kind": kind});
                            let subresources: Vec<Value> = d
                                .subresources(version)
                                .into_iter()
                                .map(|(sub, kind, verbs)| {
                                    let kind = if kind.is_empty() { &d.kind } else { kind };
                                    json!({"subresource": sub, "responseKind": gvk(kind), "verbs": verbs})
                                })
                                .collect();
                            json!({
                                "resource": d.plural,
                                "responseKind": gvk(&d.kind),
                                "scope": if d.namespaced { "Namespaced" } else { "Cluster" },
                                "singularResource": d.singular,
                                "verbs": d.verbs(),
                                "shortNames": d.short_names,
                                "categories": d.categories,
                                "subresources": subresources,
                            })
                        })
                        .collect();
                    json!({"version": version, "resources": resources, "freshness": "Current"})
                })
                .collect();
            json!({"metadata": {"name": group}, "versions": versions})
        })
        .collect();
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    })
}
