//! What another controller left on a BrowserConfig that the operator must take off after a
//! switch (docs/compatibility.md, "Taking over from the Go controller"). The Go
//! browser-controller (v0.0.x) puts its finalizer `browserconfig.selenosis.io/finalizer` on
//! every BrowserConfig it sees and takes it off when the config is deleted; once it is gone,
//! nothing would, and a deleted config would stay `Terminating` for ever, its name taken.
//! The operator releases it from configs being deleted, and from no other: while the Go
//! controller still runs it puts it back on live ones, and a config being deleted is the only
//! one the finalizer holds.

use kube_core::DynamicObject;

use crate::api::{finalizers, keys};

/// The JSON patch that releases the Go controller's finalizer from `config`, when `config` is
/// being deleted and still carries it.
pub fn go_finalizer_release(config: &DynamicObject) -> Option<json_patch::Patch> {
    config.metadata.deletion_timestamp.as_ref()?;
    finalizers::without(config, keys::GO_CONFIG_FINALIZER)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::fixtures::config;

    fn with_finalizers(finalizers: &[&str], deleting: bool) -> DynamicObject {
        let mut config = config("chrome").namespace("ns").object();
        config.metadata.finalizers = Some(finalizers.iter().map(|f| f.to_string()).collect());
        if deleting {
            config.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    "2026-11-28T10:00:00Z".parse().unwrap(),
                ));
        }
        config
    }

    #[test]
    fn the_go_controllers_finalizer_is_released_from_a_config_being_deleted_only() {
        let theirs = [keys::GO_CONFIG_FINALIZER];
        assert_eq!(go_finalizer_release(&with_finalizers(&theirs, false)), None);
        let patch = go_finalizer_release(&with_finalizers(
            &["other/keep", keys::GO_CONFIG_FINALIZER],
            true,
        ));
        assert_eq!(
            serde_json::to_value(patch).unwrap(),
            json!([
                {"op": "test", "path": "/metadata/finalizers/1", "value": keys::GO_CONFIG_FINALIZER},
                {"op": "remove", "path": "/metadata/finalizers/1"},
            ])
        );
        // Others' finalizers are never touched.
        assert_eq!(
            go_finalizer_release(&with_finalizers(&["other/keep"], true)),
            None
        );
    }
}
