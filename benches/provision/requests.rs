//! A client's requests as it sent them: counted by verb and resource the way the API server's
//! audit log names them, writes counted per object (for duplicates), and when the first
//! metadata apply and the first pod apply of each Browser were sent and answered.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, PoisonError};

use http::{Method, Uri};
use tokio::time::Instant;

/// What a client sent: requests counted by verb and resource, writes per object, and the
/// first write of each [`Step`] of a Browser's path to its pod.
#[derive(Default)]
pub struct RequestLog {
    inner: Mutex<LogInner>,
}

#[derive(Default)]
struct LogInner {
    counts: BTreeMap<String, u64>,
    /// The first write of each step, by step and `namespace/name`.
    steps: HashMap<(Step, String), Timed>,
    /// Writes to named objects: `verb resource` → `namespace/name` → count.
    writes: BTreeMap<String, HashMap<String, u32>>,
}

/// A write on the path from a Browser's create to its pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// The Browser's metadata apply (finalizer and labels).
    Metadata,
    /// The pod's apply (its create; not a dry run).
    Pod,
}

/// When a step's first write was sent, and when its answer's headers arrived.
#[derive(Clone, Copy, Debug)]
pub struct Timed {
    pub sent: Instant,
    pub answered: Option<Instant>,
}

/// A step's first write in flight: hand it back to [`RequestLog::answered`].
pub struct Pending {
    step: Step,
    object: String,
}

/// A request as the API server's audit log would name it.
#[derive(Debug, PartialEq, Eq)]
pub struct Classified {
    /// `get`, `list`, `watch`, `create`, `update`, `apply`, `patch`, `delete`,
    /// `deletecollection` (`-dry-run` appended for dry runs), or `discovery`.
    pub verb: String,
    /// Plural, `/subresource` appended.
    pub resource: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
}

pub fn classify(method: &Method, uri: &Uri, apply: bool) -> Classified {
    let segments: Vec<&str> = uri.path().split('/').filter(|s| !s.is_empty()).collect();
    let rest = match segments.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => &[][..],
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some(ns.to_string()), rest),
        _ => (None, rest),
    };
    let Some((plural, rest)) = rest.split_first() else {
        return Classified {
            verb: "discovery".into(),
            resource: String::new(),
            namespace: None,
            name: None,
        };
    };
    let name = rest.first().map(|n| n.to_string());
    let resource = match rest.get(1) {
        Some(sub) => format!("{plural}/{sub}"),
        None => plural.to_string(),
    };
    let query = uri.query().unwrap_or_default();
    let flag = |key: &str| {
        query
            .split('&')
            .any(|kv| kv == format!("{key}=true") || kv == format!("{key}=1"))
    };
    let verb = match (method, name.is_some()) {
        (&Method::GET, true) => "get",
        (&Method::GET, false) if flag("watch") => "watch",
        (&Method::GET, false) => "list",
        (&Method::POST, _) => "create",
        (&Method::PUT, _) => "update",
        (&Method::PATCH, _) if apply => "apply",
        (&Method::PATCH, _) => "patch",
        (&Method::DELETE, true) => "delete",
        (&Method::DELETE, false) => "deletecollection",
        _ => "other",
    };
    let dry_run = query.split('&').any(|kv| kv == "dryRun=All");
    Classified {
        verb: if dry_run {
            format!("{verb}-dry-run")
        } else {
            verb.to_string()
        },
        resource,
        namespace,
        name,
    }
}

impl RequestLog {
    fn lock(&self) -> std::sync::MutexGuard<'_, LogInner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Notes a request as it is sent; the first write of a [`Step`] for its object comes back
    /// as [`Pending`], to be marked answered.
    pub fn record(&self, method: &Method, uri: &Uri, apply: bool) -> Option<Pending> {
        let sent = Instant::now();
        let c = classify(method, uri, apply);
        let mut inner = self.lock();
        let key = if c.resource.is_empty() {
            c.verb.clone()
        } else {
            format!("{} {}", c.verb, c.resource)
        };
        *inner.counts.entry(key.clone()).or_default() += 1;
        let object = c
            .namespace
            .zip(c.name)
            .map(|(ns, name)| format!("{ns}/{name}"));
        if is_write(&c.verb)
            && let Some(object) = &object
        {
            *inner
                .writes
                .entry(key)
                .or_default()
                .entry(object.clone())
                .or_default() += 1;
        }
        let step = match (c.verb.as_str(), c.resource.as_str()) {
            ("apply", "browsers") => Step::Metadata,
            ("apply", "pods") => Step::Pod,
            _ => return None,
        };
        let object = object?;
        match inner.steps.entry((step, object.clone())) {
            Entry::Vacant(first) => {
                first.insert(Timed {
                    sent,
                    answered: None,
                });
                Some(Pending { step, object })
            }
            Entry::Occupied(_) => None,
        }
    }

    /// The answer to a step's first write arrived.
    pub fn answered(&self, pending: Pending) {
        let now = Instant::now();
        if let Some(timed) = self.lock().steps.get_mut(&(pending.step, pending.object)) {
            timed.answered = Some(now);
        }
    }

    /// The first write of `step` for `ns/name`.
    pub fn step(&self, step: Step, ns: &str, name: &str) -> Option<Timed> {
        self.lock()
            .steps
            .get(&(step, format!("{ns}/{name}")))
            .copied()
    }

    /// Requests so far, keyed `verb resource`.
    pub fn counts(&self) -> BTreeMap<String, u64> {
        self.lock().counts.clone()
    }

    /// Writes to single objects beyond what the path needs ([`needed_writes`]; `ended`: the
    /// sessions end by themselves), by `verb resource`: for each object, the writes of one
    /// verb to one resource past that number. Keys without any are left out.
    pub fn duplicates(&self, ended: bool) -> BTreeMap<String, u64> {
        self.lock()
            .writes
            .iter()
            .filter_map(|(key, objects)| {
                let needed = needed_writes(key, ended);
                let extra: u64 = objects
                    .values()
                    .map(|&n| u64::from(n.saturating_sub(needed)))
                    .sum();
                (extra > 0).then(|| (key.clone(), extra))
            })
            .collect()
    }
}

/// Whether a verb (as [`classify`] names it) changes something; dry runs store nothing.
pub fn is_write(verb: &str) -> bool {
    matches!(
        verb,
        "create" | "update" | "apply" | "patch" | "delete" | "deletecollection"
    )
}

/// Writes of one `verb resource` to one Browser or pod that a session needs: two status
/// applies (`Pending` once the pod is created, `Running` with its pod IP), and a third when
/// the session ends by itself (`ended`: its end), one of everything else (metadata apply, pod
/// apply, pod delete, Browser delete, finalizer release).
pub fn needed_writes(key: &str, ended: bool) -> u32 {
    match key {
        "apply browsers/status" if ended => 3,
        "apply browsers/status" => 2,
        _ => 1,
    }
}
