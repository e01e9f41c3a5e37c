//! Names, labels, annotations and finalizers shared with the rest of the Selenosis stack
//! (docs/behaviour.md, "Labels, annotations and finalizer").

/// Finalizer the operator keeps on every Browser until its pod is gone.
pub const FINALIZER: &str = "browserpod.selenosis.io/finalizer";
/// Finalizer the Go browser-controller (up to v0.0.x) puts on every BrowserConfig it sees and
/// removes when the config is deleted. After a switch from it nothing else would: the operator
/// releases it from BrowserConfigs being deleted (docs/compatibility.md).
pub const GO_CONFIG_FINALIZER: &str = "browserconfig.selenosis.io/finalizer";
/// Label carrying the Browser name, on the Browser and on its Pod.
pub const LABEL_BROWSER: &str = "selenosis.io/browser";
/// Label carrying `spec.browserName`.
pub const LABEL_BROWSER_NAME: &str = "selenosis.io/browser.name";
/// Label carrying `spec.browserVersion`.
pub const LABEL_BROWSER_VERSION: &str = "selenosis.io/browser.version";
/// Pod label the operator's pod watch selects on.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Value of [`LABEL_MANAGED_BY`] on the operator's pods.
pub const MANAGER: &str = "browser-controller";
/// Browser annotation with per-session options (docs/configuration.md, "Per-session options");
/// never copied to the pod.
pub const ANNOTATION_OPTIONS: &str = "selenosis.io/options";
/// Browser label set by the hub; copied to the pod like any Browser label.
pub const LABEL_OWNER: &str = "selenosis.io/owner";
/// Field manager of every server-side apply the operator sends.
pub const FIELD_MANAGER: &str = "browser-controller";
/// Field manager of the label-only apply that adopts a pod another controller created
/// (a Go browser-controller). Kept apart from [`FIELD_MANAGER`] so that the metadata-only
/// body never releases spec fields [`FIELD_MANAGER`] owns on a pod the operator created.
pub const ADOPTION_FIELD_MANAGER: &str = "browser-controller-adoption";
/// Name of the main container of a browser pod.
pub const BROWSER_CONTAINER: &str = "browser";
/// Name of the session proxy sidecar; critical like the browser container.
pub const SELENIFEROUS_CONTAINER: &str = "seleniferous";
/// Containers whose termination ends the session (docs/behaviour.md, "The Pod of a Browser").
pub const CRITICAL_CONTAINERS: [&str; 2] = [BROWSER_CONTAINER, SELENIFEROUS_CONTAINER];

/// Standard label naming the part an object plays; on the pre-pull DaemonSets and their pods.
pub const LABEL_COMPONENT: &str = "app.kubernetes.io/component";
/// Value of [`LABEL_COMPONENT`] on the pre-pull DaemonSets and their pods.
pub const PREPULL_COMPONENT: &str = "image-prepull";
/// Label carrying the name of a pre-pull DaemonSet on its pods (the DaemonSet's selector).
pub const LABEL_PREPULL: &str = "selenosis.io/prepull";
/// Annotation on a pre-pull DaemonSet: hash of what the operator applied, so that an
/// unchanged DaemonSet is not applied again.
pub const ANNOTATION_PREPULL_HASH: &str = "selenosis.io/prepull-hash";

/// Default API group of both kinds.
pub const DEFAULT_GROUP: &str = "selenosis.io";
/// API group of `Browser` in the split layout used by the selenosis Helm chart.
pub const SPLIT_BROWSER_GROUP: &str = "browser.selenosis.io";
/// API group of `BrowserConfig` in the split layout used by the selenosis Helm chart.
pub const SPLIT_BROWSERCONFIG_GROUP: &str = "browserconfig.selenosis.io";
/// The served version of both kinds.
pub const VERSION: &str = "v1";
/// Kind name of the session resource.
pub const BROWSER_KIND: &str = "Browser";
/// Kind name of the configuration resource.
pub const BROWSERCONFIG_KIND: &str = "BrowserConfig";

/// Label selector of the operator's pod watch.
pub fn managed_pods_selector() -> String {
    format!("{LABEL_MANAGED_BY}={MANAGER}")
}

/// Label selector of the operator's watch of its pre-pull DaemonSets.
pub fn prepull_selector() -> String {
    format!("{LABEL_MANAGED_BY}={MANAGER},{LABEL_COMPONENT}={PREPULL_COMPONENT}")
}
