//! The CustomResourceDefinition objects: names, scope, the one version with its status
//! subresource, and the printer columns of each kind.

use serde_json::{Value, json};

use super::Layout;
use super::structural::schema;
use super::types;
use crate::api::keys;

/// The Browser CRD: names, printer columns and schema.
pub(super) fn browser_crd(layout: Layout) -> Value {
    let columns = json!([
        {"name": "Browser", "type": "string", "jsonPath": ".spec.browserName"},
        {"name": "Version", "type": "string", "jsonPath": ".spec.browserVersion"},
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
        {"name": "PodIP", "type": "string", "jsonPath": ".status.podIP"},
        {"name": "Reason", "type": "string", "jsonPath": ".status.reason", "priority": 1},
        {"name": "StartTime", "type": "date", "jsonPath": ".status.startTime"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]);
    crd(
        layout.browser_group(),
        keys::BROWSER_KIND,
        "browsers",
        "brw",
        columns,
        schema::<types::BrowserSpec, crate::api::status::BrowserStatus>(
            "A browser session: the operator runs it as one Pod with the same name.",
        ),
    )
}

/// The BrowserConfig CRD: names, printer columns and schema.
pub(super) fn browserconfig_crd(layout: Layout) -> Value {
    // Valid and Ready differ while validity is unknown (the cluster could not judge the pods).
    let columns = json!([
        {"name": "Valid", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Valid\")].status",
         "description": "Whether every entry renders a pod the cluster accepts"},
        {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status",
         "description": "Whether the configuration is in use for new Browsers"},
        {"name": "Entries", "type": "integer", "jsonPath": ".status.entries",
         "description": "Browser version entries, `*` entries included"},
        {"name": "PrePulled", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"PrePulled\")].status",
         "description": "Whether the images of the entries that ask for pre-pull are on every node their browsers may run on"},
        {"name": "SpecHash", "type": "string", "jsonPath": ".status.version", "priority": 1,
         "description": "Hash of the spec the status was computed from"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]);
    crd(
        layout.browserconfig_group(),
        keys::BROWSERCONFIG_KIND,
        "browserconfigs",
        "brwcfg",
        columns,
        schema::<types::BrowserConfigSpec, types::BrowserConfigStatus>(
            "Images and pod settings of the browsers of a namespace, by name and version.",
        ),
    )
}

/// A namespaced CRD with one served and stored version and the status subresource.
fn crd(
    group: &str,
    kind: &str,
    plural: &str,
    short_name: &str,
    columns: Value,
    schema: Value,
) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {
            "group": group,
            "names": {
                "kind": kind,
                "listKind": format!("{kind}List"),
                "plural": plural,
                "singular": kind.to_lowercase(),
                "shortNames": [short_name],
                "categories": ["selenosis"],
            },
            "scope": "Namespaced",
            "versions": [{
                "name": keys::VERSION,
                "served": true,
                "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": columns,
                "schema": {"openAPIV3Schema": schema},
            }],
        },
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use serde_json::{Value, json};

    use crate::api::crd::Layout;
    use crate::api::crd::test_support::*;

    #[test]
    fn crds_are_valid_kubernetes_objects_without_unknown_keys() {
        for crd in all_crds() {
            let typed: CustomResourceDefinition = serde_json::from_value(crd.clone()).unwrap();
            assert_eq!(floats(&serde_json::to_value(&typed).unwrap()), floats(&crd));
            let spec = &typed.spec;
            assert_eq!(spec.scope, "Namespaced");
            assert_eq!(
                spec.names.categories.as_deref(),
                Some(&["selenosis".to_string()][..])
            );
            assert_eq!(spec.versions.len(), 1);
            let version = &spec.versions[0];
            assert_eq!(
                (version.name.as_str(), version.served, version.storage),
                ("v1", true, true)
            );
            assert!(version.subresources.as_ref().unwrap().status.is_some());
        }
    }

    #[test]
    fn crds_are_far_below_the_client_side_apply_limit() {
        for crd in all_crds() {
            let size = serde_json::to_vec(&crd).unwrap().len();
            assert!(
                size < 64 * 1024,
                "{}: {size} bytes",
                crd["metadata"]["name"]
            );
        }
    }

    /// Name, type, JSON path and priority of each printer column of the CRD's version.
    fn printer_columns(crd: &Value) -> Vec<(&str, &str, &str, i64)> {
        version(crd)["additionalPrinterColumns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().unwrap(),
                    c["type"].as_str().unwrap(),
                    c["jsonPath"].as_str().unwrap(),
                    c["priority"].as_i64().unwrap_or(0),
                )
            })
            .collect()
    }

    #[test]
    fn browser_printer_columns_in_order() {
        let crd = find(Layout::Default, "Browser");
        let columns = printer_columns(&crd);
        assert_eq!(
            columns,
            [
                ("Browser", "string", ".spec.browserName", 0),
                ("Version", "string", ".spec.browserVersion", 0),
                ("Phase", "string", ".status.phase", 0),
                ("PodIP", "string", ".status.podIP", 0),
                ("Reason", "string", ".status.reason", 1),
                ("StartTime", "date", ".status.startTime", 0),
                ("Age", "date", ".metadata.creationTimestamp", 0),
            ]
        );
        assert_eq!(crd["spec"]["names"]["shortNames"], json!(["brw"]));
        assert_eq!(crd["metadata"]["name"], "browsers.selenosis.io");
    }

    #[test]
    fn browserconfig_status_and_columns() {
        let crd = find(Layout::Default, "BrowserConfig");
        let status = &root_schema(&crd)["properties"]["status"];
        assert_eq!(
            keys_of(status),
            [
                "version",
                "entries",
                "lastUpdated",
                "observedGeneration",
                "conditions",
                "prePull"
            ]
        );
        assert_eq!(status["properties"]["entries"]["type"], "integer");
        let pre_pull = &status["properties"]["prePull"];
        assert_eq!(
            keys_of(pre_pull),
            ["images", "nodesReady", "nodesDesired", "daemonSets"]
        );
        let daemon_sets = &pre_pull["properties"]["daemonSets"];
        assert_eq!(daemon_sets["x-kubernetes-list-map-keys"], json!(["name"]));
        assert_eq!(
            keys_of(&daemon_sets["items"]),
            ["name", "images", "nodesReady", "nodesDesired"]
        );
        assert_eq!(status["properties"]["lastUpdated"]["format"], "date-time");
        assert_eq!(
            status["properties"]["conditions"]["x-kubernetes-list-type"],
            "map"
        );
        let columns = printer_columns(&crd);
        assert_eq!(
            columns,
            [
                (
                    "Valid",
                    "string",
                    ".status.conditions[?(@.type==\"Valid\")].status",
                    0
                ),
                (
                    "Ready",
                    "string",
                    ".status.conditions[?(@.type==\"Ready\")].status",
                    0
                ),
                ("Entries", "integer", ".status.entries", 0),
                (
                    "PrePulled",
                    "string",
                    ".status.conditions[?(@.type==\"PrePulled\")].status",
                    0
                ),
                ("SpecHash", "string", ".status.version", 1),
                ("Age", "date", ".metadata.creationTimestamp", 0),
            ]
        );
        assert_eq!(crd["metadata"]["name"], "browserconfigs.selenosis.io");
        assert_eq!(crd["spec"]["names"]["shortNames"], json!(["brwcfg"]));
    }
}
