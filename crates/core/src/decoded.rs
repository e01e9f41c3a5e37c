//! Objects off the wire that the client cannot decode, kept apart so that one bad object never
//! stops a watch (docs/operations.md, "Objects the operator cannot read").
//!
//! serde_json refuses JSON nested deeper than 128 levels, and a BrowserConfig may hold that
//! in a field whose schema is left open (`affinity`, say). kube-runtime decodes a whole list
//! at once: one such object would fail every list of its kind, and the watch would retry
//! forever while no Browser of any namespace is served. Here each object is first taken as
//! raw text (which has no depth limit), then decoded; what fails is reduced to what
//! identifies it and the error, to be reported and skipped.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube_core::{DynamicObject, DynamicResourceScope, Resource};
use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

/// An object as it came, or what identifies one that could not be decoded.
#[derive(Debug, Clone)]
pub enum Decoded<K> {
    Object(K),
    /// Boxed: most objects decode, and the identity is the larger part.
    Undecodable(Box<Undecodable>),
}

/// What identifies an object that could not be decoded, and why.
#[derive(Debug, Clone)]
pub struct Undecodable {
    /// Name, namespace, uid, resourceVersion, generation and creation time only.
    pub metadata: ObjectMeta,
    pub error: String,
}

/// The fields of `metadata` that identify an object; everything else is skipped unread (a
/// deep object's `managedFields` are as deep as the object).
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct Identity {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    generation: Option<i64>,
    creation_timestamp: Option<Time>,
}

#[derive(Deserialize)]
struct Head {
    #[serde(default)]
    metadata: Identity,
}

impl<'de, K: DeserializeOwned> Deserialize<'de> for Decoded<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(deserializer)?;
        match serde_json::from_str::<K>(raw.get()) {
            Ok(object) => Ok(Decoded::Object(object)),
            Err(error) => {
                let head: Head = serde_json::from_str(raw.get()).map_err(D::Error::custom)?;
                let id = head.metadata;
                Ok(Decoded::Undecodable(Box::new(Undecodable {
                    metadata: ObjectMeta {
                        name: id.name,
                        namespace: id.namespace,
                        uid: id.uid,
                        resource_version: id.resource_version,
                        generation: id.generation,
                        creation_timestamp: id.creation_timestamp,
                        ..ObjectMeta::default()
                    },
                    error: error.to_string(),
                })))
            }
        }
    }
}

impl<K> Resource for Decoded<K>
where
    K: Resource<Scope = DynamicResourceScope>,
{
    type DynamicType = K::DynamicType;
    type Scope = DynamicResourceScope;

    fn kind(dt: &K::DynamicType) -> Cow<'_, str> {
        K::kind(dt)
    }

    fn group(dt: &K::DynamicType) -> Cow<'_, str> {
        K::group(dt)
    }

    fn version(dt: &K::DynamicType) -> Cow<'_, str> {
        K::version(dt)
    }

    fn api_version(dt: &K::DynamicType) -> Cow<'_, str> {
        K::api_version(dt)
    }

    fn plural(dt: &K::DynamicType) -> Cow<'_, str> {
        K::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        match self {
            Decoded::Object(object) => object.meta(),
            Decoded::Undecodable(undecodable) => &undecodable.metadata,
        }
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        match self {
            Decoded::Object(object) => object.meta_mut(),
            Decoded::Undecodable(undecodable) => &mut undecodable.metadata,
        }
    }
}

/// A cached kind that can stand for an object known only by what identifies it: what a cache
/// removes when the object became undecodable.
pub trait FromIdentity {
    fn from_identity(metadata: ObjectMeta) -> Self;
}

impl FromIdentity for crate::cached::CachedBrowser {
    fn from_identity(metadata: ObjectMeta) -> Self {
        Self::identity_only(metadata)
    }
}

impl FromIdentity for DynamicObject {
    fn from_identity(metadata: ObjectMeta) -> Self {
        DynamicObject {
            types: None,
            metadata,
            data: serde_json::Value::Object(serde_json::Map::new()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// JSON text of an object whose `spec.affinity` nests `depth` objects.
    fn deep(name: &str, depth: usize) -> String {
        let mut nested = "1".to_string();
        for _ in 0..depth {
            nested = format!("{{\"a\":{nested}}}");
        }
        format!(
            r#"{{"apiVersion":"selenosis.io/v1","kind":"BrowserConfig","metadata":{{"name":"{name}","namespace":"ns","uid":"u-{name}","resourceVersion":"7","generation":3,"managedFields":[{{"fieldsV1":{nested}}}]}},"spec":{{"template":{{"affinity":{nested}}},"browsers":{{}}}}}}"#
        )
    }

    #[test]
    fn a_list_with_one_object_too_deep_to_decode_keeps_the_others() {
        // The client alone cannot read such a list.
        let list = format!(
            r#"{{"apiVersion":"v1","kind":"List","metadata":{{"resourceVersion":"9"}},"items":[{},{}]}}"#,
            deep("good", 3),
            deep("bad", 200)
        );
        let plain = serde_json::from_str::<kube_core::ObjectList<DynamicObject>>(&list);
        assert!(
            plain.unwrap_err().to_string().contains("recursion limit"),
            "the failure this module exists for"
        );
        let decoded: kube_core::ObjectList<Decoded<DynamicObject>> =
            serde_json::from_str(&list).unwrap();
        let [good, bad] = decoded.items.as_slice() else {
            panic!("two items");
        };
        assert!(matches!(good, Decoded::Object(o) if o.metadata.name.as_deref() == Some("good")));
        let Decoded::Undecodable(bad) = bad else {
            panic!("bad is undecodable");
        };
        assert_eq!(bad.metadata.name.as_deref(), Some("bad"));
        assert_eq!(bad.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(bad.metadata.uid.as_deref(), Some("u-bad"));
        assert_eq!(bad.metadata.generation, Some(3));
        assert!(bad.error.contains("recursion limit"), "{}", bad.error);
    }

    #[test]
    fn watch_events_of_undecodable_objects_decode_too() {
        let line = format!(r#"{{"type":"MODIFIED","object":{}}}"#, deep("bad", 300));
        let event: kube_core::WatchEvent<Decoded<DynamicObject>> =
            serde_json::from_str(&line).unwrap();
        assert!(matches!(
            event,
            kube_core::WatchEvent::Modified(Decoded::Undecodable(_))
        ));
    }
}
