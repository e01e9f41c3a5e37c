//! The index of one watched scope (docs/architecture.md, "How one Browser flows through the
//! code"): what the operator knows beside its watch caches, as plain data, and what each
//! watch event and each reconcile's end asks of the work queue.
//!
//! - Read-your-writes (`freshness`): the answers of the operator's own requests until the
//!   caches show them, and which watch events are only their echoes.
//! - The lines of the capacity queue (`lines`).
//! - The reconciles under way: a watch event for a Browser whose reconcile runs is held
//!   until it ends, which then says whether it was news (a reconcile again) or an echo of its
//!   own answers (nothing).
//! - Refusals in a row of each Browser's requests (`rejection::after_refusal`).
//! - Which caches have completed their first list: none is reconciled before all have, and
//!   then every completed list reconciles the whole scope.

pub mod freshness;
pub mod lines;

use std::collections::HashMap;
use std::sync::Arc;

use jiff::Timestamp;
use kube_core::{DynamicObject, Resource};

use crate::api::owner;
use crate::cached::{CachedBrowser, CachedKinds, CachedPod};
use crate::lifecycle::capacity::Position;
use crate::lifecycle::reconcile::{Done, Learnt, Next, Trouble};
use freshness::{Freshness, Pick, Version};
use lines::{Lines, Standing};

/// A Browser: namespace and name.
pub type Key = (String, String);

/// A watch event, once the cache holds what it brought.
#[derive(Debug, Clone, Copy)]
pub enum Event<'a, K> {
    Applied(&'a K),
    Deleted(&'a K),
    /// A relist begins.
    Listing,
    /// An object the relist found.
    Listed(&'a K),
    /// The relist is in the cache.
    ListDone,
}

/// The caches of a scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cache {
    Browsers,
    Pods,
    BrowserConfigs,
    ResourceQuotas,
}

/// What the work queue is asked for.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Work {
    /// Browsers to reconcile.
    pub keys: Vec<Key>,
    /// Every Browser of the scope, and every pod without its Browser, is to be reconciled.
    pub everything: bool,
}

/// A watch event seen while the reconcile of its Browser ran.
#[derive(Debug)]
struct Seen {
    pod: bool,
    /// `None`: a deletion.
    version: Option<String>,
    echo: bool,
}

/// A reconcile under way: the versions it began from, and the events seen since.
#[derive(Debug, Default)]
struct Flight {
    browser: Option<String>,
    pod: Option<String>,
    seen: Vec<Seen>,
    /// A relist of the Browsers, of the pods, began meanwhile: what its answers returned may
    /// be in the list, or behind a newer version the list holds, so it is not kept.
    relisted: [bool; 2],
    /// Where the last watch event meanwhile put the Browser in its line. It is noted when the
    /// reconcile ends, after what its answers taught: a Browser admitted leaves its line only
    /// once its owner counts as served, or the next slot could go to the same owner.
    standing: Option<Option<Standing>>,
    /// The namespace's ResourceQuota changes seen when it began.
    quota_changes: u64,
}

/// What a reconcile begins from.
#[derive(Debug)]
pub struct Begun {
    /// The Browser to decide on: `None` when the operator let go of it or the cache has none.
    pub browser: Option<Arc<DynamicObject>>,
    /// The pod to decide on: `None` when the cache has none (the reconcile reads it).
    pub pod: Option<Arc<DynamicObject>>,
    /// Where it stands in its namespace's line for quota.
    pub place: Position,
    pub refusals: u32,
}

fn version<K: Resource>(object: &K) -> Option<Version<'_>> {
    let meta = object.meta();
    Some((meta.uid.as_deref()?, meta.resource_version.as_deref()?))
}

fn key_of<K: Resource>(object: &K) -> Option<Key> {
    let meta = object.meta();
    Some((meta.namespace.clone()?, meta.name.clone()?))
}

/// The index of one scope.
#[derive(Debug)]
pub struct Index {
    kinds: CachedKinds,
    browsers: Freshness,
    pods: Freshness,
    lines: Lines,
    flights: HashMap<Key, Flight>,
    refusals: HashMap<Key, u32>,
    /// ResourceQuota changes seen, by namespace.
    quota_changes: HashMap<String, u64>,
    /// Caches whose first list is not in yet.
    unlisted: Vec<Cache>,
}

impl Index {
    pub fn new(kinds: CachedKinds) -> Self {
        Self {
            kinds,
            browsers: Freshness::default(),
            pods: Freshness::default(),
            lines: Lines::default(),
            flights: HashMap::new(),
            refusals: HashMap::new(),
            quota_changes: HashMap::new(),
            unlisted: vec![
                Cache::Browsers,
                Cache::Pods,
                Cache::BrowserConfigs,
                Cache::ResourceQuotas,
            ],
        }
    }

    /// Whether every cache has its first list: reconciles may decide.
    pub fn ready(&self) -> bool {
        self.unlisted.is_empty()
    }

    /// A cache completed a list: whether the whole scope is reconciled now. Not before every
    /// cache has its first (those reconciles would decide on a partial picture), then at each.
    pub fn listed(&mut self, cache: Cache) -> Work {
        self.unlisted.retain(|c| *c != cache);
        Work {
            keys: Vec::new(),
            everything: self.ready(),
        }
    }

    /// The ResourceQuotas completed a list: the first of their lists counts towards the
    /// scope's readiness; after a relist (which may have missed a change that made room), the
    /// first of every line looks again.
    pub fn quotas_listed(&mut self) -> Work {
        if self.unlisted.contains(&Cache::ResourceQuotas) {
            return self.listed(Cache::ResourceQuotas);
        }
        Work {
            keys: self.lines.firsts(),
            everything: false,
        }
    }

    /// Notes a watch event of a Browser; the keys to reconcile.
    pub fn browser(&mut self, event: Event<CachedBrowser>) -> Work {
        let mut work = Work::default();
        match event {
            Event::Applied(browser) => {
                let (Some(key), Some(seen)) = (key_of(browser), version(browser)) else {
                    return work;
                };
                work.keys
                    .extend(self.stands(&key, lines::standing(browser)));
                let echo = self.browsers.observe(&key, seen);
                self.news(key, false, Some(seen.1), echo, &mut work);
            }
            Event::Deleted(browser) => {
                let (Some(key), Some((uid, _))) = (key_of(browser), version(browser)) else {
                    return work;
                };
                work.keys.extend(self.stands(&key, None));
                self.browsers.forget(&key, uid);
                self.pods.drop_key(&key);
                // Its pod, if the cache still has one, may be left behind.
                self.news(key, false, None, false, &mut work);
            }
            Event::Listing => {
                self.lines.relist_started();
                self.relisting(false);
            }
            Event::Listed(browser) => {
                if let (Some(key), Some(seen)) = (key_of(browser), version(browser)) {
                    self.lines.relisted(&key, lines::standing(browser));
                    let echo = self.browsers.listed(&key, seen);
                    self.listed_during(&key, false, seen.1, echo);
                }
            }
            Event::ListDone => {
                self.lines.relist_done();
                self.browsers.reset();
                return self.listed(Cache::Browsers);
            }
        }
        self.until_ready(work)
    }

    /// Puts the Browser `key` where a watch event shows it in its line, or, while a reconcile
    /// of it is under way, keeps that for its end; the first of the line to wake.
    fn stands(&mut self, key: &Key, stand: Option<Standing>) -> Option<Key> {
        match self.flights.get_mut(key) {
            Some(flight) => {
                flight.standing = Some(stand);
                None
            }
            None => self.lines.note(key, stand),
        }
    }

    /// Before every cache has its first list, events make no reconcile: the first round
    /// covers what they brought.
    fn until_ready(&self, mut work: Work) -> Work {
        if !self.ready() {
            work.keys.clear();
        }
        work
    }

    /// Notes a watch event of a pod; the keys to reconcile (its Browser's).
    pub fn pod(&mut self, event: Event<CachedPod>) -> Work {
        let mut work = Work::default();
        match event {
            Event::Applied(pod) => {
                let (Some(key), Some(seen)) = (key_of(pod), version(pod)) else {
                    return work;
                };
                self.serves(&key, pod);
                let echo = self.pods.observe(&key, seen);
                self.news(key, true, Some(seen.1), echo, &mut work);
            }
            Event::Deleted(pod) => {
                if let Some(key) = key_of(pod) {
                    self.news(key, true, None, false, &mut work);
                }
            }
            Event::Listing => self.relisting(true),
            Event::Listed(pod) => {
                if let (Some(key), Some(seen)) = (key_of(pod), version(pod)) {
                    self.serves(&key, pod);
                    let echo = self.pods.listed(&key, seen);
                    self.listed_during(&key, true, seen.1, echo);
                }
            }
            Event::ListDone => {
                self.pods.reset();
                return self.listed(Cache::Pods);
            }
        }
        self.until_ready(work)
    }

    /// The owner of `pod` was served a slot when the pod was created.
    fn serves(&mut self, key: &Key, pod: &CachedPod) {
        if let (owner, Some(created)) = pod.served() {
            self.lines.served(key, owner.map(Box::from), created, false);
        }
    }

    /// A relist of the Browsers (or of the pods) begins: the reconciles under way keep
    /// nothing of what their answers return of them.
    fn relisting(&mut self, pod: bool) {
        for flight in self.flights.values_mut() {
            flight.relisted[usize::from(pod)] = true;
        }
    }

    /// An object a relist found, for the reconcile of its Browser under way (a relist
    /// reconciles every Browser anyway once it is done).
    fn listed_during(&mut self, key: &Key, pod: bool, version: &str, echo: bool) {
        if let Some(flight) = self.flights.get_mut(key) {
            flight.seen.push(Seen {
                pod,
                version: Some(version.to_string()),
                echo,
            });
        }
    }

    /// An event of `key`'s Browser or pod: held for the reconcile under way, if any, else
    /// reconciled unless it is an echo.
    fn news(&mut self, key: Key, pod: bool, version: Option<&str>, echo: bool, work: &mut Work) {
        match self.flights.get_mut(&key) {
            Some(flight) => flight.seen.push(Seen {
                pod,
                version: version.map(str::to_string),
                echo,
            }),
            None if !echo => work.keys.push(key),
            None => {}
        }
    }

    /// A ResourceQuota of namespace `ns` changed: the first of its line looks again.
    pub fn quota_changed(&mut self, ns: &str) -> Work {
        *self.quota_changes.entry(ns.to_string()).or_default() += 1;
        Work {
            keys: self.lines.first(ns).into_iter().collect(),
            everything: false,
        }
    }

    fn quota_changes(&self, ns: &str) -> u64 {
        self.quota_changes.get(ns).copied().unwrap_or(0)
    }

    /// A reconcile of `key` begins from the Browser and pod the caches hold: what it decides
    /// on. Watch events of `key` are held from now until it ends.
    /// `quotas`: whether the namespace has ResourceQuotas (without any, and nobody in line,
    /// its place is not worked out: a burst of thousands would count each other).
    pub fn begin(
        &mut self,
        key: &Key,
        browser: Option<&CachedBrowser>,
        pod: Option<&CachedPod>,
        quotas: bool,
    ) -> Begun {
        let cached_browser = browser.and_then(version);
        let cached_pod = pod.and_then(version);
        self.flights.insert(
            key.clone(),
            Flight {
                browser: cached_browser.map(|(_, v)| v.to_string()),
                pod: cached_pod.map(|(_, v)| v.to_string()),
                seen: Vec::new(),
                relisted: [false; 2],
                standing: None,
                quota_changes: self.quota_changes(&key.0),
            },
        );
        let browser = match (self.browsers.pick(key, cached_browser), browser) {
            (Pick::Ours(ours), _) => Some(ours),
            (Pick::Cache, Some(cached)) => Some(Arc::new(cached.to_object(&self.kinds.browser))),
            (Pick::Cache | Pick::Gone, _) => None,
        };
        let pod = match (self.pods.pick(key, cached_pod), pod) {
            (Pick::Ours(ours), _) => Some(ours),
            (Pick::Cache, Some(cached)) => Some(Arc::new(cached.to_object(&self.kinds.pod))),
            (Pick::Cache | Pick::Gone, _) => None,
        };
        let place = match &browser {
            Some(b) if quotas || self.lines.first(&key.0).is_some() => {
                let created = b.metadata.creation_timestamp.as_ref();
                let created = created.map_or(Timestamp::UNIX_EPOCH, |t| t.0);
                self.lines.place(key, &owner::of(b), created)
            }
            _ => Position::default(),
        };
        Begun {
            browser,
            pod,
            place,
            refusals: self.refusals.get(key).copied().unwrap_or(0),
        }
    }

    /// The reconcile of `key` ended with `done`: what its answers taught is kept, and the keys
    /// to reconcile now: its own if a watch event held meanwhile was news, the first of its
    /// line if it moved.
    pub fn end(&mut self, key: &Key, done: &Done) -> Work {
        let flight = self.flights.remove(key).unwrap_or_default();
        let delivered = |pod: bool, began: &Option<String>| -> Vec<String> {
            let seen = flight.seen.iter().filter(|s| s.pod == pod);
            began
                .iter()
                .cloned()
                .chain(seen.filter_map(|s| s.version.clone()))
                .collect()
        };
        let (browsers, pods) = (
            delivered(false, &flight.browser),
            delivered(true, &flight.pod),
        );
        let browsers: Vec<&str> = browsers.iter().map(String::as_str).collect();
        let pods: Vec<&str> = pods.iter().map(String::as_str).collect();
        let [browsers_relisted, pods_relisted] = flight.relisted;
        self.browsers
            .learn(key, &done.browser, &browsers, !browsers_relisted);
        self.pods.learn(key, &done.pod, &pods, !pods_relisted);
        for learnt in &done.pod {
            if let Learnt::Object(pod) = learnt
                && let Some(created) = &pod.metadata.creation_timestamp
            {
                let created_now = done.created_pod && pod.metadata.deletion_timestamp.is_none();
                self.lines
                    .served(key, owner::of(pod), created.0, created_now);
            }
        }
        let mut work = Work::default();
        let stand = match done.browser.last() {
            Some(Learnt::Object(written)) => Some(lines::standing_of(written)),
            Some(Learnt::Gone { .. }) => Some(None),
            None if browsers_relisted => None,
            None => flight.standing.clone(),
        };
        if let Some(stand) = stand {
            work.keys.extend(self.lines.note(key, stand));
        }
        // It waits now, and a quota changed meanwhile: that change woke the line as it stood
        // then, without this Browser, which decided on the quotas it had read before.
        if self.lines.waits(key) && self.quota_changes(&key.0) != flight.quota_changes {
            work.keys.extend(self.lines.first(&key.0));
        }
        match &done.next {
            Next::Retry(Trouble::Refused { .. }) => {
                *self.refusals.entry(key.clone()).or_insert(0) += 1;
            }
            Next::Retry(_) => {}
            Next::AwaitChange | Next::After(_) => {
                self.refusals.remove(key);
            }
        }
        let learnt = |pod: bool| {
            let learnt = if pod { &done.pod } else { &done.browser };
            learnt
                .iter()
                .filter_map(|l| match l {
                    Learnt::Object(o) => o.metadata.resource_version.clone(),
                    Learnt::Gone { .. } => None,
                })
                .collect::<Vec<_>>()
        };
        let (learnt_browser, learnt_pod) = (learnt(false), learnt(true));
        let news = flight.seen.iter().any(|seen| {
            let (began, learnt) = if seen.pod {
                (&flight.pod, &learnt_pod)
            } else {
                (&flight.browser, &learnt_browser)
            };
            match &seen.version {
                None => true,
                Some(v) => !seen.echo && began.as_ref() != Some(v) && !learnt.contains(v),
            }
        });
        if news {
            work.keys.push(key.clone());
        }
        work
    }

    /// What is kept: objects with read-your-writes entries (Browsers, pods), and reconciles
    /// under way.
    pub fn kept(&self) -> (usize, usize, usize) {
        (self.browsers.len(), self.pods.len(), self.flights.len())
    }
}

#[cfg(test)]
mod tests {
    use kube_core::ApiResource;
    use serde_json::{Value, json};

    use super::*;

    fn kinds() -> CachedKinds {
        CachedKinds {
            browser: Arc::new(ApiResource {
                group: "selenosis.io".into(),
                version: "v1".into(),
                api_version: "selenosis.io/v1".into(),
                kind: "Browser".into(),
                plural: "browsers".into(),
            }),
            pod: Arc::new(ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&())),
        }
    }

    fn key(name: &str) -> Key {
        ("ns".into(), name.into())
    }

    fn object(name: &str, version: &str, status: Value) -> Value {
        json!({
            "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                "resourceVersion": version, "creationTimestamp": "2026-11-28T10:00:00Z"},
            "spec": {"browserName": "chrome", "browserVersion": "139.0"},
            "status": status,
        })
    }

    fn browser(name: &str, version: &str, status: Value) -> CachedBrowser {
        serde_json::from_value(object(name, version, status)).unwrap()
    }

    fn pod(name: &str, version: &str) -> CachedPod {
        serde_json::from_value(object(name, version, json!({"phase": "Pending"}))).unwrap()
    }

    fn answer(name: &str, version: &str, status: Value) -> Learnt {
        Learnt::Object(Box::new(
            serde_json::from_value(object(name, version, status)).unwrap(),
        ))
    }

    /// An index whose caches have all listed.
    fn ready() -> Index {
        let mut index = Index::new(kinds());
        for cache in [Cache::Browsers, Cache::Pods, Cache::BrowserConfigs] {
            assert!(!index.listed(cache).everything);
        }
        assert!(index.quotas_listed().everything);
        index
    }

    fn keys(work: Work) -> Vec<String> {
        work.keys.into_iter().map(|(_, name)| name).collect()
    }

    #[test]
    fn nothing_is_reconciled_before_every_cache_has_listed_then_everything_at_each_list() {
        let mut index = Index::new(kinds());
        let b = browser("s1", "1", json!({}));
        assert_eq!(index.browser(Event::Applied(&b)), Work::default());
        assert!(!index.browser(Event::ListDone).everything);
        assert!(!index.listed(Cache::Pods).everything);
        assert!(!index.listed(Cache::BrowserConfigs).everything);
        assert!(index.quotas_listed().everything, "the last first list");
        assert_eq!(keys(index.browser(Event::Applied(&b))), ["s1"]);
        // Every later list of Browsers, pods or BrowserConfigs reconciles the whole scope; a
        // later list of the quotas only wakes the first of each line.
        assert!(index.pod(Event::ListDone).everything);
        assert!(index.listed(Cache::BrowserConfigs).everything);
        assert_eq!(index.quotas_listed(), Work::default());
    }

    #[test]
    fn an_echo_of_the_operators_own_answer_makes_no_reconcile_and_news_does() {
        let mut index = ready();
        let k = key("s1");
        index.begin(&k, Some(&browser("s1", "1", json!({}))), None, true);
        let done = Done {
            browser: vec![answer("s1", "2", json!({"phase": "Pending"}))],
            ..Done::default()
        };
        assert_eq!(index.end(&k, &done), Work::default());
        // The status write's echo tells nothing new; a client's change after it does.
        let echo = browser("s1", "2", json!({"phase": "Pending"}));
        assert_eq!(index.browser(Event::Applied(&echo)), Work::default());
        let change = browser("s1", "3", json!({"phase": "Pending"}));
        assert_eq!(keys(index.browser(Event::Applied(&change))), ["s1"]);
    }

    #[test]
    fn events_during_a_reconcile_are_held_and_only_news_reconciles_again() {
        let mut index = ready();
        let k = key("s1");
        let created = Done {
            browser: vec![answer("s1", "2", json!({"phase": "Pending"}))],
            pod: vec![answer("s1", "10", json!({}))],
            ..Done::default()
        };
        // The echoes of its own writes come back before it ends: nothing more to do.
        index.begin(&k, Some(&browser("s1", "1", json!({}))), None, true);
        let echo = browser("s1", "2", json!({"phase": "Pending"}));
        assert_eq!(index.browser(Event::Applied(&echo)), Work::default());
        assert_eq!(index.pod(Event::Applied(&pod("s1", "10"))), Work::default());
        assert_eq!(index.end(&k, &created), Work::default());
        assert_eq!(index.kept(), (0, 0, 0), "the caches caught up");
        // The pod changes meanwhile (the kubelet): reconciled again once it ends.
        index.begin(&k, Some(&echo), Some(&pod("s1", "10")), true);
        assert_eq!(index.pod(Event::Applied(&pod("s1", "11"))), Work::default());
        assert_eq!(keys(index.end(&k, &Done::default())), ["s1"]);
        // A deletion is always news.
        index.begin(&k, Some(&echo), Some(&pod("s1", "11")), true);
        assert_eq!(index.pod(Event::Deleted(&pod("s1", "11"))), Work::default());
        assert_eq!(keys(index.end(&k, &Done::default())), ["s1"]);
    }

    #[test]
    fn what_a_reconcile_learnt_across_a_relist_is_not_kept_and_a_relist_resets_the_rest() {
        let mut index = ready();
        let k = key("s1");
        let b = browser("s1", "1", json!({}));
        // The create's answer (10) comes back during a relist whose list already holds the
        // pod's next version (11): 10 is never delivered, and must not stand in for 11.
        index.begin(&k, Some(&b), None, true);
        assert!(!index.pod(Event::Listing).everything);
        index.pod(Event::Listed(&pod("s1", "11")));
        assert!(index.pod(Event::ListDone).everything);
        let created = Done {
            pod: vec![answer("s1", "10", json!({}))],
            ..Done::default()
        };
        index.end(&k, &created);
        let begun = index.begin(&k, Some(&b), Some(&pod("s1", "11")), true);
        assert_eq!(
            begun
                .pod
                .and_then(|p| p.metadata.resource_version.clone())
                .as_deref(),
            Some("11")
        );
        // Kept before a relist: reset when it is done.
        index.end(&k, &created);
        assert_eq!(index.kept().1, 1);
        index.pod(Event::Listing);
        index.pod(Event::ListDone);
        assert_eq!(index.kept(), (0, 0, 0));
    }

    #[test]
    fn during_a_relist_a_reconcile_begins_from_the_answer_the_cache_does_not_hold_yet() {
        // The status write's answer (2) is listed before the cache shows it: the cache still
        // holds 1 until the list is done, and a reconcile must not begin from 1 meanwhile.
        let mut index = ready();
        let k = key("s1");
        let cached = browser("s1", "1", json!({}));
        index.begin(&k, Some(&cached), None, true);
        let written = Done {
            browser: vec![answer("s1", "2", json!({"phase": "Running"}))],
            ..Done::default()
        };
        index.end(&k, &written);
        index.browser(Event::Listing);
        index.browser(Event::Listed(&browser(
            "s1",
            "2",
            json!({"phase": "Running"}),
        )));
        let begun = index.begin(&k, Some(&cached), None, true);
        let phase = begun
            .browser
            .as_ref()
            .map(|b| b.data["status"]["phase"].clone());
        assert_eq!(phase, Some(json!("Running")));
        index.end(&k, &Done::default());
        assert!(index.browser(Event::ListDone).everything);
        assert_eq!(index.kept(), (0, 0, 0));
    }

    #[test]
    fn a_reconcile_begins_from_the_newer_answer_and_not_from_a_browser_let_go() {
        let mut index = ready();
        let k = key("s1");
        let cached = browser("s1", "1", json!({}));
        index.begin(&k, Some(&cached), None, true);
        let done = Done {
            browser: vec![answer("s1", "2", json!({"phase": "Pending"}))],
            ..Done::default()
        };
        index.end(&k, &done);
        let begun = index.begin(&k, Some(&cached), None, true);
        let version = |b: &Begun| {
            b.browser
                .as_ref()
                .and_then(|b| b.metadata.resource_version.clone())
        };
        assert_eq!(version(&begun).as_deref(), Some("2"));
        index.end(&k, &Done::default());
        let gone = Done {
            browser: vec![Learnt::Gone {
                uid: "uid-s1".into(),
            }],
            ..Done::default()
        };
        index.begin(&k, Some(&cached), None, true);
        index.end(&k, &gone);
        assert!(index.begin(&k, Some(&cached), None, true).browser.is_none());
    }

    #[test]
    fn a_deleted_browser_is_reconciled_for_the_pod_it_may_leave_behind() {
        let mut index = ready();
        let b = browser("s1", "4", json!({"phase": "Running"}));
        assert_eq!(keys(index.browser(Event::Deleted(&b))), ["s1"]);
    }

    #[test]
    fn refusals_count_in_a_row_and_start_anew_after_a_reconcile_that_settles() {
        let mut index = ready();
        let k = key("s1");
        let refused = Done {
            next: Next::Retry(Trouble::Refused {
                action: crate::lifecycle::request::Action::ReadPod,
                code: 413,
                reason: "TooLarge".into(),
                message: "big".into(),
            }),
            ..Done::default()
        };
        let failed = Done {
            next: Next::Retry(Trouble::Unsettled),
            ..Done::default()
        };
        let b = browser("s1", "1", json!({}));
        for (done, then) in [
            (&refused, 1),
            (&refused, 2),
            (&failed, 2),
            (&Done::default(), 0),
        ] {
            index.begin(&k, Some(&b), None, true);
            index.end(&k, done);
            assert_eq!(index.begin(&k, Some(&b), None, true).refusals, then);
            index.end(&k, &failed);
        }
    }

    #[test]
    fn the_line_follows_the_answers_and_wakes_its_first() {
        let mut index = ready();
        let queued = |message: &str| {
            json!({"phase": "Pending", "reason": "Queued", "message": message,
                "conditions": [{"type": "Ready", "status": "False", "reason": "Queued",
                    "lastTransitionTime": "2026-11-28T10:00:01Z"}]})
        };
        let mut first = object("a", "1", queued("waiting"));
        first["metadata"]["creationTimestamp"] = json!("2026-11-28T09:00:00Z");
        let first: CachedBrowser = serde_json::from_value(first).unwrap();
        index.browser(Event::Applied(&first));
        assert_eq!(keys(index.quota_changed("ns")), ["a"]);
        // b is put in line by its own status write: a is woken, b counts behind it.
        let k = key("b");
        index.begin(&k, Some(&browser("b", "1", json!({}))), None, true);
        let done = Done {
            browser: vec![answer("b", "2", queued("waiting"))],
            ..Done::default()
        };
        assert_eq!(keys(index.end(&k, &done)), ["a"]);
        let begun = index.begin(&k, Some(&browser("b", "1", json!({}))), None, true);
        assert_eq!((begun.place.ahead, begun.place.owners), (1, 1));
        index.end(&k, &Done::default());
        // a leaves the line (admitted): b is the first, woken.
        let admitted = browser("a", "2", json!({"phase": "Pending"}));
        let work = index.browser(Event::Applied(&admitted));
        assert_eq!(keys(work), ["b", "a"]);
        assert_eq!(keys(index.quotas_listed()), ["b"]);
    }

    #[test]
    fn an_admitted_browser_leaves_its_line_when_its_reconcile_ends_after_its_owner_is_served() {
        // Only a pod the reconcile created serves its owner now; one it read is as old as
        // the watch says.
        for (created_pod, woken) in [(true, "b0"), (false, "a1")] {
            let mut index = ready();
            let of = |name: &str, owner: &str, version: &str, status: Value| -> CachedBrowser {
                let mut object = object(name, version, status);
                object["metadata"]["labels"] = json!({"selenosis.io/owner": owner});
                serde_json::from_value(object).unwrap()
            };
            let queued = json!({"phase": "Pending", "reason": "Queued", "conditions": [
                {"type": "Ready", "status": "False", "reason": "Queued",
                 "lastTransitionTime": "2026-11-28T10:00:01Z"}]});
            for (name, owner) in [("a0", "A"), ("a1", "A"), ("b0", "B")] {
                index.browser(Event::Applied(&of(name, owner, "1", queued.clone())));
            }
            // Both were served in the same second, B after A: A's turn.
            let served = |name: &str, owner: &str| -> CachedPod {
                let mut object = object(name, "1", json!({"phase": "Running"}));
                object["metadata"]["labels"] = json!({"selenosis.io/owner": owner});
                serde_json::from_value(object).unwrap()
            };
            index.pod(Event::Applied(&served("a-old", "A")));
            index.pod(Event::Applied(&served("b-old", "B")));
            assert_eq!(keys(index.quota_changed("ns")), ["a0"]);
            let k = key("a0");
            index.begin(&k, Some(&of("a0", "A", "1", queued.clone())), None, true);
            // Its admission seen by the watch while the reconcile still runs: nobody is woken
            // yet.
            let admitted = json!({"phase": "Pending"});
            let work = index.browser(Event::Applied(&of("a0", "A", "2", admitted.clone())));
            assert_eq!(keys(work), Vec::<String>::new());
            // It ends with its pod created: A counts as served, and B's first is woken, not
            // a1.
            let mut pod = object("a0", "1", json!({"phase": "Pending"}));
            pod["metadata"]["labels"] = json!({"selenosis.io/owner": "A"});
            let done = Done {
                pod: vec![Learnt::Object(Box::new(
                    serde_json::from_value(pod).unwrap(),
                ))],
                created_pod,
                browser: vec![answer("a0", "2", admitted)],
                ..Done::default()
            };
            assert_eq!(
                keys(index.end(&k, &done)),
                [woken],
                "created: {created_pod}"
            );
            assert_eq!(keys(index.quota_changed("ns")), [woken]);
        }
    }

    #[test]
    fn a_browser_that_joins_the_line_while_a_quota_changes_looks_again() {
        let queued = json!({"phase": "Pending", "reason": "Queued", "conditions": [
            {"type": "Ready", "status": "False", "reason": "Queued",
             "lastTransitionTime": "2026-11-28T10:00:01Z"}]});
        for (quota_changed, woken) in [(true, vec!["b"]), (false, vec![])] {
            let mut index = ready();
            let k = key("b");
            let arriving = browser("b", "1", json!({}));
            index.browser(Event::Applied(&arriving));
            // It decides on the quotas it read: full. A slot frees while it writes `Queued`;
            // nobody waits yet to be woken.
            index.begin(&k, Some(&arriving), None, true);
            if quota_changed {
                assert_eq!(index.quota_changed("ns"), Work::default());
            }
            let done = Done {
                browser: vec![answer("b", "2", queued.clone())],
                ..Done::default()
            };
            assert_eq!(
                keys(index.end(&k, &done)),
                woken,
                "quota changed: {quota_changed}"
            );
        }
    }
}
