//! A Browser, its BrowserConfig and the pod the operator renders for it, for the benchmarks:
//! each session's Browser and pod are these with the session's name.

use browser_controller::api::keys;
use browser_controller::lifecycle::desired;
use browser_controller::lifecycle::plan::PodCreation;
use browser_controller::pod::policy::Policy;
use kube::api::DynamicObject;
use kube::core::ApiResource;
use serde_json::{Value, json};

/// The objects of a benchmark run.
#[derive(Clone, Debug)]
pub struct Rendered {
    pub config: Value,
    pub browser: Value,
    /// The pod the operator renders for `browser` (named and owned as a template).
    pub pod: Value,
}

impl Rendered {
    /// Renders the pod of `browser` from `config` as the operator does with its default policy;
    /// the error is why it does not render.
    pub fn new(
        config: Value,
        mut browser: Value,
        browser_resource: &ApiResource,
    ) -> Result<Self, String> {
        if let Some(meta) = browser["metadata"].as_object_mut() {
            meta.remove("uid");
        }
        let decode = |v: &Value| -> Result<DynamicObject, String> {
            serde_json::from_value(v.clone()).map_err(|e| e.to_string())
        };
        let mut template = decode(&browser)?;
        template.metadata.name = Some("template".into());
        template.metadata.uid = Some("00000000-0000-0000-0000-000000000000".into());
        let pod = match desired::pod_for(
            &template,
            &[decode(&config)?],
            browser_resource,
            &Policy::default(),
            None,
            |_, _, _| None,
        ) {
            PodCreation::Render { pod, .. } => pod,
            PodCreation::Fail(failure) => return Err(failure.message),
        };
        Ok(Self {
            config,
            browser,
            pod,
        })
    }

    /// The Browser `name`, as a client creates it.
    pub fn browser(&self, name: &str) -> Result<DynamicObject, serde_json::Error> {
        let mut b = self.browser.clone();
        b["metadata"]["name"] = json!(name);
        serde_json::from_value(b)
    }

    /// The pod of the Browser `name` with `uid`, as the operator renders it.
    pub fn owned_pod(&self, name: &str, uid: &str) -> Value {
        let mut p = self.pod.clone();
        p["metadata"]["name"] = json!(name);
        p["metadata"]["labels"][keys::LABEL_BROWSER] = json!(name);
        p["metadata"]["ownerReferences"][0]["name"] = json!(name);
        p["metadata"]["ownerReferences"][0]["uid"] = json!(uid);
        p["spec"]["hostname"] = json!(name);
        p
    }

    /// The same pod owned by nothing (a real garbage collector would delete it).
    pub fn bare_pod(&self, name: &str) -> Value {
        let mut p = self.owned_pod(name, "");
        if let Some(meta) = p["metadata"].as_object_mut() {
            meta.remove("ownerReferences");
        }
        p
    }
}
