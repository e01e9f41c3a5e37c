//! Label and field selectors, with the grammar and semantics of `k8s.io/apimachinery/pkg/labels`
//! and `pkg/fields`.

use serde_json::Value;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Op {
    Eq(String),
    NotEq(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    NotExists,
    Gt(i64),
    Lt(i64),
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Requirement {
    key: String,
    op: Op,
}

impl Requirement {
    fn matches(&self, value: Option<&str>) -> bool {
        match (&self.op, value) {
            (Op::Eq(want), Some(v)) => v == want,
            (Op::Eq(_), None) => false,
            // `!=` and `notin` also select objects without the key.
            (Op::NotEq(want), v) => v != Some(want.as_str()),
            (Op::In(set), Some(v)) => set.iter().any(|s| s == v),
            (Op::In(_), None) => false,
            (Op::NotIn(set), v) => v.is_none_or(|v| !set.iter().any(|s| s == v)),
            (Op::Exists, v) => v.is_some(),
            (Op::NotExists, v) => v.is_none(),
            (Op::Gt(n), Some(v)) => v.parse::<i64>().is_ok_and(|x| x > *n),
            (Op::Lt(n), Some(v)) => v.parse::<i64>().is_ok_and(|x| x < *n),
            (Op::Gt(_) | Op::Lt(_), None) => false,
        }
    }
}

/// A parsed `labelSelector`; the empty selector selects everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<Requirement>);

/// Splits on commas outside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

fn set_values(s: &str) -> Result<Vec<String>, String> {
    let inner = s
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("found '{s}', expected: '('"))?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

fn parse_requirement(raw: &str) -> Result<Requirement, String> {
    let s = raw.trim();
    if let Some(key) = s.strip_prefix('!') {
        return Ok(Requirement {
            key: key.trim().to_string(),
            op: Op::NotExists,
        });
    }
    for (token, make) in [
        (" notin ", Op::NotIn as fn(Vec<String>) -> Op),
        (" in ", Op::In as fn(Vec<String>) -> Op),
    ] {
        if let Some((key, values)) = s.split_once(token) {
            return Ok(Requirement {
                key: key.trim().to_string(),
                op: make(set_values(values)?),
            });
        }
    }
    for token in ["!=", "==", "=", ">", "<"] {
        if let Some((key, value)) = s.split_once(token) {
            let value = value.trim();
            let op = match token {
                "!=" => Op::NotEq(value.to_string()),
                "==" | "=" => Op::Eq(value.to_string()),
                _ => {
                    let n = value.parse().map_err(|_| {
                        format!("for 'Gt', 'Lt' operators, the value must be an integer: {value}")
                    })?;
                    if token == ">" { Op::Gt(n) } else { Op::Lt(n) }
                }
            };
            return Ok(Requirement {
                key: key.trim().to_string(),
                op,
            });
        }
    }
    if s.is_empty() || s.contains(char::is_whitespace) {
        return Err(format!("unable to parse requirement: {raw:?}"));
    }
    Ok(Requirement {
        key: s.to_string(),
        op: Op::Exists,
    })
}

impl LabelSelector {
    pub fn parse(s: &str) -> Result<Self, String> {
        if s.trim().is_empty() {
            return Ok(Self::default());
        }
        split_top(s)
            .into_iter()
            .map(parse_requirement)
            .collect::<Result<Vec<_>, _>>()
            .map(Self)
    }

    pub fn matches(&self, obj: &Value) -> bool {
        let labels = &obj["metadata"]["labels"];
        self.0
            .iter()
            .all(|r| r.matches(labels.get(&r.key).and_then(Value::as_str)))
    }
}

/// A parsed `fieldSelector`: `=`, `==`, `!=` on the fields the resource supports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

/// Fields every resource supports; the real server adds a few per built-in kind.
const COMMON_FIELDS: [&str; 2] = ["metadata.name", "metadata.namespace"];
const POD_FIELDS: [&str; 7] = [
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
];
const EVENT_FIELDS: [&str; 10] = [
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "source",
    "type",
];

impl FieldSelector {
    /// Only the fields the real server supports for this resource are accepted.
    pub fn parse(s: &str, resource: &str, group: &str) -> Result<Self, String> {
        if s.trim().is_empty() {
            return Ok(Self::default());
        }
        let extra: &[&str] = match (group, resource) {
            ("", "pods") => &POD_FIELDS,
            ("", "events") => &EVENT_FIELDS,
            _ => &[],
        };
        let mut reqs = Vec::new();
        for part in s.split(',') {
            let part = part.trim();
            let (field, eq, value) = if let Some((f, v)) = part.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, true, v)
            } else {
                return Err(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                ));
            };
            let field = field.trim();
            if !COMMON_FIELDS.contains(&field) && !extra.contains(&field) {
                return Err(format!("field label not supported: {field}"));
            }
            reqs.push((field.to_string(), eq, value.trim().to_string()));
        }
        Ok(Self(reqs))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(field, eq, want)| {
            let value = field
                .split('.')
                .try_fold(obj, |v, seg| v.get(seg))
                .and_then(Value::as_str)
                .unwrap_or("");
            (value == want) == *eq
        })
    }
}
