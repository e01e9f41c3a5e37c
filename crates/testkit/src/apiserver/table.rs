//! Server-side printing (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`) of custom
//! resources, as `kubectl get` asks for it: a `Name` column, then the CRD version's
//! `additionalPrinterColumns` (or `Age` when it has none), cells computed like the
//! apiextensions-apiserver's table convertor. And the core/v1 view of events.k8s.io/v1 Events
//! that `kubectl describe` lists with `involvedObject.*` field selectors.

use serde_json::{Map, Value, json};

/// Whether the client asked for a Table (any version of meta.k8s.io's).
pub fn wants_table(accept: &str) -> bool {
    accept
        .split(',')
        .any(|m| m.contains("as=Table") && m.contains("g=meta.k8s.io"))
}

fn age_column() -> Value {
    json!({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"})
}

/// The Table of `objects`; `columns` are the CRD version's `additionalPrinterColumns`;
/// `include` is the `includeObject` parameter (`None`, `Object`, default `Metadata`).
pub fn table(
    objects: &[Value],
    columns: &[Value],
    resource_version: &str,
    include: Option<&str>,
    now: jiff::Timestamp,
) -> Value {
    let columns: Vec<Value> = if columns.is_empty() {
        vec![age_column()]
    } else {
        columns.to_vec()
    };
    let mut definitions = vec![json!({
        "name": "Name", "type": "string", "format": "name", "priority": 0,
        "description": "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
    })];
    for c in &columns {
        definitions.push(json!({
            "name": c["name"],
            "type": c["type"],
            "format": c["format"].as_str().unwrap_or(""),
            "description": c["description"].as_str().unwrap_or(""),
            "priority": c["priority"].as_i64().unwrap_or(0),
        }));
    }
    let rows: Vec<Value> = objects
        .iter()
        .map(|obj| {
            let mut cells = vec![obj["metadata"]["name"].clone()];
            cells.extend(
                columns
                    .iter()
                    .map(|c| cell(obj, c["jsonPath"].as_str().unwrap_or(""), c, now)),
            );
            let mut row = json!({"cells": cells});
            match include {
                Some("None") => {}
                Some("Object") => row["object"] = obj.clone(),
                _ => {
                    row["object"] = json!({
                        "kind": "PartialObjectMetadata",
                        "apiVersion": "meta.k8s.io/v1",
                        "metadata": obj["metadata"],
                    });
                }
            }
            row
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": definitions,
        "rows": rows,
    })
}

/// The steps of a JSONPath: `.a.b[?(@.type=="Ready")].c` is `a`, `b[?(@.type=="Ready")]`, `c`.
fn steps(path: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0usize, 0);
    for (i, c) in path.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            '.' if depth == 0 => {
                if i > start {
                    out.push(&path[start..i]);
                }
                start = i + 1;
            }
            _ => {}
        }
    }
    if start < path.len() {
        out.push(&path[start..]);
    }
    out
}

/// One step: a field, or a field holding a list filtered by `[?(@.key=="value")]` (the first
/// match; printer columns filter lists of conditions by type).
fn step<'a>(value: &'a Value, step: &str) -> Option<&'a Value> {
    let Some((field, filter)) = step.split_once('[') else {
        return value.get(step);
    };
    let condition = filter.strip_prefix("?(@.")?.strip_suffix(")]")?;
    let (key, wanted) = condition.split_once("==")?;
    let wanted = wanted.trim().trim_matches('"');
    value
        .get(field)?
        .as_array()?
        .iter()
        .find(|item| item.get(key.trim()).and_then(Value::as_str) == Some(wanted))
}

/// A cell: `null` (kubectl prints `<none>`) when the path finds nothing; strings as printed
/// by the JSONPath printer; dates as the age kubectl shows.
fn cell(obj: &Value, path: &str, column: &Value, now: jiff::Timestamp) -> Value {
    let value = steps(path).into_iter().try_fold(obj, step);
    let Some(value) = value.filter(|v| !v.is_null()) else {
        return Value::Null;
    };
    match column["type"].as_str().unwrap_or("string") {
        "date" => value
            .as_str()
            .and_then(|s| s.parse::<jiff::Timestamp>().ok())
            .map(|t| json!(human_duration(now.as_second() - t.as_second())))
            .unwrap_or_else(|| json!("<invalid>")),
        "integer" | "number" | "boolean" => value.clone(),
        _ => match value {
            Value::String(s) => json!(s),
            other => json!(other.to_string()),
        },
    }
}

/// `duration.HumanDuration` of apimachinery, for whole seconds.
pub fn human_duration(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".to_string();
    }
    if secs < 0 {
        return "0s".to_string();
    }
    if secs < 120 {
        return format!("{secs}s");
    }
    let minutes = secs / 60;
    if minutes < 10 {
        return match secs % 60 {
            0 => format!("{minutes}m"),
            s => format!("{minutes}m{s}s"),
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 8 {
        return match minutes % 60 {
            0 => format!("{hours}h"),
            m => format!("{hours}h{m}m"),
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        return match hours % 24 {
            0 => format!("{}d", hours / 24),
            h => format!("{}d{h}h", hours / 24),
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        return match (hours / 24) % 365 {
            0 => format!("{}y", hours / 24 / 365),
            d => format!("{}y{d}d", hours / 24 / 365),
        };
    }
    format!("{}y", hours / 24 / 365)
}

/// An events.k8s.io/v1 Event as core/v1 serves the same stored object (the field mapping of
/// `k8s.io/kubernetes/pkg/apis/events/v1` conversion).
pub fn core_event(event: &Value) -> Value {
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!("v1"));
    out.insert("kind".into(), json!("Event"));
    let mapping = [
        ("metadata", "metadata"),
        ("regarding", "involvedObject"),
        ("reason", "reason"),
        ("note", "message"),
        ("type", "type"),
        ("deprecatedCount", "count"),
        ("deprecatedFirstTimestamp", "firstTimestamp"),
        ("deprecatedLastTimestamp", "lastTimestamp"),
        ("deprecatedSource", "source"),
        ("eventTime", "eventTime"),
        ("series", "series"),
        ("action", "action"),
        ("related", "related"),
        ("reportingController", "reportingComponent"),
        ("reportingInstance", "reportingInstance"),
    ];
    for (from, to) in mapping {
        if let Some(v) = event.get(from).filter(|v| !v.is_null()) {
            out.insert(to.into(), v.clone());
        }
    }
    Value::Object(out)
}
