//! What users see through kubectl: printer columns and `kubectl describe` Events.

use std::sync::Arc;

use serde_json::json;

use browser_controller::api::keys;

use crate::support::kinds::config_resource;
use crate::{Ctx, first_row, header};

pub(crate) async fn kubectl_get_shows_printer_columns_and_describe_shows_events(cx: Arc<Ctx>) {
    cx.start_operator(&[]);
    cx.chrome_config().await;
    cx.create_browser("k1", json!({})).await;
    let snap = cx.until_running("k1").await;
    let ip = snap.browser("k1").unwrap()["status"]["podIP"]
        .as_str()
        .unwrap()
        .to_string();
    let resource = format!("browsers.{}", keys::DEFAULT_GROUP);
    let Some(get) = cx.kubectl(&["get", &resource]).await else {
        println!("    kubectl not installed: kubectl checks skipped");
        cx.delete_browser("k1").await;
        cx.until_gone("k1").await;
        return;
    };
    assert_eq!(
        header(&get),
        [
            "NAME",
            "BROWSER",
            "VERSION",
            "PHASE",
            "PODIP",
            "STARTTIME",
            "AGE"
        ],
        "{get}"
    );
    let row = first_row(&get);
    assert_eq!(
        row[..5],
        ["k1", "chrome", "139.0", "Running", ip.as_str()],
        "{get}"
    );
    let wide = cx.kubectl(&["get", &resource, "-o", "wide"]).await.unwrap();
    assert_eq!(
        header(&wide),
        [
            "NAME",
            "BROWSER",
            "VERSION",
            "PHASE",
            "PODIP",
            "REASON",
            "STARTTIME",
            "AGE"
        ],
        "{wide}"
    );
    // No reason yet: the cell is empty (null in the Table).
    let row = first_row(&wide);
    assert_eq!(
        row[..5],
        ["k1", "chrome", "139.0", "Running", ip.as_str()],
        "{wide}"
    );
    assert_eq!(row.len(), 7, "{wide}");

    // BrowserConfigs: whether valid and in use, how many entries, whether pre-pulled (this
    // config does not ask: an empty cell); the spec hash with -o wide.
    cx.until_config("chrome", "Ready", "True").await;
    let configs = format!("browserconfigs.{}", keys::DEFAULT_GROUP);
    let get = cx.kubectl(&["get", &configs]).await.unwrap();
    assert_eq!(
        header(&get),
        ["NAME", "VALID", "READY", "ENTRIES", "PREPULLED", "AGE"],
        "{get}"
    );
    let row = first_row(&get);
    assert_eq!(row[..4], ["chrome", "True", "True", "1"], "{get}");
    assert_eq!(row.len(), 5, "no PrePulled value, then the age: {get}");
    let wide = cx.kubectl(&["get", &configs, "-o", "wide"]).await.unwrap();
    assert_eq!(
        header(&wide),
        [
            "NAME",
            "VALID",
            "READY",
            "ENTRIES",
            "PREPULLED",
            "SPECHASH",
            "AGE"
        ],
        "{wide}"
    );
    let row = first_row(&wide);
    let config = cx
        .api(&config_resource(cx.layout))
        .get("chrome")
        .await
        .unwrap();
    // The empty PrePulled cell takes no word.
    assert_eq!(
        Some(row[4]),
        config.data["status"]["version"].as_str(),
        "{wide}"
    );

    cx.until_events("k1", &["PodCreated", "Running"]).await;
    let describe = cx.kubectl(&["describe", &resource, "k1"]).await.unwrap();
    let events = describe
        .split_once("\nEvents:")
        .map(|(_, e)| e)
        .unwrap_or_else(|| panic!("no Events section:\n{describe}"));
    assert!(
        events.contains("Type") && events.contains("Reason") && events.contains("From"),
        "{describe}"
    );
    for reason in ["PodCreated", "Running"] {
        assert!(
            events.lines().any(|l| l.contains("Normal")
                && l.contains(reason)
                && l.contains("browser-controller")),
            "{reason} missing:\n{describe}"
        );
    }
    cx.delete_browser("k1").await;
    cx.until_gone("k1").await;
}
