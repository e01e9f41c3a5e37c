//! RBAC for impersonated requests (`Impersonate-User`, as a kubeconfig's `as:` sends): the
//! stored Roles, ClusterRoles and their bindings decide, as the API server's RBAC authorizer
//! does. Requests without impersonation are the admin's and always allowed; so are discovery,
//! the OpenAPI documents and SelfSubjectAccessReviews, which Kubernetes grants every
//! authenticated identity by default (`system:discovery`, `system:basic-user`).

use serde_json::Value;

use super::resources::ResKey;
use super::store::State;

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// The identity a request acts as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub groups: Vec<String>,
}

impl User {
    /// The user of `Impersonate-User`, with the groups Kubernetes gives it: every identity is
    /// `system:authenticated`; a ServiceAccount also in `system:serviceaccounts` and
    /// `system:serviceaccounts:<namespace>`.
    pub fn impersonated(name: &str) -> Self {
        let mut groups = vec!["system:authenticated".to_string()];
        if let Some(rest) = name.strip_prefix("system:serviceaccount:")
            && let Some((ns, _)) = rest.split_once(':')
        {
            groups.push("system:serviceaccounts".to_string());
            groups.push(format!("system:serviceaccounts:{ns}"));
        }
        Self {
            name: name.to_string(),
            groups,
        }
    }

    fn is(&self, subject: &Value) -> bool {
        let name = subject["name"].as_str().unwrap_or_default();
        match subject["kind"].as_str() {
            Some("ServiceAccount") => {
                let ns = subject["namespace"].as_str().unwrap_or_default();
                self.name == format!("system:serviceaccount:{ns}:{name}")
            }
            Some("User") => self.name == name,
            Some("Group") => self.groups.iter().any(|g| g == name),
            _ => false,
        }
    }
}

/// What is asked: `resource` is `pods` or `browsers/status`; `namespace` is empty for
/// cluster-scoped resources and for requests across all namespaces.
pub struct Request<'a> {
    pub verb: &'a str,
    pub group: &'a str,
    pub resource: &'a str,
    pub namespace: &'a str,
}

fn strings(value: &Value) -> impl Iterator<Item = &str> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

fn rule_allows(rule: &Value, request: &Request) -> bool {
    let has = |key: &str, wanted: &str| strings(&rule[key]).any(|v| v == "*" || v == wanted);
    has("verbs", request.verb)
        && has("apiGroups", request.group)
        && has("resources", request.resource)
        // Rules naming objects never grant lists, watches or creates of unnamed objects.
        && rule.get("resourceNames").is_none()
}

fn role_allows(role: Option<&Value>, request: &Request) -> bool {
    role.is_some_and(|role| rules(role).any(|rule| rule_allows(rule, request)))
}

fn rules(role: &Value) -> impl Iterator<Item = &Value> {
    role["rules"].as_array().into_iter().flatten()
}

fn key(plural: &str) -> ResKey {
    ResKey {
        group: RBAC_GROUP.to_string(),
        plural: plural.to_string(),
    }
}

fn named<'a>(state: &'a State, plural: &str, ns: &str, name: &str) -> Option<&'a Value> {
    state.stored(&key(plural), ns, name).map(|s| &s.obj)
}

/// Whether `user` may do `request`.
pub fn allows(state: &State, user: &User, request: &Request) -> bool {
    let binds = |binding: &&Value| subjects(binding).any(|s| user.is(s));
    let cluster_wide = state
        .objects_of(&key("clusterrolebindings"), "")
        .into_iter()
        .filter(binds)
        .any(|b| {
            let role = b["roleRef"]["name"].as_str().unwrap_or_default();
            role_allows(named(state, "clusterroles", "", role), request)
        });
    if cluster_wide || request.namespace.is_empty() {
        return cluster_wide;
    }
    state
        .objects_of(&key("rolebindings"), request.namespace)
        .into_iter()
        .filter(binds)
        .any(|b| {
            let role = b["roleRef"]["name"].as_str().unwrap_or_default();
            match b["roleRef"]["kind"].as_str() {
                Some("ClusterRole") => role_allows(named(state, "clusterroles", "", role), request),
                _ => role_allows(named(state, "roles", request.namespace, role), request),
            }
        })
}

fn subjects(binding: &Value) -> impl Iterator<Item = &Value> {
    binding["subjects"].as_array().into_iter().flatten()
}

/// The message of the API server's 403 for a denied request.
pub fn forbidden_message(user: &User, request: &Request, name: Option<&str>) -> String {
    let (resource, sub) = request
        .resource
        .split_once('/')
        .unwrap_or((request.resource, ""));
    let qualified = if request.group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{}", request.group)
    };
    let object = name.map(|n| format!(" \"{n}\"")).unwrap_or_default();
    let sub = if sub.is_empty() {
        String::new()
    } else {
        format!("/{sub}")
    };
    let scope = if request.namespace.is_empty() {
        "at the cluster scope".to_string()
    } else {
        format!("in the namespace \"{}\"", request.namespace)
    };
    format!(
        "{qualified}{object} is forbidden: User \"{}\" cannot {} resource \"{resource}{sub}\" in API group \"{}\" {scope}",
        user.name, request.verb, request.group
    )
}
