//! Read-your-writes over a watch cache, by equality of resourceVersions alone: the API
//! conventions call them opaque, so they are compared, never ordered.
//!
//! What an answer of the API server returned is kept until the cache shows it, so that no
//! decision is taken on a copy older than the operator's own last write or read (which would
//! repeat a write, or act on a Browser it already let go of). A watch delivers an object's
//! versions in the order they were written, so while the newest kept version has not come
//! back, every version the cache holds is older than it; once it comes back, the cache has
//! caught up and what was kept goes. An answer whose version the watch had already
//! delivered when the answer was taken in adds nothing: the cache holds it, or newer. A relist
//! skips versions, so everything kept is reset when it ends; an answer taken in by a
//! reconcile that began before the relist did is not kept either (the index sees to that),
//! since the list may hold it or a newer version.
//!
//! A watch event carrying a version one of the operator's own answers returned is an echo: it
//! shows nothing a decision did not see. Any other is news, even an older one (a deletion that
//! a later write of the operator carried, say): it must trigger the reconcile that acts on it.

use std::collections::HashMap;
use std::sync::Arc;

use kube_core::{DynamicObject, Resource};

use super::Key;
use crate::lifecycle::reconcile::Learnt;

/// What the operator last knew of an object from its own requests.
#[derive(Clone, Debug, PartialEq)]
pub enum Known {
    /// The object as the last answer returned it.
    Object(Arc<DynamicObject>),
    /// Deleted by the operator (a pod), or let go of (a Browser whose finalizer came off, or
    /// that the API answered 404 for): the cache may still show this uid.
    Gone { uid: String },
}

/// What to decide on.
#[derive(Clone, Debug, PartialEq)]
pub enum Pick {
    /// The cache's copy (or its absence).
    Cache,
    /// The operator's own newer copy.
    Ours(Arc<DynamicObject>),
    /// Nothing: the operator let go of the object the cache still shows.
    Gone,
}

#[derive(Debug)]
struct Kept {
    newest: Known,
    /// The versions the operator's answers returned that the watch has not delivered yet.
    ours: Vec<String>,
}

/// The uid and resourceVersion of an object, as watch events and answers carry them.
pub type Version<'a> = (&'a str, &'a str);

fn identity(object: &DynamicObject) -> (Option<&str>, Option<&str>) {
    let meta = object.meta();
    (meta.uid.as_deref(), meta.resource_version.as_deref())
}

/// Read-your-writes for the objects of one kind in one scope.
#[derive(Debug, Default)]
pub struct Freshness {
    kept: HashMap<Key, Kept>,
}

impl Freshness {
    /// What to decide on for `key`, given the uid and version the cache holds (`None`: none).
    pub fn pick(&mut self, key: &Key, cached: Option<Version>) -> Pick {
        let Some(kept) = self.kept.get(key) else {
            return Pick::Cache;
        };
        match (&kept.newest, cached) {
            (Known::Gone { uid }, Some((cached_uid, _))) if uid == cached_uid => Pick::Gone,
            (Known::Object(ours), Some((uid, version)))
                if identity(ours).0 == Some(uid) && identity(ours).1 != Some(version) =>
            {
                Pick::Ours(ours.clone())
            }
            // The cache caught up, holds another object of the name, or none (a pod just
            // created or gone: the caller reads it).
            _ => {
                self.kept.remove(key);
                Pick::Cache
            }
        }
    }

    /// A live watch event showed `version` of `key`: whether it is an echo of the operator's
    /// own answers. The echo of the newest means the cache caught up: what was kept goes.
    pub fn observe(&mut self, key: &Key, version: Version) -> bool {
        let (echo, caught_up) = self.echo(key, version);
        if caught_up {
            self.kept.remove(key);
        }
        echo
    }

    /// A relist found `version` of `key`: whether it is an echo of the operator's own
    /// answers. What was kept stays: the relist reaches the cache only when it is done, and
    /// until then the cache holds what it held before.
    pub fn listed(&self, key: &Key, version: Version) -> bool {
        self.echo(key, version).0
    }

    /// Whether `version` of `key` is one the operator's answers returned, and whether it is
    /// the newest of them.
    fn echo(&self, key: &Key, (uid, version): Version) -> (bool, bool) {
        let Some(kept) = self.kept.get(key) else {
            return (false, false);
        };
        let Known::Object(newest) = &kept.newest else {
            return (false, false);
        };
        match identity(newest) {
            (Some(u), Some(v)) if u == uid && v == version => (true, true),
            (Some(u), _) if u == uid => (kept.ours.iter().any(|ours| ours == version), false),
            _ => (false, false),
        }
    }

    /// What a reconcile's answers taught of `key`, oldest first; `delivered`: the versions
    /// the watch had delivered by the time it ended, since the reconcile began (and the one
    /// it began from); `objects`: whether the objects it returned may be kept (else only
    /// what was let go of).
    pub fn learn(&mut self, key: &Key, learnt: &[Learnt], delivered: &[&str], objects: bool) {
        for learnt in learnt {
            let known = match learnt {
                Learnt::Gone { uid } => Known::Gone { uid: uid.clone() },
                Learnt::Object(_) if !objects => continue,
                Learnt::Object(object) => {
                    let (uid, version) = identity(object);
                    let Some(version) = version else {
                        continue;
                    };
                    if delivered.contains(&version) {
                        // The cache holds it, or newer.
                        self.kept.remove(key);
                        continue;
                    }
                    let mut ours = match self.kept.remove(key) {
                        Some(Kept {
                            newest: Known::Object(was),
                            ours,
                            ..
                        }) if identity(&was).0 == uid => ours,
                        _ => Vec::new(),
                    };
                    ours.push(version.to_string());
                    self.kept.insert(
                        key.clone(),
                        Kept {
                            newest: Known::Object(Arc::new((**object).clone())),
                            ours,
                        },
                    );
                    continue;
                }
            };
            self.kept.insert(
                key.clone(),
                Kept {
                    newest: known,
                    ours: Vec::new(),
                },
            );
        }
    }

    /// The object `uid` of `key` was deleted: nothing kept of it is needed any more.
    pub fn forget(&mut self, key: &Key, uid: &str) {
        let of_it = self.kept.get(key).is_some_and(|kept| match &kept.newest {
            Known::Object(object) => identity(object).0 == Some(uid),
            Known::Gone { uid: gone } => gone == uid,
        });
        if of_it {
            self.kept.remove(key);
        }
    }

    /// Everything of `key` goes (its Browser was deleted).
    pub fn drop_key(&mut self, key: &Key) {
        self.kept.remove(key);
    }

    /// A relist is in the cache: it may have skipped versions, so nothing kept is known to
    /// be newer than the cache any more.
    pub fn reset(&mut self) {
        self.kept.clear();
    }

    /// Objects with something kept.
    pub fn len(&self) -> usize {
        self.kept.len()
    }

    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn key() -> Key {
        ("ns".into(), "s1".into())
    }

    fn object(uid: &str, version: &str) -> Learnt {
        Learnt::Object(Box::new(
            serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "s1", "namespace": "ns", "uid": uid, "resourceVersion": version}
            }))
            .unwrap(),
        ))
    }

    fn picked(f: &mut Freshness, cached: Option<Version>) -> Option<String> {
        match f.pick(&key(), cached) {
            Pick::Ours(o) => o.metadata.resource_version.clone(),
            Pick::Cache => cached.map(|(_, v)| v.to_string()),
            Pick::Gone => None,
        }
    }

    #[test]
    fn our_answer_wins_until_the_cache_shows_it() {
        let mut f = Freshness::default();
        f.learn(&key(), &[object("u", "b")], &["a"], true);
        // Version "a" is what the cache held when the write was made: older.
        assert_eq!(picked(&mut f, Some(("u", "a"))).as_deref(), Some("b"));
        // However versions would sort: "z" came before the write too, as "b" is not back yet.
        assert_eq!(picked(&mut f, Some(("u", "z"))).as_deref(), Some("b"));
        assert_eq!(picked(&mut f, Some(("u", "b"))).as_deref(), Some("b"));
        assert!(f.is_empty(), "caught up");
        assert_eq!(picked(&mut f, Some(("u", "a"))).as_deref(), Some("a"));
    }

    #[test]
    fn an_answer_the_watch_had_delivered_already_adds_nothing() {
        // A write that changed nothing returns the version the cache had; and a write whose
        // echo came back before the reconcile ended is in the cache already: later changes by
        // others may be there too, and must win.
        let mut f = Freshness::default();
        f.learn(&key(), &[object("u", "7")], &["7"], true);
        assert!(f.is_empty());
        f.learn(
            &key(),
            &[object("u", "8"), object("u", "9")],
            &["5", "9"],
            true,
        );
        assert!(f.is_empty(), "the newest is back");
        f.learn(
            &key(),
            &[object("u", "8"), object("u", "9")],
            &["5", "8"],
            true,
        );
        assert_eq!(picked(&mut f, Some(("u", "8"))).as_deref(), Some("9"));
    }

    #[test]
    fn echoes_of_our_answers_are_told_apart_from_news() {
        let mut f = Freshness::default();
        // A read returned 8, then a write 10, neither delivered yet.
        f.learn(&key(), &[object("u", "8"), object("u", "10")], &["3"], true);
        assert!(
            f.observe(&key(), ("u", "8")),
            "a version a decision was taken on"
        );
        assert!(
            !f.observe(&key(), ("other", "10")),
            "another object of the name"
        );
        // Someone else's change before the write: news, though the write carried it.
        assert!(!f.observe(&key(), ("u", "9")));
        assert_eq!(picked(&mut f, Some(("u", "9"))).as_deref(), Some("10"));
        assert!(f.observe(&key(), ("u", "10")), "our write's echo");
        assert!(f.is_empty());
        assert!(!f.observe(&key(), ("u", "11")), "later changes are news");
    }

    #[test]
    fn an_object_let_go_of_stays_gone_while_the_cache_still_shows_it() {
        let mut f = Freshness::default();
        f.learn(
            &key(),
            &[object("u", "4"), Learnt::Gone { uid: "u".into() }],
            &[],
            true,
        );
        assert_eq!(f.pick(&key(), Some(("u", "4"))), Pick::Gone);
        assert_eq!(f.pick(&key(), Some(("u", "4"))), Pick::Gone);
        // Another object of the same name is another matter.
        assert_eq!(f.pick(&key(), Some(("new", "20"))), Pick::Cache);
        assert!(f.is_empty());
    }

    #[test]
    fn our_answer_never_stands_in_for_another_object_of_the_name() {
        let mut f = Freshness::default();
        f.learn(&key(), &[object("old", "10")], &[], true);
        assert_eq!(f.pick(&key(), Some(("new", "5"))), Pick::Cache);
        // Versions of another object are not ours.
        let learnt = [object("old", "8"), object("new", "10"), object("new", "12")];
        f.learn(&key(), &learnt, &[], true);
        assert!(!f.observe(&key(), ("new", "8")));
        assert!(f.observe(&key(), ("new", "10")));
    }

    #[test]
    fn a_pod_the_cache_lacks_is_read_whatever_was_kept() {
        let mut f = Freshness::default();
        f.learn(&key(), &[object("p", "3")], &[], true);
        assert_eq!(f.pick(&key(), None), Pick::Cache);
        assert!(f.is_empty());
    }

    #[test]
    fn forgetting_needs_the_deleted_uid() {
        let mut f = Freshness::default();
        f.learn(&key(), &[Learnt::Gone { uid: "u".into() }], &[], true);
        f.forget(&key(), "other");
        assert_eq!(f.len(), 1);
        f.forget(&key(), "u");
        assert!(f.is_empty());
    }

    #[test]
    fn a_relist_resets_what_was_kept() {
        let mut f = Freshness::default();
        f.learn(&key(), &[object("u", "5")], &[], true);
        f.reset();
        assert_eq!(f.pick(&key(), Some(("u", "7"))), Pick::Cache);
    }
}
