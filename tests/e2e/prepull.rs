//! Image pre-pull: the DaemonSets of a BrowserConfig and the progress it reports.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{DeleteParams, Patch, PatchParams};
use kube::core::ApiResource;
use serde_json::{Value, json};

use browser_controller::api::keys;

use crate::support::controlplane;
use crate::support::kinds::config_resource;
use crate::{Ctx, Kind, WAIT, first_row, header, poll, repo, resource};

/// `rbac/prepull/namespaced.yaml` as a user installs it for the watched namespace `ns`.
fn prepull_rbac(ns: &str) -> Vec<Value> {
    let mut docs =
        browser_controller::manifest::read_file(&repo("rbac/prepull/namespaced.yaml")).unwrap();
    for doc in &mut docs {
        assert_eq!(doc["metadata"]["namespace"], "selenosis", "{doc}");
        doc["metadata"]["namespace"] = json!(ns);
    }
    docs
}

/// The operator runs as its ServiceAccount with rbac/: `rbac/prepull/` adds what
/// `--enable-prepull` needs (an existing cluster's identity is its own).
pub(crate) async fn grant_prepull(cx: &Ctx) {
    if cx.be.kind != Kind::Cluster {
        for doc in prepull_rbac(&cx.ns) {
            controlplane::apply_object(&cx.be.client, &doc)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        }
    }
}

fn daemon_set_resource() -> ApiResource {
    resource("apps", "DaemonSet", "daemonsets")
}

impl Ctx {
    /// Waits until the namespace's DaemonSets satisfy `check`; returns them by name.
    pub(crate) async fn until_daemon_sets(
        &self,
        what: &str,
        check: impl Fn(&BTreeMap<String, Value>) -> bool,
    ) -> BTreeMap<String, Value> {
        let api = self.api(&daemon_set_resource());
        poll(WAIT, Duration::from_millis(50), || async {
            let all: BTreeMap<String, Value> = Self::list(&api)
                .await
                .into_iter()
                .map(|d| (d["metadata"]["name"].as_str().unwrap_or("").to_string(), d))
                .collect();
            if check(&all) {
                Ok(all)
            } else {
                Err(format!("{what}; DaemonSets: {all:#?}"))
            }
        })
        .await
    }

    /// Writes the status a DaemonSet controller would: `ready` of `desired` nodes run the
    /// current spec and are ready.
    async fn daemon_set_status(&self, ds: &Value, desired: i64, ready: i64) {
        let name = ds["metadata"]["name"].as_str().unwrap();
        let status = json!({"status": {
            "observedGeneration": ds["metadata"]["generation"],
            "desiredNumberScheduled": desired,
            "currentNumberScheduled": desired,
            "updatedNumberScheduled": desired,
            "numberMisscheduled": 0,
            "numberReady": ready,
            "numberAvailable": ready,
        }});
        self.api(&daemon_set_resource())
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap_or_else(|e| panic!("status of DaemonSet {name}: {e}"));
    }

    pub(crate) async fn patch_config(&self, name: &str, patch: Value) {
        self.api(&config_resource(self.layout))
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_or_else(|e| panic!("BrowserConfig {name} patched: {e}"));
    }
}

/// The images a pre-pull DaemonSet pulls, and its helper's copy command.
fn pulled(ds: &Value) -> Vec<&str> {
    ds["spec"]["template"]["spec"]["initContainers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["name"].as_str().is_some_and(|n| n.starts_with("pull-")))
        .map(|c| c["image"].as_str().unwrap())
        .collect()
}

fn condition<'a>(config: &'a Value, kind: &str) -> Option<&'a Value> {
    config["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

/// With --enable-prepull: a config asking for pre-pull gets a DaemonSet per scheduling with
/// its images, owned by it; the status follows the DaemonSet status (written here as the
/// DaemonSet controller would: neither backend runs one); a change updates and drops
/// DaemonSets; opting out removes them; a deleted config leaves none.
pub(crate) async fn prepull_daemon_sets_follow_the_config_and_report_progress(cx: Arc<Ctx>) {
    grant_prepull(&cx).await;
    cx.start_operator(&[
        "--enable-prepull",
        "--prepull-helper-image=mirror.example/busybox:1.36.1-musl",
    ]);
    let sidecar = "alcounit/seleniferous:v2.0.8";
    cx.create_config(
        "chrome",
        json!({
            "template": {
                "prePull": true,
                "sidecars": [{"name": "seleniferous", "image": sidecar}],
                "nodeSelector": {"pool": "browsers"},
                "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "browsers", "effect": "NoSchedule"}],
                "imagePullSecrets": [{"name": "registry"}],
            },
            "browsers": {"chrome": {
                "139.0": {"image": "selenium/standalone-chrome:139.0"},
                "140.0": {"image": "selenium/standalone-chrome:140.0", "nodeSelector": {"pool": "gpu"}},
                "120.0": {"image": "selenium/standalone-chrome:120.0", "prePull": false},
            }},
        }),
    )
    .await;
    let config = cx
        .api(&config_resource(cx.layout))
        .get("chrome")
        .await
        .unwrap();
    let uid = config.metadata.uid.clone().unwrap();

    // One DaemonSet per scheduling, owned by the config, pulling each entry's images.
    let all = cx
        .until_daemon_sets("two DaemonSets", |d| d.len() == 2)
        .await;
    let by_pool = |pool: &str| -> Value {
        all.values()
            .find(|d| d["spec"]["template"]["spec"]["nodeSelector"]["pool"] == pool)
            .unwrap_or_else(|| panic!("no DaemonSet for pool {pool}: {all:#?}"))
            .clone()
    };
    let (browsers, gpu) = (by_pool("browsers"), by_pool("gpu"));
    assert_eq!(
        pulled(&browsers),
        ["selenium/standalone-chrome:139.0", sidecar]
    );
    assert_eq!(pulled(&gpu), ["selenium/standalone-chrome:140.0", sidecar]);
    for ds in [&browsers, &gpu] {
        let owner = &ds["metadata"]["ownerReferences"][0];
        assert_eq!(owner["kind"], "BrowserConfig", "{ds:#}");
        assert_eq!(owner["uid"], uid.as_str(), "{ds:#}");
        let spec = &ds["spec"]["template"]["spec"];
        assert_eq!(spec["tolerations"][0]["key"], "dedicated", "{ds:#}");
        assert_eq!(spec["imagePullSecrets"], json!([{"name": "registry"}]));
        assert_eq!(spec["automountServiceAccountToken"], false);
        let init = spec["initContainers"].as_array().unwrap();
        assert_eq!(init[0]["image"], "mirror.example/busybox:1.36.1-musl");
        assert!(
            init[1..]
                .iter()
                .all(|c| c["command"] == json!(["/.prepull/busybox", "true"])),
            "{ds:#}"
        );
    }
    let name_of = |ds: &Value| ds["metadata"]["name"].as_str().unwrap().to_string();
    let (browsers_name, gpu_name) = (name_of(&browsers), name_of(&gpu));

    // Nothing ran the DaemonSets yet.
    let pulling = cx.until_config("chrome", "PrePulled", "False").await;
    assert_eq!(pulling["reason"], "Pulling", "{pulling}");
    cx.until_events("chrome", &["PrePullCreated"]).await;

    // The DaemonSet controller's figures reach the config's status.
    cx.daemon_set_status(&browsers, 3, 3).await;
    cx.daemon_set_status(&gpu, 2, 1).await;
    let config = cx
        .until_config_is("chrome", "4 of 5 nodes ready", |c| {
            c["status"]["prePull"]["nodesReady"] == 4 && c["status"]["prePull"]["nodesDesired"] == 5
        })
        .await;
    let rows = config["status"]["prePull"]["daemonSets"]
        .as_array()
        .unwrap();
    assert!(
        rows.contains(&json!({"name": gpu_name, "images": 2, "nodesReady": 1, "nodesDesired": 2})),
        "{config:#}"
    );
    assert_eq!(config["status"]["prePull"]["images"], 3);
    assert_eq!(condition(&config, "PrePulled").unwrap()["status"], "False");
    cx.daemon_set_status(&gpu, 2, 2).await;
    let pulled_all = cx.until_config("chrome", "PrePulled", "True").await;
    assert_eq!(pulled_all["reason"], "Pulled", "{pulled_all}");
    let configs = format!("browserconfigs.{}", keys::DEFAULT_GROUP);
    if let Some(get) = cx.kubectl(&["get", &configs, "chrome"]).await {
        assert_eq!(
            header(&get),
            ["NAME", "VALID", "READY", "ENTRIES", "PREPULLED", "AGE"],
            "{get}"
        );
        let row = first_row(&get);
        assert_eq!(row[..5], ["chrome", "True", "True", "3", "True"], "{get}");
    }

    // A new version joins its scheduling's DaemonSet; a removed one takes its DaemonSet along.
    cx.patch_config(
        "chrome",
        json!({"spec": {"browsers": {"chrome": {
            "140.0": null,
            "141.0": {"image": "selenium/standalone-chrome:141.0"},
        }}}}),
    )
    .await;
    let all = cx
        .until_daemon_sets("the gpu DaemonSet gone, 141.0 pulled", |d| {
            d.len() == 1
                && d.get(&browsers_name)
                    .is_some_and(|ds| pulled(ds).contains(&"selenium/standalone-chrome:141.0"))
        })
        .await;
    let updated = &all[&browsers_name];
    assert_eq!(
        pulled(updated),
        [
            "selenium/standalone-chrome:139.0",
            sidecar,
            "selenium/standalone-chrome:141.0"
        ]
    );
    assert!(!all.contains_key(&gpu_name));
    cx.until_events("chrome", &["PrePullDeleted", "PrePullUpdated"])
        .await;
    // The DaemonSet controller has not seen the new spec: not pulled yet.
    let config = cx
        .until_config_is("chrome", "one DaemonSet waiting", |c| {
            c["status"]["prePull"]["daemonSets"]
                .as_array()
                .is_some_and(|d| d.len() == 1)
                && condition(c, "PrePulled").is_some_and(|p| p["status"] == "False")
        })
        .await;
    assert!(
        condition(&config, "PrePulled").unwrap()["message"]
            .as_str()
            .unwrap()
            .contains("waiting for the DaemonSet controller"),
        "{config:#}"
    );

    // Opting out removes the DaemonSet and the status part.
    cx.patch_config("chrome", json!({"spec": {"template": {"prePull": false}}}))
        .await;
    cx.until_daemon_sets("no DaemonSet", BTreeMap::is_empty)
        .await;
    cx.until_config_is("chrome", "no pre-pull status", |c| {
        c["status"].get("prePull").is_none() && condition(c, "PrePulled").is_none()
    })
    .await;

    // Opted in again, then the config deleted: the operator deletes its DaemonSet itself.
    cx.patch_config("chrome", json!({"spec": {"template": {"prePull": true}}}))
        .await;
    cx.until_daemon_sets("the DaemonSet back", |d| d.len() == 1)
        .await;
    cx.api(&config_resource(cx.layout))
        .delete("chrome", &DeleteParams::default())
        .await
        .unwrap();
    cx.until_daemon_sets("nothing left", BTreeMap::is_empty)
        .await;
    let log = std::fs::read_to_string(&cx.log).unwrap_or_default();
    assert!(!log.contains("forbidden"), "{log}");
}
