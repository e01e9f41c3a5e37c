//! Read-your-writes over the watch caches. A reconcile triggered by one object's event may
//! see another object older than what the operator itself last wrote, or still see a Browser
//! it has already let go of. The newest state each write returned is kept until the cache
//! catches up, so that no decision is taken on a copy older than the operator's own last
//! write (which would repeat a write, or worse, act on a Browser that is gone).
//!
//! A write may also return someone else's change made after the reconcile read its copy (a
//! deletion, say). The watch event of that change is older than the write, yet no decision
//! saw it: only the versions the operator's own reads and writes returned are echoes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use kube::Resource;
use kube::api::DynamicObject;
use kube::core::ApiResource;
use kube::runtime::watcher;

use crate::cached::{CachedBrowser, CachedPod};

/// What the operator last knew of an object from its own writes.
#[derive(Clone, Debug)]
pub(super) enum Known {
    /// The object as the last write returned it.
    Object(Arc<DynamicObject>),
    /// Deleted by the operator (a pod), or let go of (a Browser whose finalizer the operator
    /// released, or that the API answered 404 for): the cache may still show this UID.
    Gone { uid: String },
}

type Key = (String, String);

/// What is kept of one object until the cache catches up.
struct Kept {
    known: Known,
    /// The versions of this object the operator's reads and writes returned since the cache
    /// last caught up: a decision was taken on each, so their watch events are echoes.
    ours: Vec<u64>,
}

type Map = Mutex<HashMap<Key, Kept>>;

#[derive(Default)]
pub(super) struct Fresher {
    browsers: Map,
    pods: Map,
}

fn rv(object: &impl Resource) -> Option<u64> {
    object.meta().resource_version.as_deref()?.parse().ok()
}

fn uid(object: &impl Resource) -> Option<&str> {
    object.meta().uid.as_deref()
}

fn key(ns: &str, name: &str) -> Key {
    (ns.to_string(), name.to_string())
}

fn lock(map: &Map) -> MutexGuard<'_, HashMap<Key, Kept>> {
    map.lock().unwrap_or_else(|e| e.into_inner())
}

/// Keeps `known` as the newest state of the object, adding its version to those the
/// operator has seen of the same object.
fn remember(map: &Map, ns: &str, name: &str, known: Known) {
    let mut map = lock(map);
    let key = key(ns, name);
    let mut ours = match (&known, map.remove(&key)) {
        (
            Known::Object(new),
            Some(Kept {
                known: Known::Object(old),
                ours,
            }),
        ) if uid(&**new) == uid(&*old) => ours,
        _ => Vec::new(),
    };
    if let Known::Object(object) = &known {
        ours.extend(rv(&**object));
    }
    map.insert(key, Kept { known, ours });
}

fn echo(map: &Map, cached: &impl Resource) -> bool {
    let meta = cached.meta();
    let (Some(ns), Some(name)) = (meta.namespace.as_deref(), meta.name.as_deref()) else {
        return false;
    };
    let key = key(ns, name);
    let mut map = lock(map);
    let Some(Kept {
        known: Known::Object(newest),
        ours,
    }) = map.get(&key)
    else {
        return false;
    };
    if uid(&**newest) != uid(cached) {
        return false;
    }
    match (rv(&**newest), rv(cached)) {
        (Some(a), Some(b)) if b == a => {
            map.remove(&key);
            true
        }
        // Older than the newest: an echo only of a version the operator saw itself.
        (Some(_), Some(b)) => ours.contains(&b),
        _ => false,
    }
}

impl Fresher {
    pub(super) fn remember_browser(&self, ns: &str, name: &str, known: Known) {
        remember(&self.browsers, ns, name, known);
    }

    pub(super) fn remember_pod(&self, ns: &str, name: &str, known: Known) {
        remember(&self.pods, ns, name, known);
    }

    /// Whether a watch event of a Browser only shows what the operator's own reads and writes
    /// already returned: a reconcile on it would find nothing new. The echo of the newest
    /// means the cache caught up, so what was kept goes. An older version the operator never
    /// saw is news, though its last write may already carry it: a reconcile then decides on
    /// that write's answer.
    pub(super) fn browser_echo(&self, event: &watcher::Event<CachedBrowser>) -> bool {
        matches!(event, watcher::Event::Apply(b) if echo(&self.browsers, b))
    }

    /// [`Fresher::browser_echo`] for pods. A deletion is never an echo, whatever version it
    /// carries: no write of the operator returns a pod that is gone.
    pub(super) fn pod_echo(&self, event: &watcher::Event<CachedPod>) -> bool {
        matches!(event, watcher::Event::Apply(p) if echo(&self.pods, p))
    }

    /// The Browser watch saw the Browser `uid` deleted: nothing of it is needed any more.
    pub(super) fn forget(&self, ns: &str, name: &str, uid: &str) {
        let key = key(ns, name);
        let mut browsers = lock(&self.browsers);
        let ours = match browsers.get(&key).map(|kept| &kept.known) {
            Some(Known::Object(b)) => self::uid(&**b) == Some(uid),
            Some(Known::Gone { uid: gone }) => gone == uid,
            None => true,
        };
        if ours {
            browsers.remove(&key);
            lock(&self.pods).remove(&key);
        }
    }

    /// Drops what is kept of Browsers the cache no longer holds (deleted during a watch gap).
    pub(super) fn retain(&self, mut present: impl FnMut(&str, &str) -> bool) {
        let mut browsers = lock(&self.browsers);
        let mut pods = lock(&self.pods);
        browsers.retain(|(ns, name), _| present(ns, name));
        pods.retain(|k, _| browsers.contains_key(k) || present(&k.0, &k.1));
    }

    /// The Browser to decide on: the newer of the cached one and what the operator last
    /// wrote; `None` when the operator has let go of this Browser (whatever the cache shows).
    pub(super) fn pick_browser(
        &self,
        ns: &str,
        name: &str,
        cached: &CachedBrowser,
        ar: &ApiResource,
    ) -> Option<Arc<DynamicObject>> {
        let key = key(ns, name);
        let mut browsers = lock(&self.browsers);
        let Some(known) = browsers.get(&key).map(|kept| kept.known.clone()) else {
            return Some(Arc::new(cached.to_object(ar)));
        };
        match known {
            Known::Gone { uid } if self::uid(cached) == Some(&uid) => None,
            Known::Object(ours)
                if uid(&*ours) == uid(cached)
                    && matches!((rv(&*ours), rv(cached)), (Some(a), Some(b)) if a > b) =>
            {
                Some(ours)
            }
            // The cache caught up, or holds another Browser of the same name.
            _ => {
                browsers.remove(&key);
                Some(Arc::new(cached.to_object(ar)))
            }
        }
    }

    /// The pod to decide on: the newer of the cached one and what the operator last wrote;
    /// `None` when the cache has nothing or still shows a pod the operator deleted, so that
    /// the caller confirms with a read.
    pub(super) fn pick_pod(
        &self,
        ns: &str,
        name: &str,
        cached: Option<&CachedPod>,
        ar: &ApiResource,
    ) -> Option<Arc<DynamicObject>> {
        let key = key(ns, name);
        let mut pods = lock(&self.pods);
        let from_cache = |cached: &CachedPod| Arc::new(cached.to_object(ar));
        let Some(known) = pods.get(&key).map(|kept| kept.known.clone()) else {
            return cached.map(from_cache);
        };
        match (known, cached) {
            // Absent from the cache: just created or already gone; the caller reads it.
            (Known::Object(_), None) => {
                pods.remove(&key);
                None
            }
            (Known::Object(ours), Some(cached)) => match (rv(&*ours), rv(cached)) {
                (Some(a), Some(b)) if a > b && uid(&*ours) == uid(cached) => Some(ours),
                _ => {
                    pods.remove(&key);
                    Some(from_cache(cached))
                }
            },
            (Known::Gone { uid }, Some(cached)) if self::uid(cached) == Some(&uid) => None,
            (Known::Gone { .. }, cached) => {
                pods.remove(&key);
                cached.map(from_cache)
            }
        }
    }

    #[cfg(test)]
    fn len(&self) -> (usize, usize) {
        (lock(&self.browsers).len(), lock(&self.pods).len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn value(rv: &str, uid: &str) -> serde_json::Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "s1", "namespace": "ns", "uid": uid, "resourceVersion": rv}
        })
    }

    fn obj(rv: &str, uid: &str) -> Arc<DynamicObject> {
        Arc::new(serde_json::from_value(value(rv, uid)).unwrap())
    }

    fn browser(rv: &str, uid: &str) -> CachedBrowser {
        serde_json::from_value(value(rv, uid)).unwrap()
    }

    fn pod(rv: &str, uid: &str) -> CachedPod {
        serde_json::from_value(value(rv, uid)).unwrap()
    }

    fn ar() -> ApiResource {
        ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&())
    }

    fn version(o: Option<Arc<DynamicObject>>) -> Option<String> {
        o.and_then(|o| o.metadata.resource_version.clone())
    }

    #[test]
    fn our_newer_write_wins_until_the_cache_catches_up() {
        let f = Fresher::default();
        f.remember_browser("ns", "s1", Known::Object(obj("10", "u")));
        let picked = f.pick_browser("ns", "s1", &browser("9", "u"), &ar());
        assert_eq!(version(picked).as_deref(), Some("10"));
        let picked = f.pick_browser("ns", "s1", &browser("11", "u"), &ar());
        assert_eq!(version(picked).as_deref(), Some("11"));
        // The entry is gone once the cache caught up.
        let picked = f.pick_browser("ns", "s1", &browser("9", "u"), &ar());
        assert_eq!(version(picked).as_deref(), Some("9"));
    }

    #[test]
    fn a_browser_let_go_of_stays_gone_while_the_cache_still_shows_it() {
        let f = Fresher::default();
        f.remember_browser("ns", "s1", Known::Gone { uid: "u".into() });
        assert!(
            f.pick_browser("ns", "s1", &browser("9", "u"), &ar())
                .is_none()
        );
        // However often the stale copy comes back.
        assert!(
            f.pick_browser("ns", "s1", &browser("9", "u"), &ar())
                .is_none()
        );
        // A new Browser of the same name is another matter.
        let picked = f.pick_browser("ns", "s1", &browser("20", "new"), &ar());
        assert_eq!(version(picked).as_deref(), Some("20"));
    }

    #[test]
    fn our_write_never_stands_in_for_another_browser_of_the_same_name() {
        let f = Fresher::default();
        f.remember_browser("ns", "s1", Known::Object(obj("10", "old")));
        let picked = f
            .pick_browser("ns", "s1", &browser("5", "new"), &ar())
            .unwrap();
        assert_eq!(picked.metadata.uid.as_deref(), Some("new"));
    }

    #[test]
    fn forgetting_needs_the_deleted_browser_uid_and_drops_its_pod_too() {
        let f = Fresher::default();
        f.remember_browser("ns", "s1", Known::Gone { uid: "u".into() });
        f.remember_pod("ns", "s1", Known::Gone { uid: "p".into() });
        f.forget("ns", "s1", "other");
        assert_eq!(f.len(), (1, 1));
        f.forget("ns", "s1", "u");
        assert_eq!(f.len(), (0, 0));
    }

    #[test]
    fn retain_drops_browsers_the_cache_no_longer_has() {
        let f = Fresher::default();
        f.remember_browser("ns", "gone", Known::Gone { uid: "u".into() });
        f.remember_pod("ns", "gone", Known::Gone { uid: "p".into() });
        f.remember_browser("ns", "kept", Known::Object(obj("3", "k")));
        f.retain(|_, name| name == "kept");
        assert_eq!(f.len(), (1, 0));
    }

    #[test]
    fn echoes_of_our_reads_and_writes_are_told_apart_from_news() {
        let f = Fresher::default();
        // A read of version 8, then a write that returned 10.
        f.remember_browser("ns", "s1", Known::Object(obj("8", "u")));
        f.remember_browser("ns", "s1", Known::Object(obj("10", "u")));
        let applied = |b| watcher::Event::Apply(b);
        assert!(
            f.browser_echo(&applied(browser("8", "u"))),
            "a version a decision was taken on"
        );
        assert!(
            !f.browser_echo(&applied(browser("10", "other"))),
            "another Browser"
        );
        assert!(
            f.browser_echo(&applied(browser("10", "u"))),
            "our write's echo"
        );
        // The cache caught up: what was kept of the write is gone, later changes are news.
        assert_eq!(f.len(), (0, 0));
        assert!(!f.browser_echo(&applied(browser("11", "u"))));
        f.remember_pod("ns", "s1", Known::Object(obj("20", "p")));
        assert!(
            !f.pod_echo(&watcher::Event::Apply(pod("21", "p"))),
            "a kubelet's update"
        );
        assert!(f.pod_echo(&watcher::Event::Apply(pod("20", "p"))));
    }

    #[test]
    fn a_change_our_write_carried_but_no_decision_saw_is_news() {
        // The reconcile decided on version 8; the Browser was deleted at 9; the status write
        // returned 10, deleting. The event of 9 is older than the write but must trigger the
        // reconcile that cleans up: nothing else will.
        let f = Fresher::default();
        f.remember_browser("ns", "s1", Known::Object(obj("8", "u")));
        f.remember_browser("ns", "s1", Known::Object(obj("10", "u")));
        assert!(!f.browser_echo(&watcher::Event::Apply(browser("9", "u"))));
        // That reconcile decides on the write's answer, the newest.
        let picked = f.pick_browser("ns", "s1", &browser("9", "u"), &ar());
        assert_eq!(version(picked).as_deref(), Some("10"));
        // The same for a pod the kubelet changed before the operator's write to it.
        f.remember_pod("ns", "s1", Known::Object(obj("30", "p")));
        assert!(!f.pod_echo(&watcher::Event::Apply(pod("29", "p"))));
    }

    #[test]
    fn versions_of_another_object_of_the_same_name_are_not_ours() {
        let f = Fresher::default();
        f.remember_browser("ns", "s1", Known::Object(obj("8", "old")));
        f.remember_browser("ns", "s1", Known::Object(obj("10", "new")));
        f.remember_browser("ns", "s1", Known::Object(obj("12", "new")));
        assert!(!f.browser_echo(&watcher::Event::Apply(browser("8", "new"))));
        assert!(f.browser_echo(&watcher::Event::Apply(browser("10", "new"))));
    }

    #[test]
    fn the_deletion_of_a_pod_the_operator_last_wrote_is_news() {
        // The pod the operator's delete returned (terminating) is removed without a further
        // change: the deletion may carry the very version the operator remembers.
        let f = Fresher::default();
        f.remember_pod("ns", "s1", Known::Object(obj("30", "p")));
        assert!(!f.pod_echo(&watcher::Event::Delete(pod("30", "p"))));
        assert!(f.pod_echo(&watcher::Event::Apply(pod("30", "p"))));
    }

    #[test]
    fn a_pod_is_never_invented_when_the_cache_lacks_it() {
        let f = Fresher::default();
        f.remember_pod("ns", "s1", Known::Object(obj("10", "u")));
        assert!(f.pick_pod("ns", "s1", None, &ar()).is_none());
    }

    #[test]
    fn a_pod_we_deleted_is_hidden_but_not_a_new_one() {
        let f = Fresher::default();
        f.remember_pod("ns", "s1", Known::Gone { uid: "old".into() });
        assert!(
            f.pick_pod("ns", "s1", Some(&pod("5", "old")), &ar())
                .is_none()
        );
        assert!(
            f.pick_pod("ns", "s1", Some(&pod("6", "new")), &ar())
                .is_some()
        );
    }
}
