//! A ResourceQuota of pods for the operator run, its use kept counted as the quota controller
//! would: no controller-manager runs beside the benchmark's API server.

use std::time::Duration;

use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use serde_json::json;
use tokio::task::JoinHandle;

use crate::{BenchError, api_error};

/// How often the benchmark recounts the quota's use.
const RECOUNT: Duration = Duration::from_millis(250);

/// A ResourceQuota of pods in the benchmark's namespace.
pub struct Quota {
    api: Api<DynamicObject>,
    recount: JoinHandle<()>,
}

const NAME: &str = "bench";

impl Quota {
    pub async fn start(client: Client, ns: &str, pods: usize) -> Result<Self, BenchError> {
        let resource = ApiResource::erase::<k8s_openapi::api::core::v1::ResourceQuota>(&());
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
        let quota: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": {"name": NAME, "namespace": ns},
            "spec": {"hard": {"pods": pods.to_string()}},
        }))?;
        api.create(&PostParams::default(), &quota)
            .await
            .map_err(api_error("create the ResourceQuota"))?;
        let pods_api: Api<DynamicObject> = Api::namespaced_with(
            client,
            ns,
            &ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&()),
        );
        recount(&api, &pods_api, pods).await?;
        // The quota admission reads quotas from an informer: it sees the status first (a
        // quota without one refuses every pod).
        tokio::time::sleep(Duration::from_secs(1)).await;
        let recount = {
            let api = api.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(RECOUNT).await;
                    // A failed recount is tried again at the next tick.
                    let _ = recount(&api, &pods_api, pods).await;
                }
            })
        };
        Ok(Self { api, recount })
    }

    pub async fn stop(self) -> Result<(), BenchError> {
        self.recount.abort();
        self.api
            .delete(NAME, &DeleteParams::default())
            .await
            .map_err(api_error("delete the ResourceQuota"))?;
        Ok(())
    }
}

impl Drop for Quota {
    fn drop(&mut self) {
        self.recount.abort();
    }
}

/// Writes the quota's use as the quota controller does: the namespace's pods neither
/// terminating nor ended.
async fn recount(
    quotas: &Api<DynamicObject>,
    pods: &Api<DynamicObject>,
    hard: usize,
) -> Result<(), BenchError> {
    let list = pods
        .list(&ListParams::default())
        .await
        .map_err(api_error("list pods for the quota"))?;
    let used = list
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            !matches!(
                p.data["status"]["phase"].as_str(),
                Some("Succeeded" | "Failed")
            )
        })
        .count();
    let status =
        json!({"status": {"hard": {"pods": hard.to_string()}, "used": {"pods": used.to_string()}}});
    quotas
        .patch_status(NAME, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .map_err(api_error("write the quota's use"))?;
    Ok(())
}
