//! Object storage and the write semantics of the API server: resourceVersions from one global
//! counter, generation, status subresource isolation, server-side apply, finalizer-gated and
//! graceful deletion, dry-run. Everything here is synchronous and runs under the state lock.

use super::openapi::OpenApi;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

use serde_json::{Value, json};

use super::apply::{self, Owner, Scope, Writer};
use super::error::{ApiError, Cause};
use super::rbac::{self, User};
use super::resources::{self, ResKey, ResourceDef, Special};
use super::validate;
use super::watch::{self, Watcher};
use super::{AccessRule, Fault, RequestRecord};

/// Events kept for watches resuming from a resourceVersion; older ones answer 410 Gone.
const LOG_CAPACITY: usize = 10_000;

#[derive(Clone, Debug)]
pub struct Stored {
    pub obj: Value,
    pub owners: Vec<Owner>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

/// One change, kept in the bounded event log and fanned out to watchers.
#[derive(Clone, Debug)]
pub struct LogEvent {
    pub rv: u64,
    pub key: ResKey,
    pub kind: EventType,
    pub obj: Value,
    /// The previous state of a modified object (selectors are evaluated on both).
    pub old: Option<Value>,
}

/// A resolved request target.
#[derive(Clone, Debug)]
pub struct Target {
    pub def: ResourceDef,
    pub version: String,
    /// Namespace from the path; empty for cluster-scoped resources and all-namespace requests.
    pub ns: String,
    pub sub: Option<String>,
}

impl Target {
    pub fn api_version(&self) -> String {
        self.def.api_version(&self.version)
    }

    fn scope(&self) -> Scope {
        if self.sub.as_deref() == Some("status") {
            Scope::Status
        } else {
            Scope::Main {
                status_separate: self.def.has_status(&self.version),
            }
        }
    }

    fn id(&self, name: &str) -> (String, String) {
        (self.ns.clone(), name.to_string())
    }
}

/// Parameters shared by the writing verbs.
#[derive(Clone, Debug, Default)]
pub struct WriteOpts {
    pub manager: Option<String>,
    pub dry_run: bool,
    pub force: bool,
    /// The impersonated user the request acts as; `None` for the admin.
    pub user: Option<User>,
}

/// `DeleteOptions` as far as the double honours them.
#[derive(Clone, Debug, Default)]
pub struct DeleteOpts {
    pub grace: Option<i64>,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub dry_run: bool,
}

/// Patch content types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    Merge,
    Json,
    Strategic,
    Apply,
}

impl PatchType {
    pub fn from_content_type(ct: &str) -> Option<Self> {
        match ct.split(';').next().unwrap_or("").trim() {
            "application/merge-patch+json" => Some(Self::Merge),
            "application/json-patch+json" => Some(Self::Json),
            "application/strategic-merge-patch+json" => Some(Self::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+json" => Some(Self::Apply),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Merge => "merge",
            Self::Json => "json",
            Self::Strategic => "strategic",
            Self::Apply => "apply",
        }
    }
}

/// What a watch asking for its initial list streamed (`sendInitialEvents`) gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamingLists {
    /// The objects, then the `initial-events-end` bookmark (Kubernetes 1.34 and later).
    Served,
    /// A 422 for the request's options, as a server without the feature answers (Kubernetes
    /// 1.24: `resourceVersionMatch is forbidden for watch`).
    Refused,
    /// The watch starts, then ends in a 500 `ERROR` event: a server with the feature whose
    /// etcd cannot serve it (1.3x on etcd 3.4 without progress requests).
    Unservable,
}

pub struct State {
    pub rv: u64,
    seq: u64,
    pub defs: Vec<ResourceDef>,
    pub objects: HashMap<ResKey, BTreeMap<(String, String), Stored>>,
    pub log: VecDeque<LogEvent>,
    /// The newest resourceVersion no longer in the log.
    pub compacted: u64,
    pub watchers: Vec<Watcher>,
    pub next_watcher: u64,
    pub faults: Vec<Fault>,
    /// Every request answers 503 (an API server going down or starting up).
    pub unavailable: bool,
    /// `/readyz` answers 500, as a kube-apiserver's does while it is starting.
    pub starting: bool,
    /// Resources whose watch events are held back (a lagging watch cache).
    pub held: Vec<ResKey>,
    pub requests: Vec<RequestRecord>,
    pub denials: Vec<AccessRule>,
    pub git_version: String,
    pub bookmark_interval: Duration,
    /// What a watch asking for its initial list streamed (`sendInitialEvents`) gets.
    pub streaming_lists: StreamingLists,
    pub openapi: OpenApi,
}

/// RFC 3339 with second precision, as `metav1.Time` serializes.
pub fn timestamp(offset_secs: i64) -> String {
    let ts = jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::from_secs(offset_secs))
        .unwrap_or_else(|_| jiff::Timestamp::now());
    ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn meta_str<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj["metadata"][key].as_str().filter(|s| !s.is_empty())
}

fn has_finalizers(obj: &Value) -> bool {
    obj["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| !f.is_empty())
}

/// Metadata only the server sets.
const SERVER_META: [&str; 8] = [
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "managedFields",
    "selfLink",
];

/// Whether the object's content outside metadata (and outside status when status is a
/// subresource) differs, which is what bumps `metadata.generation`.
fn spec_changed(old: &Value, new: &Value, status_separate: bool) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.as_object_mut() {
            m.remove("metadata");
            if status_separate {
                m.remove("status");
            }
        }
        v
    };
    strip(old) != strip(new)
}

fn tracks_generation(def: &ResourceDef) -> bool {
    // Workloads (apps/v1) count spec changes like every object with a status subresource.
    matches!(def.special, Special::Pod | Special::Crd) || def.crd || def.group == "apps"
}

impl State {
    pub fn new() -> Self {
        let mut state = Self {
            rv: 0,
            seq: 0,
            defs: resources::builtins(),
            objects: HashMap::new(),
            log: VecDeque::new(),
            compacted: 0,
            watchers: Vec::new(),
            next_watcher: 0,
            faults: Vec::new(),
            unavailable: false,
            starting: false,
            held: Vec::new(),
            requests: Vec::new(),
            denials: Vec::new(),
            git_version: "v1.34.0".to_string(),
            bookmark_interval: Duration::from_secs(1),
            streaming_lists: StreamingLists::Served,
            openapi: OpenApi::default(),
        };
        for ns in ["default", "kube-system"] {
            if let Some(t) = state.target_for("namespaces", "") {
                let body =
                    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
                // Seeding cannot fail: the names are valid and the store is empty.
                let _ = state.create(&t, body, &WriteOpts::default());
            }
        }
        state
    }

    /// The resource a test names: `pods`, `browsers`, or `browsers.selenosis.io`; a bare plural
    /// prefers the core group.
    pub fn resolve(&self, name: &str) -> Option<&ResourceDef> {
        self.defs
            .iter()
            .find(|d| d.qualified() == name)
            .or_else(|| self.defs.iter().find(|d| d.plural == name))
    }

    pub fn target_for(&self, resource: &str, ns: &str) -> Option<Target> {
        let def = self.resolve(resource)?.clone();
        let version = def.served_versions().into_iter().next()?;
        Some(Target {
            ns: if def.namespaced {
                ns.to_string()
            } else {
                String::new()
            },
            def,
            version,
            sub: None,
        })
    }

    pub fn def(&self, group: &str, version: &str, plural: &str) -> Option<ResourceDef> {
        self.defs
            .iter()
            .find(|d| d.group == group && d.plural == plural && d.served(version))
            .cloned()
    }

    fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn uid(&mut self) -> String {
        format!("6f1c9a2e-0000-4000-8000-{:012x}", self.next_seq())
    }

    /// Five characters in the alphabet of `names.SimpleNameGenerator`.
    fn name_suffix(&mut self) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        let mut n = self.next_seq().wrapping_mul(2_654_435_761);
        (0..5)
            .map(|_| {
                let c = ALPHABET[(n % ALPHABET.len() as u64) as usize] as char;
                n /= ALPHABET.len() as u64;
                c
            })
            .collect()
    }

    pub fn stored(&self, key: &ResKey, ns: &str, name: &str) -> Option<&Stored> {
        self.objects
            .get(key)?
            .get(&(ns.to_string(), name.to_string()))
    }

    fn lookup(&self, t: &Target, name: &str) -> Result<Stored, ApiError> {
        self.stored(&t.def.key(), &t.ns, name)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&t.def, name))
    }

    /// The object as a client of `t.version` sees it.
    pub fn present(t: &Target, obj: &Value) -> Value {
        let mut out = obj.clone();
        out["apiVersion"] = json!(t.api_version());
        out["kind"] = json!(t.def.kind);
        out
    }

    pub fn objects_of(&self, key: &ResKey, ns: &str) -> Vec<&Value> {
        self.objects
            .get(key)
            .into_iter()
            .flat_map(|m| m.iter())
            .filter(|((o_ns, _), _)| ns.is_empty() || o_ns == ns)
            .map(|(_, s)| &s.obj)
            .collect()
    }

    fn emit(&mut self, t: &Target, kind: EventType, obj: Value, old: Option<Value>) {
        let event = LogEvent {
            rv: self.rv,
            key: t.def.key(),
            kind,
            obj,
            old,
        };
        watch::notify(&mut self.watchers, &self.held, &event);
        self.log.push_back(event);
        while self.log.len() > LOG_CAPACITY {
            if let Some(dropped) = self.log.pop_front() {
                self.compacted = dropped.rv;
            }
        }
    }

    /// Forgets every logged event, as an etcd compaction does: watches resuming from an
    /// earlier resourceVersion get 410 Gone.
    pub fn compact(&mut self) {
        self.log.clear();
        self.compacted = self.rv;
    }

    // ---- reads ----------------------------------------------------------------------------

    pub fn get(&self, t: &Target, name: &str) -> Result<Value, ApiError> {
        let stored = self.lookup(t, name)?;
        Ok(Self::present(t, &stored.obj))
    }

    pub fn list(&self, t: &Target, keep: impl Fn(&Value) -> bool) -> Value {
        let items: Vec<Value> = self
            .objects_of(&t.def.key(), &t.ns)
            .into_iter()
            .filter(|o| keep(o))
            .map(|o| {
                let mut item = Self::present(t, o);
                // Built-in lists are typed: their items carry no apiVersion and kind (custom
                // resources are stored whole and keep them).
                if !t.def.crd
                    && let Some(m) = item.as_object_mut()
                {
                    m.remove("apiVersion");
                    m.remove("kind");
                }
                item
            })
            .collect();
        json!({
            "kind": format!("{}List", t.def.kind),
            "apiVersion": t.api_version(),
            "metadata": {"resourceVersion": self.rv.to_string()},
            "items": items,
        })
    }

    // ---- create ---------------------------------------------------------------------------

    /// POST.
    pub fn create(&mut self, t: &Target, body: Value, opts: &WriteOpts) -> Result<Value, ApiError> {
        self.create_inner(t, body, opts, None)
    }

    fn check_types(t: &Target, body: &Value) -> Result<(), ApiError> {
        if let Some(av) = body["apiVersion"].as_str()
            && av != t.api_version()
        {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({av}) does not match the expected API version ({})",
                t.api_version()
            )));
        }
        if let Some(kind) = body["kind"].as_str()
            && kind != t.def.kind
        {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({kind}) does not match the expected kind ({})",
                t.def.kind
            )));
        }
        Ok(())
    }

    fn check_namespace(t: &Target, body: &Value) -> Result<(), ApiError> {
        match meta_str(body, "namespace") {
            Some(ns) if t.def.namespaced && ns != t.ns => Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            )),
            _ => Ok(()),
        }
    }

    /// `metadata.name` rules: DNS labels for namespaces, DNS subdomains for the other built-in
    /// kinds, path segments for custom resources.
    fn name_errors(def: &ResourceDef, name: &str) -> Vec<Cause> {
        let mut causes = Vec::new();
        match def.special {
            Special::Namespace => validate::check_label("metadata.name", name, &mut causes),
            // Pod names are checked with the rest of the pod.
            Special::Pod => {}
            _ if def.group.is_empty() || def.group.ends_with(".k8s.io") => {
                validate::check_subdomain("metadata.name", name, &mut causes);
            }
            _ => {
                for bad in ["/", "%"] {
                    if name.contains(bad) {
                        causes.push(Cause::invalid(
                            "metadata.name",
                            &json!(name),
                            &format!("may not contain '{bad}'"),
                        ));
                    }
                }
                if name == "." || name == ".." {
                    causes.push(Cause::invalid(
                        "metadata.name",
                        &json!(name),
                        &format!("may not be '{name}'"),
                    ));
                }
            }
        }
        causes
    }

    /// Creation; `applied` is the configuration of a server-side apply that creates.
    fn create_inner(
        &mut self,
        t: &Target,
        mut obj: Value,
        opts: &WriteOpts,
        applied: Option<&Value>,
    ) -> Result<Value, ApiError> {
        if !obj.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request must be an object",
            ));
        }
        Self::check_types(t, &obj)?;
        Self::check_namespace(t, &obj)?;
        if t.def.special == Special::AccessReview {
            return Ok(self.review_access(t, obj, opts.user.as_ref()));
        }
        if !obj["metadata"].is_object() {
            obj["metadata"] = json!({});
        }
        let name = match (meta_str(&obj, "name"), meta_str(&obj, "generateName")) {
            (Some(n), _) => n.to_string(),
            (None, Some(prefix)) => format!("{prefix}{}", self.name_suffix()),
            (None, None) => {
                return Err(ApiError::invalid(
                    &t.def,
                    "",
                    vec![Cause {
                        reason: "FieldValueRequired".to_string(),
                        field: "metadata.name".to_string(),
                        message: "Required value: name or generateName is required".to_string(),
                    }],
                ));
            }
        };
        if self.stored(&t.def.key(), &t.ns, &name).is_some() {
            return Err(ApiError::already_exists(&t.def, &name));
        }
        let meta = &mut obj["metadata"];
        meta["name"] = json!(name);
        if let Some(m) = meta.as_object_mut() {
            for k in SERVER_META {
                m.remove(k);
            }
            if t.def.namespaced {
                m.insert("namespace".to_string(), json!(t.ns));
            } else {
                m.remove("namespace");
            }
        }
        obj["apiVersion"] = json!(t.api_version());
        obj["kind"] = json!(t.def.kind);

        let mut causes = Self::name_errors(&t.def, &name);
        match t.def.special {
            Special::Pod => {
                if !validate::quantities_valid(&obj) {
                    return Err(ApiError::bad_request(format!(
                        "Pod in version \"v1\" cannot be handled as a Pod: {}",
                        validate::QUANTITY_MSG
                    )));
                }
                validate::default_pod(&mut obj);
                causes.extend(validate::validate_pod(&obj));
            }
            Special::Namespace => {
                obj["spec"] = json!({"finalizers": ["kubernetes"]});
                obj["status"] = json!({"phase": "Active"});
            }
            Special::Crd => {
                let def = resources::from_crd(&obj).map_err(|e| {
                    ApiError::invalid(
                        &t.def,
                        &name,
                        vec![Cause {
                            reason: "FieldValueInvalid".to_string(),
                            field: "spec".to_string(),
                            message: e,
                        }],
                    )
                })?;
                let storage = obj["spec"]["versions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|v| v["storage"].as_bool() == Some(true))
                    .and_then(|v| v["name"].as_str())
                    .unwrap_or(&def.versions[0].name)
                    .to_string();
                obj["status"] = json!({
                    "acceptedNames": obj["spec"]["names"].clone(),
                    "conditions": [
                        {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": timestamp(0)},
                        {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": timestamp(0)},
                    ],
                    "storedVersions": [storage],
                });
                if name != def.qualified() {
                    causes.push(Cause::invalid(
                        "metadata.name",
                        &json!(name),
                        r#"must be spec.names.plural+"."+spec.group"#,
                    ));
                }
                if !opts.dry_run && causes.is_empty() {
                    self.defs.retain(|d| d.key() != def.key());
                    self.defs.push(def);
                }
            }
            // Nodes may carry status on create; other kinds with a status subresource may not.
            Special::Node => {}
            _ => {
                if t.def.has_status(&t.version)
                    && let Some(m) = obj.as_object_mut()
                {
                    m.remove("status");
                }
            }
        }
        if !causes.is_empty() {
            return Err(ApiError::invalid(&t.def, &name, causes));
        }
        if t.def.special == Special::Pod {
            self.charge_quotas(&t.ns, &name, opts.dry_run)?;
        }
        let uid = self.uid();
        let meta = &mut obj["metadata"];
        meta["uid"] = json!(uid);
        meta["creationTimestamp"] = json!(timestamp(0));
        if tracks_generation(&t.def) {
            meta["generation"] = json!(1);
        }

        let now = timestamp(0);
        let manager = opts
            .manager
            .clone()
            .unwrap_or_else(|| "unknown".to_string());
        let writer = Writer {
            manager: &manager,
            subresource: None,
            api_version: &t.api_version(),
            now: &now,
        };
        let scope = t.scope();
        let mut owners = Vec::new();
        match applied {
            Some(applied) => {
                apply::apply(&Value::Null, &mut owners, applied, scope, true, &writer)?;
            }
            None => apply::record_update(&mut owners, &Value::Null, &obj, scope, &writer),
        }
        apply::prune(&mut owners, &obj);
        obj["metadata"]["managedFields"] = apply::managed_fields(&owners);

        if opts.dry_run {
            return Ok(Self::present(t, &obj));
        }
        let rv = self.next_rv();
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        self.objects.entry(t.def.key()).or_default().insert(
            t.id(&name),
            Stored {
                obj: obj.clone(),
                owners,
            },
        );
        self.emit(t, EventType::Added, obj.clone(), None);
        Ok(Self::present(t, &obj))
    }

    /// The ResourceQuota admission for a pod create in `ns`, counting pods only (`pods`,
    /// `count/pods`): refused with the admission's message when a quota of the namespace is
    /// full or its status is not written yet; otherwise each quota's `status.used` grows by
    /// one (not for a dry run), as the admission records it. Quotas with scopes are left out.
    fn charge_quotas(&mut self, ns: &str, pod: &str, dry_run: bool) -> Result<(), ApiError> {
        let Some(def) = self
            .defs
            .iter()
            .find(|d| d.special == Special::Quota)
            .cloned()
        else {
            return Ok(());
        };
        let key = def.key();
        let quotas: Vec<(String, Value)> = self
            .objects
            .get(&key)
            .into_iter()
            .flatten()
            .filter(|((qns, _), _)| qns == ns)
            .map(|((_, name), stored)| (name.clone(), stored.obj.clone()))
            .filter(|(_, q)| q["spec"]["scopes"].is_null() && q["spec"]["scopeSelector"].is_null())
            .collect();
        let count = |v: &Value| v.as_str().and_then(|s| s.parse::<u64>().ok());
        let mut charged = Vec::new();
        for (name, quota) in quotas {
            let counted: Vec<&str> = ["pods", "count/pods"]
                .into_iter()
                .filter(|r| !quota["spec"]["hard"][*r].is_null())
                .collect();
            if counted.is_empty() {
                continue;
            }
            let forbidden = |what: String| {
                ApiError::new(
                    403,
                    "Forbidden",
                    format!("pods \"{pod}\" is forbidden: {what}"),
                )
            };
            if quota["status"]["hard"].is_null() {
                return Err(forbidden(format!(
                    "status unknown for quota: {name}, resources: {}",
                    counted.join(",")
                )));
            }
            let mut over = Vec::new();
            for resource in &counted {
                let hard = count(&quota["status"]["hard"][*resource]).unwrap_or(0);
                let used = count(&quota["status"]["used"][*resource]).unwrap_or(0);
                if used + 1 > hard {
                    over.push((*resource, used, hard));
                }
            }
            if !over.is_empty() {
                let list = |f: &dyn Fn(&(&str, u64, u64)) -> String| {
                    over.iter().map(f).collect::<Vec<_>>().join(",")
                };
                return Err(forbidden(format!(
                    "exceeded quota: {name}, requested: {}, used: {}, limited: {}",
                    list(&|(r, _, _)| format!("{r}=1")),
                    list(&|(r, u, _)| format!("{r}={u}")),
                    list(&|(r, _, h)| format!("{r}={h}")),
                )));
            }
            charged.push((
                name,
                counted.iter().map(|r| r.to_string()).collect::<Vec<_>>(),
            ));
        }
        if dry_run {
            return Ok(());
        }
        let t = Target {
            def: def.clone(),
            version: "v1".into(),
            ns: ns.to_string(),
            sub: Some("status".into()),
        };
        for (name, resources) in charged {
            let rv = self.next_rv();
            let Some(stored) = self
                .objects
                .get_mut(&key)
                .and_then(|objects| objects.get_mut(&(ns.to_string(), name)))
            else {
                continue;
            };
            let old = stored.obj.clone();
            for resource in resources {
                let used = count(&stored.obj["status"]["used"][&resource]).unwrap_or(0);
                stored.obj["status"]["used"][&resource] = json!((used + 1).to_string());
            }
            stored.obj["metadata"]["resourceVersion"] = json!(rv.to_string());
            let obj = stored.obj.clone();
            self.emit(&t, EventType::Modified, obj, Some(old));
        }
        Ok(())
    }

    /// `SelfSubjectAccessReview`: allowed unless a denial rule matches or, for an
    /// impersonated user, RBAC does not allow it; nothing is stored.
    fn review_access(&self, t: &Target, mut body: Value, user: Option<&User>) -> Value {
        let attrs = &body["spec"]["resourceAttributes"];
        let field = |k: &str| attrs[k].as_str().unwrap_or("").to_string();
        let denied = self.denials.iter().any(|r| {
            r.matches(
                &field("verb"),
                &field("group"),
                &field("resource"),
                &field("subresource"),
                &field("namespace"),
            )
        }) || user.is_some_and(|user| {
            let resource = match field("subresource").as_str() {
                "" => field("resource"),
                sub => format!("{}/{sub}", field("resource")),
            };
            let request = rbac::Request {
                verb: &field("verb"),
                group: &field("group"),
                resource: &resource,
                namespace: &field("namespace"),
            };
            !rbac::allows(self, user, &request)
        });
        body["apiVersion"] = json!(t.api_version());
        body["kind"] = json!(t.def.kind);
        body["status"] = if denied {
            json!({"allowed": false, "denied": true, "reason": "denied by a rule of the API server double"})
        } else {
            json!({"allowed": true})
        };
        body
    }

    // ---- update ---------------------------------------------------------------------------

    /// PUT.
    pub fn replace(
        &mut self,
        t: &Target,
        name: &str,
        mut body: Value,
        opts: &WriteOpts,
    ) -> Result<Value, ApiError> {
        let old = self.lookup(t, name)?;
        if !body.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request must be an object",
            ));
        }
        Self::check_types(t, &body)?;
        // Custom resources do not allow unconditional updates (`AllowUnconditionalUpdate`).
        if t.def.crd && meta_str(&body, "resourceVersion").is_none() {
            return Err(ApiError::invalid(
                &t.def,
                name,
                vec![Cause::invalid(
                    "metadata.resourceVersion",
                    &json!("0x0"),
                    "must be specified for an update",
                )],
            ));
        }
        if t.def.special == Special::Pod && t.sub.is_none() {
            validate::default_pod(&mut body);
        }
        self.finish_update(t, name, &old, body, None, opts)
    }

    /// PATCH of any type.
    pub fn patch(
        &mut self,
        t: &Target,
        name: &str,
        patch_type: PatchType,
        patch: Value,
        opts: &WriteOpts,
    ) -> Result<Value, ApiError> {
        if patch_type == PatchType::Apply {
            return self.apply(t, name, patch, opts);
        }
        let old = self.lookup(t, name)?;
        let mut candidate = old.obj.clone();
        match patch_type {
            PatchType::Json => {
                let ops: json_patch::Patch = serde_json::from_value(patch)
                    .map_err(|e| ApiError::bad_request(e.to_string()))?;
                for op in &ops.0 {
                    // The apiserver's JSON-patch library lets a `test` for null pass on a
                    // missing member (kube's finalizer helper relies on it).
                    if let json_patch::PatchOperation::Test(test) = op
                        && test.value.is_null()
                        && candidate.pointer(test.path.as_str()).is_none()
                    {
                        continue;
                    }
                    json_patch::patch(&mut candidate, std::slice::from_ref(op))
                        .map_err(|e| ApiError::patch_not_applicable(&e.to_string()))?;
                }
            }
            // Strategic merge is approximated by a JSON merge patch (lists are replaced).
            _ => {
                if !patch.is_object() {
                    return Err(ApiError::bad_request(
                        "the body of a merge patch must be a JSON object",
                    ));
                }
                json_patch::merge(&mut candidate, &patch);
            }
        }
        self.finish_update(t, name, &old, candidate, None, opts)
    }

    fn apply(
        &mut self,
        t: &Target,
        name: &str,
        applied: Value,
        opts: &WriteOpts,
    ) -> Result<Value, ApiError> {
        let manager = opts.manager.clone().unwrap_or_default();
        if !applied.is_object() {
            return Err(ApiError::bad_request(
                "the body of an apply patch must be an object",
            ));
        }
        if let Some(n) = meta_str(&applied, "name")
            && n != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
        let (av, kind) = (
            applied["apiVersion"].as_str().unwrap_or(""),
            applied["kind"].as_str().unwrap_or(""),
        );
        if av != t.api_version() {
            return Err(ApiError::bad_request(format!(
                "Incorrect version specified in apply patch. Specified patch version: {av}, expected: {}",
                t.api_version()
            )));
        }
        if kind != t.def.kind {
            return Err(ApiError::bad_request(format!(
                "Incorrect kind specified in apply patch. Specified patch kind: {kind}, expected: {}",
                t.def.kind
            )));
        }
        let Some(old) = self.stored(&t.def.key(), &t.ns, name).cloned() else {
            if t.sub.is_some() {
                return Err(ApiError::not_found(&t.def, name));
            }
            // A uid in the body names an object that must exist: never create another.
            if let Some(uid) = meta_str(&applied, "uid") {
                return Err(ApiError::conflict(
                    &t.def,
                    name,
                    &format!(
                        "uid mismatch: the provided object specified uid {uid}, and no existing object was found"
                    ),
                ));
            }
            let mut body = applied.clone();
            body["metadata"]["name"] = json!(name);
            return self.create_inner(t, body, opts, Some(&applied));
        };
        let now = timestamp(0);
        let writer = Writer {
            manager: &manager,
            subresource: t.sub.as_deref(),
            api_version: &t.api_version(),
            now: &now,
        };
        let mut owners = old.owners.clone();
        let mut candidate = apply::apply(
            &old.obj,
            &mut owners,
            &applied,
            t.scope(),
            opts.force,
            &writer,
        )?;
        if t.def.special == Special::Pod && t.sub.is_none() && applied["spec"].is_object() {
            candidate["spec"] = validate::overlay(&old.obj["spec"], &applied["spec"]);
        }
        if let Some(rv) = meta_str(&applied, "resourceVersion") {
            candidate["metadata"]["resourceVersion"] = json!(rv);
        }
        self.finish_update(t, name, &old, candidate, Some(owners), opts)
    }

    /// Common tail of every update: preconditions, scope, immutability, generation,
    /// ownership, no-op detection, storage and the watch event.
    fn finish_update(
        &mut self,
        t: &Target,
        name: &str,
        old: &Stored,
        candidate: Value,
        applied_owners: Option<Vec<Owner>>,
        opts: &WriteOpts,
    ) -> Result<Value, ApiError> {
        if let Some(n) = meta_str(&candidate, "name")
            && n != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
        Self::check_namespace(t, &candidate)?;
        // The uid is immutable: a body naming another uid is refused (a status write copies
        // the stored metadata instead, as for custom resources).
        if t.sub.is_none()
            && let Some(uid) = meta_str(&candidate, "uid")
            && Some(uid) != meta_str(&old.obj, "uid")
        {
            return Err(ApiError::invalid(
                &t.def,
                name,
                vec![Cause::invalid(
                    "metadata.uid",
                    &json!(uid),
                    "field is immutable",
                )],
            ));
        }
        // Optimistic concurrency: a resourceVersion in the body is a precondition.
        if let Some(rv) = meta_str(&candidate, "resourceVersion")
            && Some(rv) != meta_str(&old.obj, "resourceVersion")
        {
            return Err(ApiError::stale(&t.def, name));
        }
        let status_separate = t.def.has_status(&t.version);
        let mut next = if t.sub.as_deref() == Some("status") {
            let mut next = old.obj.clone();
            match candidate.get("status") {
                Some(status) => next["status"] = status.clone(),
                None => {
                    if let Some(m) = next.as_object_mut() {
                        m.remove("status");
                    }
                }
            }
            next
        } else {
            let mut next = candidate;
            if !next["metadata"].is_object() {
                next["metadata"] = json!({});
            }
            for k in SERVER_META.iter().chain(&["name", "namespace"]) {
                match old.obj["metadata"].get(*k) {
                    Some(v) => next["metadata"][*k] = v.clone(),
                    None => {
                        if let Some(m) = next["metadata"].as_object_mut() {
                            m.remove(*k);
                        }
                    }
                }
            }
            if status_separate {
                match old.obj.get("status") {
                    Some(s) => next["status"] = s.clone(),
                    None => {
                        if let Some(m) = next.as_object_mut() {
                            m.remove("status");
                        }
                    }
                }
            }
            next
        };
        next["apiVersion"] = old.obj["apiVersion"].clone();
        next["kind"] = old.obj["kind"].clone();

        let mut causes = Vec::new();
        if meta_str(&old.obj, "deletionTimestamp").is_some() {
            let before: Vec<&Value> = old.obj["metadata"]["finalizers"]
                .as_array()
                .map(|a| a.iter().collect())
                .unwrap_or_default();
            let added: Vec<&Value> = next["metadata"]["finalizers"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|f| !before.contains(f))
                .collect();
            if !added.is_empty() {
                causes.push(Cause::forbidden(
                    "metadata.finalizers",
                    &format!(
                        "no new finalizers can be added if the object is being deleted, found new finalizers {}",
                        json!(added)
                    ),
                ));
            }
        }
        if t.def.special == Special::Pod && t.sub.is_none() {
            if !validate::quantities_valid(&next) {
                return Err(ApiError::bad_request(format!(
                    "Pod in version \"v1\" cannot be handled as a Pod: {}",
                    validate::QUANTITY_MSG
                )));
            }
            causes.extend(validate::check_pod_update(&old.obj["spec"], &next["spec"]));
        }
        if !causes.is_empty() {
            return Err(ApiError::invalid(&t.def, name, causes));
        }
        if tracks_generation(&t.def) && spec_changed(&old.obj, &next, status_separate) {
            let generation = old.obj["metadata"]["generation"].as_i64().unwrap_or(0);
            next["metadata"]["generation"] = json!(generation + 1);
        }

        let now = timestamp(0);
        let manager = opts
            .manager
            .clone()
            .unwrap_or_else(|| "unknown".to_string());
        let owners = match applied_owners {
            Some(owners) => owners,
            None => {
                let mut owners = old.owners.clone();
                let writer = Writer {
                    manager: &manager,
                    subresource: t.sub.as_deref(),
                    api_version: &t.api_version(),
                    now: &now,
                };
                apply::record_update(&mut owners, &old.obj, &next, t.scope(), &writer);
                owners
            }
        };
        Ok(self.commit_update(t, name, old, next, owners, opts.dry_run))
    }

    /// Stores an updated object (or removes it when its last finalizer went away during a
    /// deletion) and emits the watch event. A write that changes nothing is a no-op: no new
    /// resourceVersion, no event, like the real storage layer.
    fn commit_update(
        &mut self,
        t: &Target,
        name: &str,
        old: &Stored,
        mut next: Value,
        mut owners: Vec<Owner>,
        dry_run: bool,
    ) -> Value {
        apply::prune(&mut owners, &next);
        next["metadata"]["managedFields"] = apply::managed_fields(&owners);
        if next == old.obj || dry_run {
            return Self::present(t, &next);
        }
        let rv = self.next_rv();
        next["metadata"]["resourceVersion"] = json!(rv.to_string());
        // `ShouldDeleteDuringUpdate`: gone once it is being deleted, with grace 0 and no finalizers.
        let zero_grace = next["metadata"]["deletionGracePeriodSeconds"].as_i64() == Some(0);
        if meta_str(&next, "deletionTimestamp").is_some() && zero_grace && !has_finalizers(&next) {
            self.remove(t, name, next.clone(), old.obj.clone());
            return Self::present(t, &next);
        }
        self.objects.entry(t.def.key()).or_default().insert(
            t.id(name),
            Stored {
                obj: next.clone(),
                owners,
            },
        );
        // An updated CRD serves what it now says (versions, printer columns).
        if t.def.special == Special::Crd
            && let Ok(def) = resources::from_crd(&next)
        {
            let key = def.key();
            if let Some(served) = self.defs.iter_mut().find(|d| d.key() == key) {
                *served = def;
            }
        }
        self.emit(t, EventType::Modified, next.clone(), Some(old.obj.clone()));
        Self::present(t, &next)
    }

    /// Removes an object whose final state (with its new resourceVersion) is `last`.
    fn remove(&mut self, t: &Target, name: &str, last: Value, before: Value) {
        if let Some(m) = self.objects.get_mut(&t.def.key()) {
            m.remove(&t.id(name));
        }
        if t.def.special == Special::Crd
            && let Ok(def) = resources::from_crd(&last)
        {
            let key = def.key();
            self.defs.retain(|d| d.key() != key);
            self.objects.remove(&key);
            self.watchers.retain(|w| w.key != key);
        }
        self.emit(t, EventType::Deleted, last, Some(before));
    }

    // ---- pods/binding ---------------------------------------------------------------------

    /// POST pods/NAME/binding: what the scheduler does to place a pod.
    pub fn bind(
        &mut self,
        t: &Target,
        name: &str,
        body: &Value,
        opts: &WriteOpts,
    ) -> Result<Value, ApiError> {
        let old = self.lookup(t, name)?;
        let node = body["target"]["name"].as_str().unwrap_or("");
        if node.is_empty() {
            return Err(ApiError::invalid(
                &t.def,
                name,
                vec![Cause::required("target.name")],
            ));
        }
        let conflict = |why: String| {
            ApiError::new(
                409,
                "Conflict",
                format!("Operation cannot be fulfilled on pods/binding \"{name}\": {why}"),
            )
        };
        if meta_str(&old.obj, "deletionTimestamp").is_some() {
            return Err(conflict(format!(
                "pod {name} is being deleted, cannot be assigned to a host"
            )));
        }
        if let Some(current) = old.obj["spec"]["nodeName"]
            .as_str()
            .filter(|n| !n.is_empty())
        {
            return Err(conflict(format!(
                "pod {name} is already assigned to node \"{current}\""
            )));
        }
        let mut next = old.obj.clone();
        next["spec"]["nodeName"] = json!(node);
        let scheduled = json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": timestamp(0)});
        let conditions = next["status"]
            .as_object_mut()
            .map(|s| s.entry("conditions").or_insert_with(|| json!([])));
        if let Some(Value::Array(list)) = conditions {
            list.retain(|c| c["type"] != "PodScheduled");
            list.push(scheduled);
        }
        self.commit_update(t, name, &old, next, old.owners.clone(), opts.dry_run);
        Ok(
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
        )
    }

    // ---- delete ---------------------------------------------------------------------------

    pub fn delete(&mut self, t: &Target, name: &str, opts: &DeleteOpts) -> Result<Value, ApiError> {
        let old = self.lookup(t, name)?;
        let meta = &old.obj["metadata"];
        if let Some(uid) = &opts.uid
            && Some(uid.as_str()) != meta["uid"].as_str()
        {
            return Err(ApiError::conflict(
                &t.def,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta["uid"].as_str().unwrap_or("")
                ),
            ));
        }
        if let Some(rv) = &opts.resource_version
            && Some(rv.as_str()) != meta["resourceVersion"].as_str()
        {
            return Err(ApiError::conflict(
                &t.def,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in meta: {}",
                    meta["resourceVersion"].as_str().unwrap_or("")
                ),
            ));
        }
        // Only pods delete gracefully; an unscheduled or terminated pod goes at once
        // (`podStrategy.CheckGracefulDelete`).
        let grace = if t.def.special == Special::Pod {
            let bound = old.obj["spec"]["nodeName"]
                .as_str()
                .is_some_and(|n| !n.is_empty());
            let terminal = matches!(
                old.obj["status"]["phase"].as_str(),
                Some("Succeeded" | "Failed")
            );
            if !bound || terminal {
                0
            } else {
                opts.grace
                    .or_else(|| old.obj["spec"]["terminationGracePeriodSeconds"].as_i64())
                    .unwrap_or(30)
                    .max(0)
            }
        } else {
            0
        };
        let terminating = meta_str(&old.obj, "deletionTimestamp").is_some();
        let current_grace = meta["deletionGracePeriodSeconds"].as_i64().unwrap_or(0);
        if terminating && grace >= current_grace {
            return Ok(Self::present(t, &old.obj));
        }
        if !terminating && grace == 0 && !has_finalizers(&old.obj) {
            let mut last = old.obj.clone();
            if opts.dry_run {
                return Ok(Self::present(t, &last));
            }
            let rv = self.next_rv();
            last["metadata"]["resourceVersion"] = json!(rv.to_string());
            self.remove(t, name, last.clone(), old.obj.clone());
            return Ok(Self::present(t, &last));
        }
        // Graceful or finalizer-gated: mark, and keep the object until the grace period is
        // cut to zero and the finalizers are gone. Setting deletionTimestamp bumps generation.
        let mut next = old.obj.clone();
        next["metadata"]["deletionTimestamp"] = json!(timestamp(grace));
        next["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
        if !terminating && let Some(g) = next["metadata"]["generation"].as_i64() {
            next["metadata"]["generation"] = json!(g + 1);
        }
        Ok(self.commit_update(t, name, &old, next, old.owners.clone(), opts.dry_run))
    }

    /// DELETE on a collection: each selected object is deleted as by a single DELETE.
    pub fn delete_collection(
        &mut self,
        t: &Target,
        keep: impl Fn(&Value) -> bool,
        opts: &DeleteOpts,
    ) -> Result<Value, ApiError> {
        let names: Vec<(String, String)> = self
            .objects_of(&t.def.key(), &t.ns)
            .into_iter()
            .filter(|o| keep(o))
            .map(|o| {
                (
                    meta_str(o, "namespace").unwrap_or("").to_string(),
                    meta_str(o, "name").unwrap_or("").to_string(),
                )
            })
            .collect();
        let mut items = Vec::new();
        for (ns, name) in names {
            let target = Target { ns, ..t.clone() };
            items.push(self.delete(&target, &name, opts)?);
        }
        Ok(json!({
            "kind": format!("{}List", t.def.kind),
            "apiVersion": t.api_version(),
            "metadata": {"resourceVersion": self.rv.to_string()},
            "items": items,
        }))
    }
}
