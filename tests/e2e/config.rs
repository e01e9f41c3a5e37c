//! BrowserConfigs and the cluster's Pod schema: a config the schema rejects, and Pod fields
//! the cluster lacks.

use std::sync::Arc;

use serde_json::json;

use crate::{Ctx, Kind, resource};

pub(crate) async fn config_rejected_by_the_pod_schema_fails_browsers_with_invalid_config(
    cx: Arc<Ctx>,
) {
    cx.start_operator(&[]);
    cx.create_config(
        "bad",
        json!({"browsers": {"chrome": {"139.0": {
            "image": cx.be.image,
            "sidecars": [{"name": "Not_A_Dns_Label", "image": cx.be.image}]
        }}}}),
    )
    .await;
    // The dry run's answer, as the cluster's Pod schema gave it.
    let valid = cx.until_config("bad", "Valid", "False").await;
    assert!(
        valid["message"]
            .as_str()
            .is_some_and(|m| m.contains("Not_A_Dns_Label")),
        "{valid}"
    );
    cx.create_browser("cfg", json!({})).await;
    let message = cx.fails_without_a_pod("cfg", "InvalidConfig").await;
    assert!(message.contains("Not_A_Dns_Label"), "{message}");
}

/// A native sidecar (`restartPolicy` on an init container) is in the Pod schema from 1.28.
/// A cluster without it gets the pod without the field and a Warning naming it; a cluster
/// with it keeps it and hears nothing.
pub(crate) async fn pod_fields_the_cluster_lacks_are_removed_with_a_warning(cx: Arc<Ctx>) {
    const FIELD: &str = "spec.initContainers[seleniferous].restartPolicy";
    let minor = cx
        .be
        .minor()
        .await
        .unwrap_or_else(|| panic!("no minor version in /version of {}", cx.be.version));
    let lacks = minor < 28;
    cx.start_operator(&[]);
    cx.create_config(
        "sidecar",
        json!({
            "template": {
                "initContainers": [{"name": "seleniferous", "image": cx.be.image,
                    "restartPolicy": "Always", "ports": [{"containerPort": 4445}]}],
                "ports": [{"containerPort": 4444}],
            },
            "browsers": {"chrome": {"139.0": {"image": cx.be.image}}}
        }),
    )
    .await;
    cx.create_browser("s1", json!({})).await;
    let snap = cx.until_running("s1").await;
    let pod = snap.pod("s1").expect("pod").clone();
    let sidecar = &pod["spec"]["initContainers"][0];
    let events = cx.api(&resource("events.k8s.io", "Event", "events"));
    let notes: Vec<String> = Ctx::list(&events)
        .await
        .iter()
        .filter(|e| e["regarding"]["name"] == "s1" && e["reason"] == "PodFieldsRemoved")
        .filter_map(|e| e["note"].as_str().map(String::from))
        .collect();
    if lacks {
        assert!(sidecar.get("restartPolicy").is_none(), "{pod:#}");
        assert!(
            notes.iter().any(|n| n.contains(FIELD)),
            "a Warning names {FIELD}: {notes:?}"
        );
        let condition = cx.until_config("sidecar", "PodFieldsRemoved", "True").await;
        assert!(
            condition["message"]
                .as_str()
                .is_some_and(|m| m.contains(FIELD)),
            "{condition}"
        );
    } else {
        assert!(notes.is_empty(), "nothing removed on 1.{minor}: {notes:?}");
        if cx.be.kind == Kind::Double {
            // A real server may still drop the field where its feature gate is off (1.28).
            assert_eq!(sidecar["restartPolicy"], "Always", "{pod:#}");
        }
    }
    cx.delete_browser("s1").await;
    cx.until_gone("s1").await;
}
