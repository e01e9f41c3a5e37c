//! An in-process Kubernetes API server double.
//!
//! Serves the core resources the operator uses plus any installed CRD, with real API semantics
//! where the operator depends on them: one global resourceVersion counter, watches with replay,
//! bookmarks and 410 Gone, server-side apply with per-manager ownership, the status
//! subresource, finalizers and graceful pod deletion, dry-run, pod validation, discovery, the
//! Pod's OpenAPI schema (v3 and v2) and server-side apply's rejection of undeclared fields.
//! Talk to it through [`ApiServer::client`] (in process) or [`ApiServer::serve`] (TCP).
//!
//! Tables for custom resources (`kubectl get`) and core/v1 Events as a read-only view of
//! events.k8s.io/v1 Events (`kubectl describe`) are served too.
//!
//! RBAC applies to impersonated requests (`Impersonate-User`, a kubeconfig's `as:`): the stored
//! Roles, ClusterRoles and bindings decide, for the requests and for their
//! `SelfSubjectAccessReview`s. Requests without impersonation are the admin's.
//!
//! Not emulated: authentication, admission beyond pod defaults, CRD schema validation, garbage
//! collection (like envtest), and paged lists as one snapshot (`limit`/`continue` cut the
//! current state).

mod apply;
mod error;
mod openapi;
mod rbac;
mod resources;
mod routes;
mod selector;
mod store;
mod table;
mod validate;
mod watch;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::oneshot;

pub use error::ApiError;
pub use store::StreamingLists;
use store::{State, WriteOpts};

type Shared = Arc<Mutex<State>>;

/// The state lock; never held across an `.await`.
fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

/// An error the next matching requests get instead of being served.
///
/// `verb` is the Kubernetes verb (`get`, `list`, `watch`, `create`, `update`, `patch`,
/// `delete`, `deletecollection`); `create` also matches a server-side apply of an object that
/// does not exist yet, because admission (quota, policy) sees that as a create.
#[derive(Clone, Debug)]
pub struct Fault {
    pub verb: String,
    /// `pods`, `browsers` or `browsers.selenosis.io`.
    pub resource: String,
    /// `None` matches only the main resource.
    pub subresource: Option<String>,
    /// `None` matches any namespace.
    pub namespace: Option<String>,
    /// `None` matches any object.
    pub name: Option<String>,
    pub status: u16,
    pub reason: String,
    pub message: String,
    /// How many requests fail; `None` for all of them.
    pub times: Option<usize>,
}

impl Fault {
    /// A fault on every matching request until [`ApiServer::clear_faults`].
    pub fn new(verb: &str, resource: &str, status: u16, reason: &str, message: &str) -> Self {
        Self {
            verb: verb.to_string(),
            resource: resource.to_string(),
            subresource: None,
            namespace: None,
            name: None,
            status,
            reason: reason.to_string(),
            message: message.to_string(),
            times: None,
        }
    }

    /// Fails only the next `n` matching requests.
    pub fn times(mut self, n: usize) -> Self {
        self.times = Some(n);
        self
    }

    pub fn subresource(mut self, sub: &str) -> Self {
        self.subresource = Some(sub.to_string());
        self
    }

    pub fn object(mut self, namespace: &str, name: &str) -> Self {
        self.namespace = Some(namespace.to_string());
        self.name = Some(name.to_string());
        self
    }
}

/// A `SelfSubjectAccessReview` rule answering `allowed: false`; `*` matches anything.
#[derive(Clone, Debug)]
pub struct AccessRule {
    pub verb: String,
    pub group: String,
    /// `pods`, or `browsers/status` for a subresource: like an RBAC rule, a rule on the
    /// resource does not cover its subresources.
    pub resource: String,
    /// `None` matches reviews in any namespace; `Some` matches that namespace and reviews for
    /// all namespaces.
    pub namespace: Option<String>,
}

impl AccessRule {
    fn matches(
        &self,
        verb: &str,
        group: &str,
        resource: &str,
        subresource: &str,
        namespace: &str,
    ) -> bool {
        let m = |rule: &str, v: &str| rule == "*" || rule == v;
        let full = if subresource.is_empty() {
            resource.to_string()
        } else {
            format!("{resource}/{subresource}")
        };
        m(&self.verb, verb)
            && m(&self.group, group)
            && m(&self.resource, &full)
            // A review for all namespaces needs the permission in every one of them.
            && self
                .namespace
                .as_deref()
                .is_none_or(|ns| namespace.is_empty() || ns == namespace)
    }
}

/// One request as the server saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestRecord {
    /// The impersonated user the request acted as; `None` for the admin.
    pub user: Option<String>,
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`, or
    /// `discovery` for `/version`, `/api*` and `/apis*` documents and unknown paths.
    pub verb: String,
    pub group: String,
    /// Plural; empty for discovery.
    pub resource: String,
    pub subresource: Option<String>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub field_manager: Option<String>,
    pub dry_run: bool,
    /// `apply`, `merge`, `json` or `strategic` for PATCH.
    pub patch_type: Option<String>,
    /// HTTP status of the response.
    pub status: u16,
    pub path: String,
    /// A watch that asked for its initial list streamed (`sendInitialEvents=true`).
    pub streamed_list: bool,
}

impl RequestRecord {
    /// Whether this request changed (or tried to change) stored state.
    pub fn is_write(&self) -> bool {
        matches!(
            self.verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        )
    }
}

/// Handle to one API server double; clones share the same state.
#[derive(Clone)]
pub struct ApiServer {
    shared: Shared,
}

impl Default for ApiServer {
    fn default() -> Self {
        Self::new()
    }
}

impl ApiServer {
    /// A server with the built-in resources and the `default` and `kube-system` namespaces.
    pub fn new() -> Self {
        Self {
            shared: Arc::new(Mutex::new(State::new())),
        }
    }

    /// `gitVersion` reported by `/version` (default `v1.34.0`).
    pub fn set_git_version(&self, version: &str) {
        lock(&self.shared).git_version = version.to_string();
    }

    /// Makes the served Pod schema lack `field` of `definition` (e.g.
    /// `io.k8s.api.core.v1.Container`, `restartPolicy`), like an older cluster. Panics when
    /// the schema has no such field: the test would check nothing.
    pub fn remove_schema_field(&self, definition: &str, field: &str) {
        assert!(
            lock(&self.shared).openapi.remove_field(definition, field),
            "the Pod schema has no field {field} in {definition}"
        );
    }

    /// Whether `/openapi/v3` (and `/openapi/v3/api/v1`) and `/openapi/v2` are served; one
    /// that is not answers 404, as neither is by default.
    pub fn serve_openapi(&self, v3: bool, v2: bool) {
        let mut state = lock(&self.shared);
        state.openapi.serve_v3 = v3;
        state.openapi.serve_v2 = v2;
    }

    /// Makes server-side apply of a Pod (dry-run included) carrying a field the served schema
    /// lacks fail with `status` (500 as Kubernetes 1.24 answers, 400 or 422 as later
    /// versions do) and the real message (`... field not declared in schema`). Off by default.
    pub fn check_pod_fields(&self, status: u16) {
        lock(&self.shared).openapi.check = Some(status);
    }

    /// Interval between watch bookmarks (default 1s; the first comes right away).
    pub fn set_bookmark_interval(&self, interval: Duration) {
        lock(&self.shared).bookmark_interval = interval;
    }

    /// What a watch asking for its initial list streamed (`sendInitialEvents`) gets
    /// (default: [`StreamingLists::Served`]).
    pub fn streaming_lists(&self, answer: StreamingLists) {
        lock(&self.shared).streaming_lists = answer;
    }

    /// The axum router serving the API.
    pub fn router(&self) -> axum::Router {
        routes::router(self.shared.clone())
    }

    /// A client talking to this server in process. Needs a Tokio runtime.
    pub fn client(&self) -> kube::Client {
        kube::Client::new(self.router(), "default")
    }

    /// Serves the API on `127.0.0.1` on a free port, for clients in other processes.
    pub async fn serve(&self) -> std::io::Result<ServeHandle> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (tx, rx) = oneshot::channel::<()>();
        let router = self.router();
        tokio::spawn(async move {
            let shutdown = async {
                let _ = rx.await;
            };
            if let Err(e) = axum::serve(listener, router)
                .with_graceful_shutdown(shutdown)
                .await
            {
                tracing::warn!(error = %e, "API server double stopped");
            }
        });
        Ok(ServeHandle {
            addr,
            shutdown: Some(tx),
            server: self.clone(),
        })
    }

    /// Installs a CustomResourceDefinition (as if created through the API).
    pub fn install_crd(&self, crd: &Value) -> Result<(), ApiError> {
        let mut state = lock(&self.shared);
        let target = state
            .target_for("customresourcedefinitions", "")
            .ok_or_else(ApiError::no_route)?;
        state.create(&target, crd.clone(), &WriteOpts::default())?;
        Ok(())
    }

    /// Makes matching requests fail; see [`Fault`].
    pub fn inject(&self, fault: Fault) {
        lock(&self.shared).faults.push(fault);
    }

    pub fn clear_faults(&self) {
        lock(&self.shared).faults.clear();
    }

    /// `SelfSubjectAccessReview`s for `verb` on `group`/`resource` (`browsers/status` for a
    /// subresource) answer `allowed: false`, in every namespace.
    pub fn deny(&self, verb: &str, group: &str, resource: &str) {
        lock(&self.shared).denials.push(AccessRule {
            verb: verb.to_string(),
            group: group.to_string(),
            resource: resource.to_string(),
            namespace: None,
        });
    }

    /// Like [`ApiServer::deny`], for reviews in `namespace` (and for all namespaces).
    pub fn deny_in(&self, namespace: &str, verb: &str, group: &str, resource: &str) {
        lock(&self.shared).denials.push(AccessRule {
            verb: verb.to_string(),
            group: group.to_string(),
            resource: resource.to_string(),
            namespace: Some(namespace.to_string()),
        });
    }

    /// Makes the server answer every request with 503 until it is made available again,
    /// closing every open watch, as an API server that goes down does. Watches resuming
    /// afterwards from a resourceVersion of before get 410 Gone, as from a restarted server
    /// whose watch cache starts anew.
    pub fn set_unavailable(&self, unavailable: bool) {
        let mut state = lock(&self.shared);
        state.unavailable = unavailable;
        state.watchers.clear();
        if !unavailable {
            // The restarted server's watch cache starts at a revision of its own: whatever a
            // client saw before is too old now.
            state.rv += 1;
            state.compact();
        }
    }

    /// Makes `/readyz` answer 500 (or 200 again), as a kube-apiserver's does while it starts:
    /// it serves requests already, before its CRDs and RBAC are loaded.
    pub fn set_starting(&self, starting: bool) {
        lock(&self.shared).starting = starting;
    }

    /// Holds back the watch events of `resource` (`browsers`, `pods`): its watches stay open
    /// and quiet, as those of a lagging watch cache, until [`ApiServer::release_watches`]
    /// delivers what they missed, in order, stale as it then is.
    pub fn hold_watches(&self, resource: &str) {
        let mut state = lock(&self.shared);
        if let Some(key) = state.resolve(resource).map(|d| d.key()) {
            state.held.push(key);
        }
    }

    /// Delivers the watch events held back since [`ApiServer::hold_watches`].
    pub fn release_watches(&self) {
        let mut state = lock(&self.shared);
        state.held.clear();
        let state = &mut *state;
        watch::release(&mut state.watchers, &state.held);
    }

    /// Closes every open watch stream; clients have to re-watch.
    pub fn drop_watches(&self) {
        lock(&self.shared).watchers.clear();
    }

    /// Ends every open watch stream with `410 Expired`; clients have to list again.
    pub fn expire_watches(&self) {
        let mut state = lock(&self.shared);
        let rv = state.rv;
        watch::expire(&mut state.watchers, rv);
    }

    /// Number of open watch streams.
    pub fn open_watches(&self) -> usize {
        lock(&self.shared).watchers.len()
    }

    /// Forgets the event log (like an etcd compaction): a watch resuming from any earlier
    /// resourceVersion gets 410 Gone and the client has to relist.
    pub fn compact(&self) {
        lock(&self.shared).compact();
    }

    /// Every request so far, in order.
    pub fn requests(&self) -> Vec<RequestRecord> {
        lock(&self.shared).requests.clone()
    }

    /// How many times each pod of `namespace` was created (a create, or an apply answered 201;
    /// dry runs store nothing), by the request log: [`crate::controlplane::ControlPlane::pod_creates`]'s
    /// twin. A create without a name counts under "".
    pub fn pod_creates(&self, namespace: &str) -> std::collections::BTreeMap<String, usize> {
        self.pod_creates_answered(namespace, 201)
    }

    /// How many creates (or applies) of each pod of `namespace`, dry runs left out, the server
    /// answered with `code`: 201 counts creations, 403 refusals.
    pub fn pod_creates_answered(
        &self,
        namespace: &str,
        code: u16,
    ) -> std::collections::BTreeMap<String, usize> {
        let mut creates = std::collections::BTreeMap::new();
        for r in self.requests() {
            if r.resource == "pods"
                && r.subresource.is_none()
                && r.namespace.as_deref() == Some(namespace)
                && matches!(r.verb.as_str(), "create" | "patch")
                && r.status == code
                && !r.dry_run
                && let Some(name) = r.name.or_else(|| (r.verb == "create").then(String::new))
            {
                *creates.entry(name).or_insert(0) += 1;
            }
        }
        creates
    }

    /// The stored object; `ns` is empty for cluster-scoped resources.
    pub fn get(&self, resource: &str, ns: &str, name: &str) -> Option<Value> {
        let state = lock(&self.shared);
        let t = state.target_for(resource, ns)?;
        state.get(&t, name).ok()
    }

    /// Stored objects of a resource in `ns`, or in all namespaces when `ns` is empty.
    pub fn list(&self, resource: &str, ns: &str) -> Vec<Value> {
        let state = lock(&self.shared);
        let Some(t) = state.target_for(resource, ns) else {
            return Vec::new();
        };
        state
            .objects_of(&t.def.key(), &t.ns)
            .into_iter()
            .map(|o| State::present(&t, o))
            .collect()
    }

    /// The current (global) resourceVersion.
    pub fn resource_version(&self) -> u64 {
        lock(&self.shared).rv
    }
}

/// A served API; stops accepting connections and closes watches when dropped.
pub struct ServeHandle {
    addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    server: ApiServer,
}

impl ServeHandle {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Writes a kubeconfig pointing at this server (plain HTTP, no credentials).
    pub fn write_kubeconfig(&self, path: &Path) -> std::io::Result<()> {
        self.write_kubeconfig_as(path, None)
    }

    /// Like [`ServeHandle::write_kubeconfig`]; with `impersonate`, requests act as that user
    /// and RBAC applies to them.
    pub fn write_kubeconfig_as(
        &self,
        path: &Path,
        impersonate: Option<&str>,
    ) -> std::io::Result<()> {
        self.write_kubeconfig_via(path, &self.url(), impersonate)
    }

    /// Like [`ServeHandle::write_kubeconfig_as`], reaching this server through `server` (a
    /// proxy in front of it).
    pub fn write_kubeconfig_via(
        &self,
        path: &Path,
        server: &str,
        impersonate: Option<&str>,
    ) -> std::io::Result<()> {
        let user = match impersonate {
            Some(name) => format!("\n    as: \"{name}\""),
            None => " {}".to_string(),
        };
        let config = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: double\n  cluster:\n    server: {server}\ncontexts:\n- name: double\n  context:\n    cluster: double\n    user: double\n    namespace: default\ncurrent-context: double\nusers:\n- name: double\n  user:{user}\n"
        );
        std::fs::write(path, config)
    }
}

impl Drop for ServeHandle {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.server.drop_watches();
    }
}
