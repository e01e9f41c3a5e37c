//! The `ApiResource`s of the kinds the suites create: Browser and BrowserConfig in either
//! group layout, and Pod.

use browser_controller::api::crd::Layout;
use browser_controller::api::keys;
use browser_controller::api::kinds::Kinds;
use kube::core::ApiResource;

fn custom(group: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: keys::VERSION.into(),
        api_version: format!("{group}/{}", keys::VERSION),
        kind: kind.into(),
        plural: plural.into(),
    }
}

pub fn browser_resource(layout: Layout) -> ApiResource {
    custom(layout.browser_group(), keys::BROWSER_KIND, "browsers")
}

pub fn config_resource(layout: Layout) -> ApiResource {
    custom(
        layout.browserconfig_group(),
        keys::BROWSERCONFIG_KIND,
        "browserconfigs",
    )
}

pub fn pod_resource() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&())
}

/// The kinds as the operator resolves them where `layout` is installed.
pub fn kinds(layout: Layout) -> Kinds {
    Kinds {
        browser: browser_resource(layout),
        browserconfig: config_resource(layout),
        pod: pod_resource(),
    }
}
