//! Upgrades of the CRDs: schema changes stay additive, so applying `crds/` over an
//! older set must keep every stored object valid and readable. Compared against each
//! released set under `testdata/crd-history/` and against the CRDs of the selenosis Helm
//! chart (the Go browser-controller's), which `crds/split-groups/` replaces.
//!
//! When a release changes `crds/`, copy its `crds/` to `testdata/crd-history/<version>/`.

use serde_json::{Value, json};

use browser_controller::api::crd::{self, Layout};

use support::crd_history::released_sets;
use support::upstream;
use testkit as support;

/// Constraints whose new or smaller value can refuse a stored value.
const UPPER_BOUNDS: [&str; 4] = ["maxLength", "maxItems", "maxProperties", "maximum"];
/// Constraints whose new or larger value can refuse a stored value.
const LOWER_BOUNDS: [&str; 4] = ["minLength", "minItems", "minProperties", "minimum"];

/// Why objects stored under the schema `old` could be refused, or lose fields, under `new`.
fn schema_changes(old: &Value, new: &Value, path: &str, out: &mut Vec<String>) {
    let at = if path.is_empty() { "." } else { path };
    let open = new["x-kubernetes-preserve-unknown-fields"] == true;
    if let (Some(was), Some(is)) = (old["type"].as_str(), new["type"].as_str())
        && was != is
    {
        out.push(format!("{at}: type {was} became {is}"));
    }
    for (name, child) in old["properties"].as_object().into_iter().flatten() {
        match new["properties"].get(name) {
            Some(new_child) => schema_changes(child, new_child, &format!("{path}.{name}"), out),
            None if open => {}
            None => out.push(format!("{path}.{name}: removed")),
        }
    }
    let old_required = old["required"].as_array().cloned().unwrap_or_default();
    for name in new["required"].as_array().into_iter().flatten() {
        if !old_required.contains(name) {
            out.push(format!("{at}: {name} became required"));
        }
    }
    for key in UPPER_BOUNDS {
        if let Some(is) = new[key].as_f64()
            && old[key].as_f64().is_none_or(|was| is < was)
        {
            out.push(format!("{at}: {key} {is} added or lowered"));
        }
    }
    for key in LOWER_BOUNDS {
        if let Some(is) = new[key].as_f64()
            && old[key].as_f64().is_none_or(|was| is > was)
        {
            out.push(format!("{at}: {key} {is} added or raised"));
        }
    }
    for key in ["pattern", "format"] {
        if !new[key].is_null() && new[key] != old[key] {
            out.push(format!("{at}: {key} {} added or changed", new[key]));
        }
    }
    if let Some(values) = new["enum"].as_array() {
        let kept = old["enum"]
            .as_array()
            .is_some_and(|was| was.iter().all(|v| values.contains(v)));
        if !kept {
            out.push(format!("{at}: enum added or narrowed"));
        }
    }
    let old_rules = old["x-kubernetes-validations"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for rule in new["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if !old_rules.contains(rule) {
            out.push(format!("{at}: rule {} added", rule["rule"]));
        }
    }
    if old["x-kubernetes-preserve-unknown-fields"] == true && !open {
        out.push(format!("{at}: unknown fields no longer kept"));
    }
    for key in ["items", "additionalProperties"] {
        if old[key].is_object() && new[key].is_object() {
            schema_changes(&old[key], &new[key], &format!("{path}.{key}"), out);
        }
    }
}

/// Why applying the CRD `new` over `old` could break a cluster that stores objects of `old`.
fn crd_changes(old: &Value, new: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for pointer in [
        "/metadata/name",
        "/spec/group",
        "/spec/scope",
        "/spec/names/kind",
        "/spec/names/plural",
    ] {
        if old.pointer(pointer) != new.pointer(pointer) {
            out.push(format!("{pointer} changed"));
        }
    }
    let versions = |crd: &Value| {
        crd["spec"]["versions"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    let new_versions = versions(new);
    for version in versions(old) {
        let name = version["name"].as_str().unwrap_or_default();
        let Some(current) = new_versions.iter().find(|v| v["name"] == name) else {
            out.push(format!("version {name} removed"));
            continue;
        };
        if version["served"] == true && current["served"] != true {
            out.push(format!("version {name} no longer served"));
        }
        if current["subresources"]["status"].is_null()
            && !version["subresources"]["status"].is_null()
        {
            out.push(format!("version {name} lost its status subresource"));
        }
        let schema = |v: &Value| v["schema"]["openAPIV3Schema"].clone();
        let mut schema_out = Vec::new();
        schema_changes(&schema(&version), &schema(current), "", &mut schema_out);
        out.extend(
            schema_out
                .into_iter()
                .map(|change| format!("{name} {change}")),
        );
    }
    out
}

fn crd_of(crds: &[Value], kind: &str) -> Value {
    crds.iter()
        .find(|c| c["spec"]["names"]["kind"] == kind)
        .cloned()
        .unwrap_or_else(|| panic!("no {kind} CRD"))
}

#[test]
fn the_check_names_every_change_that_can_break_stored_objects() {
    let old = json!({
        "metadata": {"name": "things.example.io"},
        "spec": {"group": "example.io", "scope": "Namespaced", "names": {"kind": "Thing", "plural": "things"},
            "versions": [
                {"name": "v1", "served": true, "subresources": {"status": {}}, "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {"type": "object", "required": ["a"], "properties": {
                            "a": {"type": "string", "maxLength": 10, "enum": ["x", "y"]},
                            "b": {"type": "integer", "minimum": 1},
                            "c": {"type": "array", "items": {"type": "object", "properties": {"d": {"type": "string"}}}},
                            "e": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                            "gone": {"type": "string"},
                        }},
                    },
                }}},
                {"name": "v1beta1", "served": true},
            ]},
    });
    let mut new = old.clone();
    let spec = new
        .pointer_mut("/spec/versions/0/schema/openAPIV3Schema/properties/spec")
        .unwrap();
    spec["required"] = json!(["a", "b"]);
    spec["properties"]["a"]["maxLength"] = json!(5);
    spec["properties"]["a"]["enum"] = json!(["x"]);
    spec["properties"]["a"]["pattern"] = json!("^x$");
    spec["properties"]["b"]["minimum"] = json!(2);
    spec["properties"]["b"]["type"] = json!("string");
    spec["properties"]["c"]["items"]["properties"]["d"]["maxLength"] = json!(3);
    spec["properties"]["e"] =
        json!({"type": "object", "x-kubernetes-validations": [{"rule": "self.size() < 3"}]});
    spec["properties"].as_object_mut().unwrap().remove("gone");
    new["spec"]["versions"][0]["subresources"] = json!({});
    new["spec"]["versions"].as_array_mut().unwrap().pop();
    new["spec"]["scope"] = json!("Cluster");

    assert_eq!(
        crd_changes(&old, &new),
        [
            "/spec/scope changed",
            "version v1 lost its status subresource",
            "v1 .spec.a: maxLength 5 added or lowered",
            "v1 .spec.a: pattern \"^x$\" added or changed",
            "v1 .spec.a: enum added or narrowed",
            "v1 .spec.b: type integer became string",
            "v1 .spec.b: minimum 2 added or raised",
            "v1 .spec.c.items.d: maxLength 3 added or lowered",
            "v1 .spec.e: rule \"self.size() < 3\" added",
            "v1 .spec.e: unknown fields no longer kept",
            "v1 .spec.gone: removed",
            "v1 .spec: \"b\" became required",
            "version v1beta1 removed",
        ]
    );
    assert!(crd_changes(&old, &old).is_empty());
    let mut widened = old.clone();
    let spec = widened
        .pointer_mut("/spec/versions/0/schema/openAPIV3Schema/properties/spec")
        .unwrap();
    spec["properties"]["a"] = json!({"type": "string", "maxLength": 20});
    spec["properties"]["new"] = json!({"type": "string"});
    spec["properties"]["c"] = json!({"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}});
    assert!(
        crd_changes(&old, &widened).is_empty(),
        "{:#?}",
        crd_changes(&old, &widened)
    );
}

#[test]
fn crds_stay_additive_to_every_released_set() {
    let sets = released_sets();
    assert!(!sets.is_empty());
    for set in sets {
        let at = format!("release {} {:?}", set.release, set.layout);
        assert_eq!(set.crds.len(), 2, "{at}");
        let current = crd::crds(set.layout);
        for kind in ["Browser", "BrowserConfig"] {
            let changes = crd_changes(&crd_of(&set.crds, kind), &crd_of(&current, kind));
            assert!(changes.is_empty(), "{kind} against {at}: {changes:#?}");
        }
    }
}

#[test]
fn replacing_the_helm_chart_crds_keeps_names_columns_and_every_stored_field() {
    let Some(helm) = upstream::helm_chart_crds("upgrade from the Helm chart CRDs not checked")
    else {
        return;
    };
    for kind in ["Browser", "BrowserConfig"] {
        let upstream = crd_of(&helm, kind);
        let ours = crd_of(&crd::crds(Layout::SplitGroups), kind);
        for short in upstream["spec"]["names"]["shortNames"]
            .as_array()
            .into_iter()
            .flatten()
        {
            assert!(
                ours["spec"]["names"]["shortNames"]
                    .as_array()
                    .unwrap()
                    .contains(short)
            );
        }
        for key in ["listKind", "singular"] {
            assert_eq!(ours["spec"]["names"][key], upstream["spec"]["names"][key]);
        }
        // Same columns for `kubectl get`; ours adds Reason to `-o wide` only.
        let columns = |crd: &Value| -> Vec<Value> {
            crd["spec"]["versions"][0]["additionalPrinterColumns"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|c| c["priority"].as_i64().unwrap_or(0) == 0)
                .map(|c| json!([c["name"], c["type"], c["jsonPath"]]))
                .collect()
        };
        if kind == "Browser" {
            assert_eq!(columns(&ours), columns(&upstream));
        }

        // Tightenings, each refusing only objects that could never have produced a pod: the
        // browser name and version become pod label values; the spec, which no client changes
        // after creation, becomes immutable; the phase, which the Go controller copies from the
        // pod, is limited to the pod phases; a pull policy outside the three the Pod API
        // accepts; a pull secret without the name that merging keys on (docs/configuration.md,
        // "Tiers and merge rules"). Servers from 1.30 ratchet unchanged fields, so even such
        // objects stay updatable there.
        let accepted: &[&str] = match kind {
            "Browser" => &[
                "v1 .spec.browserName: maxLength 63 added or lowered",
                "v1 .spec.browserName: pattern \"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$\" added or changed",
                "v1 .spec.browserVersion: maxLength 63 added or lowered",
                "v1 .spec.browserVersion: pattern \"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$\" added or changed",
                "v1 .spec: rule \"self == oldSelf\" added",
                "v1 .status.phase: enum added or narrowed",
                "v1 .: \"spec\" became required",
            ],
            _ => &[
                "v1 .spec.browsers.additionalProperties.additionalProperties.imagePullPolicy: enum added or narrowed",
                "v1 .spec.browsers.additionalProperties.additionalProperties.imagePullSecrets.items: \"name\" became required",
                "v1 .spec.template.imagePullPolicy: enum added or narrowed",
                "v1 .spec.template.imagePullSecrets.items: \"name\" became required",
                "v1 .: \"spec\" became required",
            ],
        };
        let changes = crd_changes(&upstream, &ours);
        for known in accepted {
            assert!(
                changes.iter().any(|c| c == known),
                "{kind}: {known} no longer happens; drop it from the list"
            );
        }
        let unexpected: Vec<&String> = changes
            .iter()
            .filter(|c| !accepted.contains(&c.as_str()))
            .collect();
        assert!(unexpected.is_empty(), "{kind}: {unexpected:#?}");
    }
}
