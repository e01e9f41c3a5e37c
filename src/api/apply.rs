//! The head of a server-side apply body (docs/behaviour.md, "Writes"): what names the object;
//! each write adds the fields it owns.

use kube::core::ApiResource;
use serde_json::{Map, Value, json};

/// `apiVersion`, `kind` and `metadata.name` of the object `name` of `resource`. A `uid` makes
/// the API server refuse the write when the name now belongs to another object or to none,
/// where an apply would otherwise write to the newcomer or create the object anew.
pub fn body(resource: &ApiResource, name: &str, uid: Option<&str>) -> Value {
    let mut metadata = Map::new();
    metadata.insert("name".into(), json!(name));
    if let Some(uid) = uid {
        metadata.insert("uid".into(), json!(uid));
    }
    json!({
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": metadata,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_object_and_guards_it_by_uid_when_given() {
        let pod = ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&());
        let guarded = body(&pod, "s1", Some("u1"));
        assert_eq!(
            serde_json::to_string(&guarded).unwrap(),
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"s1","uid":"u1"}}"#
        );
        let config = ApiResource {
            group: "selenosis.io".into(),
            version: "v1".into(),
            api_version: "selenosis.io/v1".into(),
            kind: "BrowserConfig".into(),
            plural: "browserconfigs".into(),
        };
        assert_eq!(
            body(&config, "chrome", None),
            json!({"apiVersion": "selenosis.io/v1", "kind": "BrowserConfig", "metadata": {"name": "chrome"}})
        );
    }
}
