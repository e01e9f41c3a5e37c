//! Merge rules (docs/configuration.md, "Tiers and merge rules"): untyped JSON tiers merged into
//! one BrowserConfig entry.
//!
//! - Objects merge key by key, recursively; the result keeps the base's key order and
//!   appends new keys in the overlay's order. Scalars (and values of different types):
//!   the overlay wins.
//! - A `null` in the overlay means "no override": the base value is kept. Where the base
//!   has nothing, the `null` is carried over unchanged, so merging onto an empty tier is
//!   the identity.
//! - Lists are merged according to the name of the field holding them, at any depth:
//!   - associative lists, keyed like Kubernetes' own list maps: `sidecars`,
//!     `initContainers`, `containers`, `env`, `volumes`, `imagePullSecrets` by `name`;
//!     `volumeMounts` by `mountPath`; `ports` by `containerPort` + `protocol` (a missing
//!     protocol is `TCP`); `hostAliases` by `ip`. Items with the same key merge
//!     recursively; the n-th overlay item with a key merges into the n-th base item with
//!     that key, so lists with repeated keys merge predictably. Other items are appended;
//!     an overlay item without a key is appended unless the base holds an equal item
//!     (again counted occurrence by occurrence).
//!   - `tolerations` and `topologySpreadConstraints`: union, an overlay item equal to one
//!     already present is not repeated.
//!   - any other list (`command`, `args`, …): replaced by the overlay.
//! - Order is stable: base items first, overridden items stay in place, new items are
//!   appended in the overlay's order. Identical inputs give byte-identical output.
//! - One-of fields follow Kubernetes' validation so a merged entry stays admissible:
//!   an `env` item that sets `value` or `valueFrom` drops the other one from the base,
//!   and its `valueFrom` keeps only the sources the overlay names; a `volumes` item keeps
//!   only the fields the overlay sets (Kubernetes' `retainKeys` strategy for volumes), so
//!   overriding an `emptyDir` volume with a `configMap` one does not leave both sources;
//!   a probe (`livenessProbe`, `readinessProbe`, `startupProbe`) or lifecycle hook
//!   (`postStart`, `preStop`) that names a handler (`exec`, `httpGet`, `tcpSocket`, `grpc`,
//!   `sleep`) drops the base's other handler.

use serde_json::{Map, Value};

/// Merges `overlay` onto `base`; `overlay` wins where both set a value.
pub fn merge(base: &Value, overlay: &Value) -> Value {
    merge_field(base, overlay, "")
}

/// Merges tiers left to right, later tiers overriding earlier ones. No tiers give an empty
/// object.
pub fn merge_tiers<'a>(tiers: impl IntoIterator<Item = &'a Value>) -> Value {
    tiers
        .into_iter()
        .fold(Value::Object(Map::new()), |acc, tier| merge(&acc, tier))
}

/// How a list is merged, decided by the name of the field holding it.
#[derive(Clone, Copy)]
enum ListRule {
    /// Associative list keyed by one field of each item.
    Keyed(&'static str),
    /// Associative list keyed by `containerPort` + `protocol`.
    Ports,
    /// Union without duplicates.
    Union,
    /// The overlay replaces the base.
    Replace,
}

fn list_rule(field: &str) -> ListRule {
    match field {
        "sidecars" | "initContainers" | "containers" | "env" | "volumes" | "imagePullSecrets" => {
            ListRule::Keyed("name")
        }
        "volumeMounts" => ListRule::Keyed("mountPath"),
        "hostAliases" => ListRule::Keyed("ip"),
        "ports" => ListRule::Ports,
        "tolerations" | "topologySpreadConstraints" => ListRule::Union,
        _ => ListRule::Replace,
    }
}

/// Fields holding one handler of several kinds: a probe or a lifecycle hook.
const HANDLER_FIELDS: [&str; 5] = [
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "postStart",
    "preStop",
];

/// The kinds of handler a probe or hook has exactly one of.
const HANDLERS: [&str; 5] = ["exec", "httpGet", "tcpSocket", "grpc", "sleep"];

/// Merges two values found under the field `field` (empty at the top level).
fn merge_field(base: &Value, overlay: &Value, field: &str) -> Value {
    match (base, overlay) {
        (_, Value::Null) => base.clone(),
        (Value::Object(base), Value::Object(overlay)) if HANDLER_FIELDS.contains(&field) => {
            let mut base = base.clone();
            if HANDLERS.iter().any(|h| overlay.contains_key(*h)) {
                base.retain(|key, _| {
                    !HANDLERS.contains(&key.as_str()) || overlay.contains_key(key)
                });
            }
            Value::Object(merge_objects(&base, overlay))
        }
        (Value::Object(base), Value::Object(overlay)) => {
            Value::Object(merge_objects(base, overlay))
        }
        (Value::Array(base), Value::Array(overlay)) => {
            Value::Array(merge_lists(base, overlay, field))
        }
        _ => overlay.clone(),
    }
}

fn merge_objects(base: &Map<String, Value>, overlay: &Map<String, Value>) -> Map<String, Value> {
    let mut merged = base.clone();
    for (key, value) in overlay {
        match merged.get_mut(key) {
            Some(slot) => *slot = merge_field(slot, value, key),
            None => {
                merged.insert(key.clone(), value.clone());
            }
        }
    }
    merged
}

fn merge_lists(base: &[Value], overlay: &[Value], field: &str) -> Vec<Value> {
    match list_rule(field) {
        ListRule::Replace => overlay.to_vec(),
        ListRule::Union => union(base, overlay),
        rule => merge_keyed(base, overlay, field, rule),
    }
}

fn union(base: &[Value], overlay: &[Value]) -> Vec<Value> {
    let mut merged = base.to_vec();
    for item in overlay {
        if !merged.contains(item) {
            merged.push(item.clone());
        }
    }
    merged
}

/// What identifies an item of an associative list.
#[derive(PartialEq)]
enum ItemKey<'a> {
    /// The value of the key field.
    Field(&'a Value),
    /// `containerPort` and `protocol`, the protocol `None` when it is the default `TCP`.
    Port(&'a Value, Option<&'a Value>),
    /// An item without its key is identified by its whole content.
    Whole(&'a Value),
}

fn item_key(item: &Value, rule: ListRule) -> ItemKey<'_> {
    let present = |field| item.get(field).filter(|value| !value.is_null());
    let key = match rule {
        ListRule::Keyed(field) => present(field).map(ItemKey::Field),
        ListRule::Ports => present("containerPort").map(|port| {
            ItemKey::Port(
                port,
                present("protocol").filter(|protocol| *protocol != "TCP"),
            )
        }),
        ListRule::Union | ListRule::Replace => None,
    };
    key.unwrap_or(ItemKey::Whole(item))
}

fn merge_keyed(base: &[Value], overlay: &[Value], field: &str, rule: ListRule) -> Vec<Value> {
    let base_keys: Vec<ItemKey> = base.iter().map(|item| item_key(item, rule)).collect();
    let mut merged = base.to_vec();
    let mut seen: Vec<ItemKey> = Vec::with_capacity(overlay.len());
    for item in overlay {
        let key = item_key(item, rule);
        let occurrence = seen.iter().filter(|other| **other == key).count();
        let target = base_keys
            .iter()
            .enumerate()
            .filter(|(_, base_key)| **base_key == key)
            .nth(occurrence)
            .map(|(index, _)| index);
        match (target, &key) {
            // An equal keyless item is already there.
            (Some(_), ItemKey::Whole(_)) => {}
            (Some(index), _) => merged[index] = merge_item(&merged[index], item, field),
            (None, _) => merged.push(item.clone()),
        }
        seen.push(key);
    }
    merged
}

/// Merges two items of an associative list that share their key.
fn merge_item(base: &Value, overlay: &Value, field: &str) -> Value {
    let base = match field {
        "env" => env_base(base, overlay),
        "volumes" => retain_keys(base, overlay),
        _ => base.clone(),
    };
    merge_field(&base, overlay, "")
}

/// An env var has `value` or `valueFrom`, never both: the one the overlay sets wins, and
/// `valueFrom` (one source of several kinds) keeps only the sources the overlay names.
fn env_base(base: &Value, overlay: &Value) -> Value {
    let sets = |field| overlay.get(field).is_some_and(|value| !value.is_null());
    let Value::Object(mut base) = base.clone() else {
        return base.clone();
    };
    if sets("value") && !sets("valueFrom") {
        base.shift_remove("valueFrom");
    }
    if sets("valueFrom") {
        if !sets("value") {
            base.shift_remove("value");
        }
        if let (Some(source), Some(overlay_source)) =
            (base.get_mut("valueFrom"), overlay.get("valueFrom"))
        {
            *source = retain_keys(source, overlay_source);
        }
    }
    Value::Object(base)
}

/// The base reduced to the fields the overlay names (Kubernetes' `retainKeys`).
fn retain_keys(base: &Value, overlay: &Value) -> Value {
    match (base, overlay) {
        (Value::Object(base), Value::Object(overlay)) => {
            let mut kept = base.clone();
            kept.retain(|key, _| overlay.contains_key(key));
            Value::Object(kept)
        }
        _ => base.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_probe_or_hook_keeps_one_handler() {
        let base = json!({
            "livenessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 5},
            "lifecycle": {"preStop": {"exec": {"command": ["sleep", "5"]}}},
            "sidecars": [{"name": "s", "readinessProbe": {"tcpSocket": {"port": 1}, "timeoutSeconds": 2}}]
        });
        let overlay = json!({
            "livenessProbe": {"httpGet": {"path": "/", "port": 4444}},
            "lifecycle": {"preStop": {"sleep": {"seconds": 1}}},
            "sidecars": [{"name": "s", "readinessProbe": {"timeoutSeconds": 3}}]
        });
        assert_eq!(
            merge(&base, &overlay),
            json!({
                "livenessProbe": {"periodSeconds": 5, "httpGet": {"path": "/", "port": 4444}},
                "lifecycle": {"preStop": {"sleep": {"seconds": 1}}},
                "sidecars": [{"name": "s", "readinessProbe": {"tcpSocket": {"port": 1}, "timeoutSeconds": 3}}]
            })
        );
    }

    #[test]
    fn objects_merge_recursively_per_key() {
        let base = json!({"resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2"}}});
        let overlay =
            json!({"resources": {"requests": {"cpu": "500m"}, "limits": {"memory": "2Gi"}}});
        assert_eq!(
            merge(&base, &overlay),
            json!({"resources": {
                "requests": {"cpu": "500m", "memory": "1Gi"},
                "limits": {"cpu": "2", "memory": "2Gi"}
            }})
        );
    }

    #[test]
    fn scalars_and_mismatched_types_take_the_overlay() {
        let base = json!({"image": "a", "privileged": false, "labels": {"x": "y"}});
        let overlay = json!({"image": "b", "privileged": true, "labels": "flat"});
        assert_eq!(
            merge(&base, &overlay),
            json!({"image": "b", "privileged": true, "labels": "flat"})
        );
    }

    #[test]
    fn null_in_overlay_keeps_the_base() {
        let base = json!({"image": "a", "labels": {"x": "y"}});
        let overlay = json!({"image": null, "labels": null, "workingDir": null});
        assert_eq!(
            merge(&base, &overlay),
            json!({"image": "a", "labels": {"x": "y"}, "workingDir": null})
        );
    }

    #[test]
    fn sidecar_override_of_image_keeps_the_rest() {
        let base = json!({"sidecars": [
            {"name": "seleniferous", "image": "s:1", "env": [{"name": "A", "value": "1"}],
             "ports": [{"containerPort": 4445}], "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}]},
            {"name": "x-server", "image": "x:1"}
        ]});
        let overlay = json!({"sidecars": [{"name": "seleniferous", "image": "s:2"}]});
        assert_eq!(
            merge(&base, &overlay),
            json!({"sidecars": [
                {"name": "seleniferous", "image": "s:2", "env": [{"name": "A", "value": "1"}],
                 "ports": [{"containerPort": 4445}], "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}]},
                {"name": "x-server", "image": "x:1"}
            ]})
        );
    }

    #[test]
    fn keyed_lists_merge_at_any_depth() {
        let base = json!({"initContainers": [{"name": "init", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}],
                          "spec": {"containers": [{"name": "c", "image": "c:1"}]}});
        let overlay = json!({"initContainers": [{"name": "init", "env": [{"name": "A", "value": "9"}]}],
                             "spec": {"containers": [{"name": "c", "args": ["x"]}]}});
        assert_eq!(
            merge(&base, &overlay),
            json!({"initContainers": [{"name": "init", "env": [{"name": "A", "value": "9"}, {"name": "B", "value": "2"}]}],
                   "spec": {"containers": [{"name": "c", "image": "c:1", "args": ["x"]}]}})
        );
    }

    #[test]
    fn volume_mounts_are_keyed_by_mount_path() {
        let base = json!({"volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}, {"name": "home", "mountPath": "/home"}]});
        let overlay = json!({"volumeMounts": [{"name": "tmp2", "mountPath": "/tmp"}, {"name": "dl", "mountPath": "/dl"}]});
        assert_eq!(
            merge(&base, &overlay),
            json!({"volumeMounts": [
                {"name": "tmp2", "mountPath": "/tmp"}, {"name": "home", "mountPath": "/home"}, {"name": "dl", "mountPath": "/dl"}
            ]})
        );
    }

    #[test]
    fn ports_are_keyed_by_port_and_protocol_defaulting_to_tcp() {
        let base = json!({"ports": [{"containerPort": 4444, "name": "wd"}, {"containerPort": 53, "protocol": "UDP"}]});
        let overlay = json!({"ports": [
            {"containerPort": 4444, "protocol": "TCP", "name": "webdriver"},
            {"containerPort": 53, "name": "dns-tcp"},
            {"containerPort": 53, "protocol": "UDP", "name": "dns"}
        ]});
        assert_eq!(
            merge(&base, &overlay),
            json!({"ports": [
                {"containerPort": 4444, "name": "webdriver", "protocol": "TCP"},
                {"containerPort": 53, "protocol": "UDP", "name": "dns"},
                {"containerPort": 53, "name": "dns-tcp"}
            ]})
        );
    }

    #[test]
    fn host_aliases_are_keyed_by_ip() {
        let base = json!({"hostAliases": [{"ip": "10.0.0.1", "hostnames": ["a"]}]});
        let overlay = json!({"hostAliases": [{"ip": "10.0.0.1", "hostnames": ["b"]}, {"ip": "10.0.0.2", "hostnames": ["c"]}]});
        assert_eq!(
            merge(&base, &overlay),
            json!({"hostAliases": [{"ip": "10.0.0.1", "hostnames": ["b"]}, {"ip": "10.0.0.2", "hostnames": ["c"]}]})
        );
    }

    #[test]
    fn image_pull_secrets_are_keyed_by_name() {
        let base = json!({"imagePullSecrets": [{"name": "a"}]});
        let overlay = json!({"imagePullSecrets": [{"name": "a"}, {"name": "b"}]});
        assert_eq!(
            merge(&base, &overlay),
            json!({"imagePullSecrets": [{"name": "a"}, {"name": "b"}]})
        );
    }

    #[test]
    fn env_value_replaces_value_from_and_back() {
        let base = json!({"env": [
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "MODE", "value": "a"}
        ]});
        let overlay = json!({"env": [
            {"name": "IP", "value": "127.0.0.1"},
            {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "mode"}}}
        ]});
        assert_eq!(
            merge(&base, &overlay),
            json!({"env": [
                {"name": "IP", "value": "127.0.0.1"},
                {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "mode"}}}
            ]})
        );
    }

    #[test]
    fn env_value_from_keeps_only_the_overlay_source_merged() {
        let base = json!({"env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]});
        let same_kind =
            json!({"env": [{"name": "T", "valueFrom": {"secretKeyRef": {"key": "k2"}}}]});
        assert_eq!(
            merge(&base, &same_kind),
            json!({"env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k2"}}}]})
        );
        let other_kind = json!({"env": [{"name": "T", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]});
        assert_eq!(
            merge(&base, &other_kind),
            json!({"env": [{"name": "T", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]})
        );
    }

    #[test]
    fn env_item_without_value_keeps_the_base_value() {
        let base = json!({"env": [{"name": "A", "value": "1"}]});
        let overlay = json!({"env": [{"name": "A"}]});
        assert_eq!(merge(&base, &overlay), base);
    }

    #[test]
    fn volume_override_keeps_only_the_fields_it_sets() {
        let base = json!({"volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}, {"name": "dl", "emptyDir": {}}]});
        let overlay = json!({"volumes": [
            {"name": "dshm", "emptyDir": {"sizeLimit": "1Gi"}},
            {"name": "dl", "hostPath": {"path": "/data"}}
        ]});
        assert_eq!(
            merge(&base, &overlay),
            json!({"volumes": [
                {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
                {"name": "dl", "hostPath": {"path": "/data"}}
            ]})
        );
    }

    #[test]
    fn items_without_key_are_appended_unless_already_present() {
        let base = json!({"env": [{"name": "A", "value": "1"}, {"value": "orphan"}]});
        let overlay = json!({"env": [{"value": "orphan"}, {"value": "other"}]});
        assert_eq!(
            merge(&base, &overlay),
            json!({"env": [{"name": "A", "value": "1"}, {"value": "orphan"}, {"value": "other"}]})
        );
    }

    #[test]
    fn repeated_keys_merge_occurrence_by_occurrence() {
        let base = json!({"env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]});
        let overlay = json!({"env": [{"name": "A", "value": "x"}, {"name": "A", "value": "y"}, {"name": "A", "value": "z"}]});
        assert_eq!(
            merge(&base, &overlay),
            json!({"env": [{"name": "A", "value": "x"}, {"name": "A", "value": "y"}, {"name": "A", "value": "z"}]})
        );
    }

    #[test]
    fn command_args_and_other_lists_are_replaced() {
        let base = json!({"command": ["a", "b"], "args": ["--x"], "hostnames": ["h1"], "x": {"command": ["c"]}});
        let overlay =
            json!({"command": ["z"], "args": [], "hostnames": ["h2"], "x": {"command": ["d"]}});
        assert_eq!(
            merge(&base, &overlay),
            json!({"command": ["z"], "args": [], "hostnames": ["h2"], "x": {"command": ["d"]}})
        );
    }

    #[test]
    fn tolerations_and_spread_constraints_are_unions() {
        let t1 = json!({"key": "a", "operator": "Exists"});
        let t2 = json!({"key": "b", "operator": "Exists", "effect": "NoSchedule"});
        let s1 = json!({"maxSkew": 1, "topologyKey": "zone"});
        let s2 = json!({"maxSkew": 2, "topologyKey": "zone"});
        let base = json!({"tolerations": [t1], "topologySpreadConstraints": [s1]});
        let overlay = json!({"tolerations": [t2, t1, t2], "topologySpreadConstraints": [s1, s2]});
        assert_eq!(
            merge(&base, &overlay),
            json!({"tolerations": [t1, t2], "topologySpreadConstraints": [s1, s2]})
        );
    }

    #[test]
    fn output_order_is_base_first_then_new_keys_and_items() {
        let base = json!({"b": 1, "a": {"y": 1, "x": 2}, "env": [{"name": "Z", "value": "1"}, {"name": "A", "value": "2"}]});
        let overlay = json!({"c": 3, "a": {"z": 0, "x": 5}, "env": [{"name": "M", "value": "3"}, {"name": "Z", "value": "4"}], "0": 0});
        let merged = serde_json::to_string(&merge(&base, &overlay)).unwrap();
        assert_eq!(
            merged,
            r#"{"b":1,"a":{"y":1,"x":5,"z":0},"env":[{"name":"Z","value":"4"},{"name":"A","value":"2"},{"name":"M","value":"3"}],"c":3,"0":0}"#
        );
    }

    #[test]
    fn tiers_merge_left_to_right() {
        let template = json!({"image": "t", "labels": {"a": "1"}});
        let wildcard = json!({"image": "w", "labels": {"b": "2"}});
        let explicit = json!({"labels": {"a": "3"}});
        assert_eq!(
            merge_tiers([&template, &wildcard, &explicit]),
            json!({"image": "w", "labels": {"a": "3", "b": "2"}})
        );
        assert_eq!(merge_tiers([]), json!({}));
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// Field names that exercise every list rule, plus the fields the keys are read from.
    const FIELDS: &[&str] = &[
        "env",
        "volumes",
        "sidecars",
        "volumeMounts",
        "ports",
        "hostAliases",
        "tolerations",
        "command",
        "name",
        "mountPath",
        "containerPort",
        "protocol",
        "ip",
        "value",
        "valueFrom",
        "image",
        "x",
    ];

    fn leaf() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (0u16..4).prop_map(|n| json!(n)),
            prop::sample::select(vec!["a", "b", "TCP", "UDP"]).prop_map(|s| json!(s)),
        ]
    }

    fn value() -> impl Strategy<Value = Value> {
        leaf().prop_recursive(4, 48, 5, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                object_of(inner),
            ]
        })
    }

    fn object_of(inner: impl Strategy<Value = Value>) -> impl Strategy<Value = Value> {
        prop::collection::vec((prop::sample::select(FIELDS), inner), 0..5).prop_map(|pairs| {
            Value::Object(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
        })
    }

    fn object() -> impl Strategy<Value = Value> {
        object_of(value())
    }

    fn names() -> impl Strategy<Value = Vec<String>> {
        prop::sample::subsequence(vec!["A", "B", "C", "D", "E", "F"], 0..6)
            .prop_shuffle()
            .prop_map(|names| names.into_iter().map(str::to_owned).collect())
    }

    fn env_names(value: &Value) -> Vec<String> {
        value["env"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|item| item["name"].as_str().map(str::to_owned))
            .collect()
    }

    proptest! {
        #[test]
        fn empty_tier_is_the_identity(a in object()) {
            let empty = json!({});
            prop_assert_eq!(&merge(&a, &empty), &a);
            prop_assert_eq!(&merge(&empty, &a), &a);
        }

        #[test]
        fn merge_is_deterministic(a in object(), b in object()) {
            let first = serde_json::to_string(&merge(&a, &b)).unwrap();
            let second = serde_json::to_string(&merge(&a.clone(), &b.clone())).unwrap();
            prop_assert_eq!(first, second);
        }

        #[test]
        fn merge_with_itself_is_the_identity(a in object()) {
            prop_assert_eq!(&merge(&a, &a), &a);
        }

        #[test]
        fn keyed_list_order_is_stable(base in names(), overlay in names()) {
            let list = |names: &[String], value: &str| -> Value {
                names.iter().map(|name| json!({"name": name, "value": value})).collect()
            };
            let merged = merge(&json!({"env": list(&base, "base")}), &json!({"env": list(&overlay, "over")}));
            let expected: Vec<String> = base
                .iter()
                .chain(overlay.iter().filter(|name| !base.contains(name)))
                .cloned()
                .collect();
            prop_assert_eq!(env_names(&merged), expected);
            for item in merged["env"].as_array().unwrap() {
                let overridden = overlay.iter().any(|name| item["name"] == json!(name));
                prop_assert_eq!(&item["value"], &json!(if overridden { "over" } else { "base" }));
            }
        }
    }
}
