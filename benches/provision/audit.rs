//! The operator process's writes as kube-apiserver's audit log recorded them: the same count
//! for every operator, whatever its own metrics call a write. The operator acts as a user of
//! its own (the audit log names the impersonated user of each request), so that its writes are
//! told apart from the benchmark's, the kubelet simulator's and the ideal client's. The control
//! plane's audit policy records every create, patch, update and delete of pods and Browsers
//! (status included), whatever its answer; dry runs are left out here, as they store nothing.

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::BenchError;
use crate::flavour::Flavour;
use crate::support::controlplane::{self, ControlPlane};

/// The user the Go controller acts as, bound to cluster-admin: its own RBAC has no rule for
/// pods, which it creates and deletes.
const GO_USER: &str = "bench:go-browser-controller";

/// The audit log of a control plane, read for one user's writes.
pub struct Audit {
    path: PathBuf,
    user: String,
}

/// A position in the audit log: the writes recorded before it.
#[derive(Clone, Copy, Debug)]
pub struct Mark(u64);

/// One write of the operator: `verb resource[/subresource]` as the audit log names them (a
/// server-side apply is a `patch`) and `namespace/name`.
pub struct Write {
    pub key: String,
    pub object: String,
    /// The answer's HTTP status.
    pub code: u16,
}

/// Lets the operator process act as a user of its own on `plane`: ours as the ServiceAccount
/// of `rbac/`, with exactly its rules (applied here, as the end-to-end suite does); the Go
/// controller as a user bound to cluster-admin. Returns the kubeconfig the operator is given
/// and the reader of its writes.
pub async fn grant(plane: &ControlPlane, flavour: Flavour) -> Result<(PathBuf, Audit), BenchError> {
    let fixture = |e: String| BenchError::Fixture(format!("the operator's identity: {e}"));
    let client = plane.client().await.map_err(|e| fixture(e.to_string()))?;
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let user = match flavour {
        Flavour::Ours => {
            controlplane::apply_dir(&client, &repo.join("rbac"))
                .await
                .map_err(|e| fixture(e.to_string()))?;
            let account = browser_controller::manifest::read_file(
                &repo.join("rbac").join("service-account.yaml"),
            )?;
            let meta = account
                .first()
                .map(|doc| doc["metadata"].clone())
                .unwrap_or_default();
            match (meta["namespace"].as_str(), meta["name"].as_str()) {
                (Some(ns), Some(name)) => format!("system:serviceaccount:{ns}:{name}"),
                _ => return Err(fixture("rbac/service-account.yaml names no account".into())),
            }
        }
        Flavour::Go => {
            let binding = json!({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "bench-go-browser-controller"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": GO_USER}],
            });
            controlplane::apply_object(&client, &binding)
                .await
                .map_err(fixture)?;
            GO_USER.to_string()
        }
    };
    let kubeconfig = plane.dir().join("operator.kubeconfig");
    plane
        .write_kubeconfig(&kubeconfig, Some(&user))
        .map_err(|e| fixture(e.to_string()))?;
    let audit = Audit {
        path: plane.audit_log(),
        user,
    };
    Ok((kubeconfig, audit))
}

impl Audit {
    pub fn user(&self) -> &str {
        &self.user
    }

    /// Now: the end of what the log holds so far (it may not exist before its first entry).
    pub fn mark(&self) -> Result<Mark, BenchError> {
        match std::fs::metadata(&self.path) {
            Ok(meta) => Ok(Mark(meta.len())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Mark(0)),
            Err(e) => Err(e.into()),
        }
    }

    /// The user's writes recorded between two marks. kube-apiserver writes each entry whole
    /// before it answers the request, so a mark falls between entries.
    pub fn writes(&self, from: Mark, to: Mark) -> Result<Vec<Write>, BenchError> {
        let mut file = std::fs::File::open(&self.path)?;
        file.seek(SeekFrom::Start(from.0))?;
        let mut text = String::new();
        file.take(to.0.saturating_sub(from.0))
            .read_to_string(&mut text)?;
        let quoted = format!("\"{}\"", self.user);
        Ok(text
            .lines()
            // Most entries are other users'; only the user's are parsed.
            .filter(|line| line.contains(&quoted))
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|event| {
                event["impersonatedUser"]["username"] == self.user.as_str()
                    && !event["requestURI"]
                        .as_str()
                        .is_some_and(|uri| uri.contains("dryRun="))
            })
            .map(|event| {
                let target = &event["objectRef"];
                let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
                let mut resource = text(&target["resource"]);
                if let Some(sub) = target["subresource"].as_str() {
                    resource = format!("{resource}/{sub}");
                }
                Write {
                    key: format!("{} {resource}", text(&event["verb"])),
                    object: format!("{}/{}", text(&target["namespace"]), text(&target["name"])),
                    code: event["responseStatus"]["code"]
                        .as_u64()
                        .and_then(|c| u16::try_from(c).ok())
                        .unwrap_or_default(),
                }
            })
            .collect())
    }
}

/// Writes by `verb resource`.
pub fn counts(writes: &[Write]) -> BTreeMap<String, f64> {
    let mut counts = BTreeMap::new();
    for w in writes {
        *counts.entry(w.key.clone()).or_default() += 1.0;
    }
    counts
}

/// Pod creates (or applies) the API server refused as forbidden: a full quota's answer.
pub fn refused_pod_creates(writes: &[Write]) -> u64 {
    let creates = writes
        .iter()
        .filter(|w| w.key == "create pods" || w.key == "patch pods");
    creates.filter(|w| w.code == 403).count() as u64
}

/// Writes to single objects beyond what a session needs ([`needed`]), by `verb resource`.
pub fn duplicates(writes: &[Write], ended: bool) -> BTreeMap<String, u64> {
    let mut per_object: HashMap<(&str, &str), u32> = HashMap::new();
    for w in writes {
        *per_object.entry((&w.key, &w.object)).or_default() += 1;
    }
    let mut extra = BTreeMap::new();
    for ((key, _), n) in per_object {
        let beyond = n.saturating_sub(needed(key, ended));
        if beyond > 0 {
            *extra.entry(key.to_string()).or_default() += u64::from(beyond);
        }
    }
    extra
}

/// Writes of one `verb resource`, as the audit log names them, to one Browser or pod that a
/// session needs: two Browser patches (finalizer and labels; the finalizer's release), two
/// status patches (`Pending`, `Running` with the pod IP) and a third when the session ends by
/// itself (`ended`), one of everything else (the pod's create, its delete, the Browser's).
pub fn needed(key: &str, ended: bool) -> u32 {
    match key {
        "patch browsers" => 2,
        "patch browsers/status" if ended => 3,
        "patch browsers/status" => 2,
        _ => 1,
    }
}

/// How a [`needed`] count reads in the report.
pub const NEEDED: &str = "two Browser patches (metadata, the finalizer's release), two status patches (three when the session ends by itself), one of anything else; an apply is a patch";
