//! What the cluster's admin allows into a browser pod beyond its BrowserConfig (docs/security.md):
//! the pod security ceiling, and the fence around the labels and annotations that session
//! options and a Browser's creator bring. A BrowserConfig is written by the team that owns
//! the namespace; a Browser and its options come from the hub and every test client, so what
//! they bring may not reach labels or annotations that Kubernetes, admission webhooks or the
//! operator act on.

use super::security::Level;

/// Domains whose labels and annotations belong to Kubernetes and to the operator.
const RESERVED_DOMAINS: [&str; 3] = ["kubernetes.io", "k8s.io", "selenosis.io"];

/// Domains of admission webhooks that inject containers or credentials into a pod, or change
/// its networking, when they find their labels or annotations on it.
const INJECTOR_DOMAINS: [&str; 6] = [
    "istio.io",
    "linkerd.io",
    "hashicorp.com",
    "dapr.io",
    "opentelemetry.io",
    "kuma.io",
];

/// The hub's attribution label on a Browser: the one label in a reserved domain a Browser
/// brings to its pod.
pub const HUB_LABELS: [&str; 1] = [crate::api::keys::LABEL_OWNER];

/// Whether `key` is a label a Browser always brings to its pod: the hub's attribution, and
/// the owner label of fair share (`--fair-share-label`), by which a pod tells whose slot it
/// holds.
pub fn attribution(key: &str) -> bool {
    HUB_LABELS.contains(&key) || key == crate::api::owner::label()
}

/// The fence and the ceiling, as the flags set them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    /// `--pod-security-level`.
    pub level: Level,
    pub fence: Fence,
}

/// Which label and annotation keys Browsers and session options may bring to a pod. A domain
/// covers its subdomains: `kubernetes.io` also covers `app.kubernetes.io`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    reserved_labels: Vec<String>,
    denied_annotations: Vec<String>,
    allowed_annotations: Vec<String>,
}

impl Default for Fence {
    fn default() -> Self {
        Self::new(&[], &[], &[])
    }
}

/// A prefix as an admin writes it (`example.com`, `example.com/`, ` Example.com `).
fn domain(prefix: &str) -> String {
    prefix.trim().trim_end_matches('/').to_ascii_lowercase()
}

/// The domain of `key`'s prefix that `domains` holds, written as the prefix it covers
/// (`kubernetes.io/` or `*.kubernetes.io/`).
fn covering(key: &str, domains: &[String]) -> Option<String> {
    let (prefix, _) = key.split_once('/')?;
    domains.iter().find_map(|d| {
        if prefix == d {
            Some(format!("{d}/"))
        } else {
            prefix
                .strip_suffix(d.as_str())
                .filter(|rest| rest.ends_with('.'))
                .map(|_| format!("*.{d}/"))
        }
    })
}

impl Fence {
    /// The built-in domains, plus further label domains to reserve, annotation domains to deny,
    /// and annotation domains to allow despite the built-in ones (`--reserved-label-prefix`,
    /// `--denied-annotation-prefix`, `--allowed-annotation-prefix`).
    pub fn new(
        reserved_labels: &[String],
        denied_annotations: &[String],
        allowed_annotations: &[String],
    ) -> Self {
        let built_in = || {
            RESERVED_DOMAINS
                .iter()
                .chain(&INJECTOR_DOMAINS)
                .map(|d| d.to_string())
        };
        let given = |prefixes: &[String]| {
            prefixes
                .iter()
                .map(|p| domain(p))
                .filter(|d| !d.is_empty())
                .collect::<Vec<_>>()
        };
        Self {
            reserved_labels: built_in().chain(given(reserved_labels)).collect(),
            denied_annotations: built_in().chain(given(denied_annotations)).collect(),
            allowed_annotations: given(allowed_annotations),
        }
    }

    /// The reserved prefix `key` falls under, for the refusal's message; `None` when session
    /// options and Browsers may set that label.
    pub fn reserved_label(&self, key: &str) -> Option<String> {
        covering(key, &self.reserved_labels)
    }

    /// Whether a label of the Browser passes to its pod.
    pub fn passes_browser_label(&self, key: &str) -> bool {
        attribution(key) || self.reserved_label(key).is_none()
    }

    /// Whether an annotation of the Browser passes to its pod.
    pub fn passes_annotation(&self, key: &str) -> bool {
        covering(key, &self.denied_annotations).is_none()
            || covering(key, &self.allowed_annotations).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn reserved_label_domains_cover_their_subdomains_and_name_the_prefix() {
        let fence = Fence::default();
        for (key, prefix) in [
            ("kubernetes.io/hostname", "kubernetes.io/"),
            ("app.kubernetes.io/name", "*.kubernetes.io/"),
            ("node-role.kubernetes.io/x", "*.kubernetes.io/"),
            ("k8s.io/x", "k8s.io/"),
            ("policy.k8s.io/x", "*.k8s.io/"),
            ("selenosis.io/browser", "selenosis.io/"),
            ("browser.selenosis.io/x", "*.selenosis.io/"),
            ("sidecar.istio.io/inject", "*.istio.io/"),
            ("istio.io/rev", "istio.io/"),
            ("vault.hashicorp.com/agent-inject", "*.hashicorp.com/"),
        ] {
            assert_eq!(fence.reserved_label(key).as_deref(), Some(prefix), "{key}");
        }
        for key in [
            "team",
            "example.com/team",
            "notkubernetes.io/x",
            "k8s.io.example.com/x",
        ] {
            assert_eq!(fence.reserved_label(key), None, "{key}");
        }
    }

    #[test]
    fn the_admin_reserves_and_allows_further_prefixes() {
        let fence = Fence::new(
            &strings(&["corp.example.com/", " Netpol.Example.com "]),
            &strings(&["inject.example.org"]),
            &strings(&["sidecar.istio.io/"]),
        );
        assert_eq!(
            fence.reserved_label("corp.example.com/team").as_deref(),
            Some("corp.example.com/")
        );
        assert_eq!(
            fence.reserved_label("a.netpol.example.com/x").as_deref(),
            Some("*.netpol.example.com/")
        );
        assert!(!fence.passes_annotation("inject.example.org/enabled"));
        assert!(fence.passes_annotation("sidecar.istio.io/inject"));
        assert!(!fence.passes_annotation("proxy.istio.io/config"));
        // Allowing annotations does not open labels.
        assert!(fence.reserved_label("sidecar.istio.io/inject").is_some());
    }

    #[test]
    fn browser_labels_pass_unless_reserved_but_the_hubs_owner_label_does() {
        let fence = Fence::default();
        assert!(fence.passes_browser_label("selenosis.io/owner"));
        assert!(fence.passes_browser_label("team"));
        assert!(!fence.passes_browser_label("selenosis.io/browser"));
        assert!(!fence.passes_browser_label("kubernetes.io/metadata.name"));
    }

    #[test]
    fn security_relevant_annotations_never_pass_by_default() {
        let fence = Fence::default();
        for key in [
            "container.apparmor.security.beta.kubernetes.io/browser",
            "seccomp.security.alpha.kubernetes.io/pod",
            "sidecar.istio.io/inject",
            "vault.hashicorp.com/agent-inject",
            "linkerd.io/inject",
            "instrumentation.opentelemetry.io/inject-java",
            "kubectl.kubernetes.io/last-applied-configuration",
        ] {
            assert!(!fence.passes_annotation(key), "{key}");
        }
        for key in ["note", "example.com/build", "ci.example.com/job"] {
            assert!(fence.passes_annotation(key), "{key}");
        }
    }
}
