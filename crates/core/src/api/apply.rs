//! The head of a server-side apply body (docs/behaviour.md, "Writes"): what names the object;
//! each write adds the fields it owns.

use kube_core::ApiResource;
use kube_core::DynamicObject;
use serde_json::{Map, Value, json};

use super::browser::{Browser, SpecField};
use super::keys;
use crate::names;

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

/// The metadata apply of a Browser: the operator's finalizer and its three labels, guarded by
/// the Browser's `uid`. The name label holds [`names::label_value_for`] the name, which fits
/// a label value whatever the name's length.
pub fn browser_metadata(resource: &ApiResource, browser: &DynamicObject) -> Value {
    let name = browser.metadata.name.as_deref().unwrap_or_default();
    let spec = Browser::new(browser).fields();
    let mut body = body(resource, name, browser.metadata.uid.as_deref());
    body["metadata"]["labels"] = json!({
        keys::LABEL_BROWSER: names::label_value_for(name),
        keys::LABEL_BROWSER_NAME: spec.as_written(SpecField::BrowserName),
        keys::LABEL_BROWSER_VERSION: spec.as_written(SpecField::BrowserVersion),
    });
    body["metadata"]["finalizers"] = json!([keys::FINALIZER]);
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metadata_apply_labels_a_browser_of_any_name_validly() {
        let resource = ApiResource {
            group: "selenosis.io".into(),
            version: "v1".into(),
            api_version: "selenosis.io/v1".into(),
            kind: "Browser".into(),
            plural: "browsers".into(),
        };
        let long = format!("chrome-{}", "a".repeat(200));
        let browser: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "selenosis.io/v1", "kind": "Browser",
            "metadata": {"name": long, "uid": "u1"},
            "spec": {"browserName": "chrome", "browserVersion": "139.0"},
        }))
        .unwrap();
        let body = browser_metadata(&resource, &browser);
        assert_eq!(body["metadata"]["name"], long.as_str());
        assert_eq!(body["metadata"]["uid"], "u1");
        assert_eq!(body["metadata"]["finalizers"], json!([keys::FINALIZER]));
        let labels = body["metadata"]["labels"].as_object().unwrap();
        assert_eq!(labels["selenosis.io/browser.name"], "chrome");
        assert_eq!(labels["selenosis.io/browser.version"], "139.0");
        for value in labels.values() {
            assert_eq!(names::check_label_value(value.as_str().unwrap()), Ok(()));
        }
        assert_eq!(
            labels["selenosis.io/browser"],
            names::label_value_for(&long).as_str()
        );
    }

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
