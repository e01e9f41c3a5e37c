//! Golden files of `render --prepull`: the image pre-pull DaemonSets each BrowserConfig of
//! `testdata/prepull/` gets (docs/configuration.md, "Image pre-pull"), and what must hold of
//! them whatever the golden files say: images without a shell are pulled by the copied
//! helper binary, one DaemonSet per scheduling, and every field is a DaemonSet field.

use testkit::golden;

use std::path::PathBuf;

use serde_json::{Value, json};

use browser_controller::cli::{OutputFormat, PolicyArgs, PrePullImageArgs, RenderArgs};
use browser_controller::commands::{self, RenderCommandError};
use browser_controller::prepull::render as prepull;
use golden::{stems, testdata};

const REGENERATE: &str = "UPDATE_GOLDEN=1 cargo test --test prepull_golden";

fn config_file(stem: &str) -> PathBuf {
    testdata().join("prepull").join(format!("{stem}.yaml"))
}

fn golden_file(stem: &str) -> PathBuf {
    testdata()
        .join("golden")
        .join(format!("{stem}.daemonset.yaml"))
}

fn render(configs: Vec<PathBuf>, output: OutputFormat) -> Result<String, RenderCommandError> {
    commands::render(&RenderArgs {
        configs,
        browser: None,
        prepull: true,
        prepull_images: PrePullImageArgs {
            prepull_helper_image: prepull::DEFAULT_HELPER_IMAGE.into(),
            prepull_pause_image: prepull::DEFAULT_PAUSE_IMAGE.into(),
        },
        policy: PolicyArgs::default(),
        output,
    })
}

fn render_stem(stem: &str) -> String {
    render(vec![config_file(stem)], OutputFormat::Yaml)
        .unwrap_or_else(|e| panic!("render --prepull -c {stem}.yaml: {e}"))
}

/// The DaemonSets of the YAML output.
fn daemon_sets(yaml: &str) -> Vec<Value> {
    let documents: Vec<Value> = serde_saphyr::from_str_multiple(yaml).unwrap();
    documents.into_iter().filter(|d| !d.is_null()).collect()
}

/// Compares `actual` with the golden file of `stem`, or rewrites it under UPDATE_GOLDEN=1.
fn check_golden(stem: &str, actual: &str) {
    golden::check(&golden_file(stem), actual, REGENERATE);
}

#[test]
fn golden_one_scheduling_with_a_distroless_sidecar() {
    check_golden("chrome", &render_stem("chrome"));
}

#[test]
fn golden_one_daemon_set_per_scheduling() {
    check_golden("groups", &render_stem("groups"));
}

#[test]
fn every_prepull_config_has_a_golden_file_and_every_golden_file_a_config() {
    let configs = stems(&testdata().join("prepull"), ".yaml");
    let goldens = stems(&testdata().join("golden"), ".daemonset.yaml");
    assert_eq!(configs, goldens);
}

/// The init containers of a DaemonSet.
fn init_containers(ds: &Value) -> &Vec<Value> {
    ds["spec"]["template"]["spec"]["initContainers"]
        .as_array()
        .unwrap()
}

#[test]
fn every_image_runs_only_the_copied_helper_so_images_without_a_shell_are_pulled() {
    let all = daemon_sets(&render_stem("chrome"));
    assert_eq!(all.len(), 1);
    let init = init_containers(&all[0]);
    assert_eq!(init[0]["image"], prepull::DEFAULT_HELPER_IMAGE);
    let pulled: Vec<&str> = init[1..]
        .iter()
        .map(|c| c["image"].as_str().unwrap())
        .collect();
    assert_eq!(
        pulled,
        [
            "selenium/standalone-chrome:138.0",
            "alcounit/seleniferous:v2.0.8",
            "cr.fluentbit.io/fluent/fluent-bit:3.1.9",
            "selenium/standalone-chrome:139.0",
        ]
    );
    let copied = init[0]["command"].as_array().unwrap().last().unwrap();
    for pull in &init[1..] {
        assert_eq!(pull["command"], json!([copied, "true"]), "{pull}");
        assert!(pull.get("args").is_none(), "{pull}");
        assert_eq!(
            pull["volumeMounts"][0]["name"],
            init[0]["volumeMounts"][0]["name"]
        );
    }
    let spec = &all[0]["spec"]["template"]["spec"];
    assert_eq!(spec["containers"][0]["image"], prepull::DEFAULT_PAUSE_IMAGE);
    assert_eq!(spec["nodeSelector"]["pool"], "browsers");
    assert_eq!(spec["imagePullSecrets"], json!([{"name": "registry"}]));
}

#[test]
fn entries_with_other_scheduling_get_their_own_daemon_set() {
    let output = render_stem("groups");
    assert!(
        output.starts_with("# not pulled, invalid: firefox 115.0: image is missing\n"),
        "{output}"
    );
    let all = daemon_sets(&output);
    assert_eq!(all.len(), 2);
    let pulled = |ds: &Value| -> Vec<String> {
        init_containers(ds)[1..]
            .iter()
            .map(|c| c["image"].as_str().unwrap().to_string())
            .collect()
    };
    let (chrome, firefox): (Vec<&Value>, Vec<&Value>) = all
        .iter()
        .partition(|ds| pulled(ds).iter().any(|i| i.contains("chrome")));
    assert_eq!(
        pulled(chrome[0]),
        [
            "selenium/standalone-chrome:139.0",
            "alcounit/seleniferous:v2.0.8"
        ],
        "120.0 opts out"
    );
    assert_eq!(
        pulled(firefox[0]),
        [
            "selenium/standalone-firefox:142.0",
            "alcounit/seleniferous:v2.0.8",
            "registry.example.com/firefox-profile:1"
        ]
    );
    let spec = &firefox[0]["spec"]["template"]["spec"];
    assert_eq!(spec["runtimeClassName"], "nvidia");
    assert_eq!(spec["nodeSelector"]["pool"], "gpu");
    assert!(spec["affinity"]["nodeAffinity"].is_object());
    assert!(spec["affinity"].get("podAntiAffinity").is_none());
    let chrome_spec = &chrome[0]["spec"]["template"]["spec"];
    assert!(chrome_spec.get("runtimeClassName").is_none());
    assert_eq!(
        chrome_spec["nodeSelector"],
        json!({"kubernetes.io/os": "linux"})
    );
    assert_ne!(
        chrome[0]["metadata"]["name"],
        firefox[0]["metadata"]["name"]
    );
}

#[test]
fn the_daemon_sets_are_daemon_sets_field_for_field() {
    for stem in stems(&testdata().join("prepull"), ".yaml") {
        for ds in daemon_sets(&render_stem(&stem)) {
            let typed: k8s_openapi::api::apps::v1::DaemonSet =
                serde_json::from_value(ds.clone()).unwrap();
            let mut back = serde_json::to_value(typed).unwrap();
            // Offline, the config has no UID: the typed form fills in an empty one.
            if ds["metadata"]["ownerReferences"][0].get("uid").is_none() {
                back["metadata"]["ownerReferences"][0]
                    .as_object_mut()
                    .unwrap()
                    .remove("uid");
            }
            assert_eq!(back, ds, "{stem}: a field is not a DaemonSet field");
        }
    }
}

#[test]
fn json_output_is_a_list_of_the_same_daemon_sets() {
    for stem in stems(&testdata().join("prepull"), ".yaml") {
        let json: Value =
            serde_json::from_str(&render(vec![config_file(&stem)], OutputFormat::Json).unwrap())
                .unwrap();
        assert_eq!(json["kind"], "List");
        assert_eq!(
            json["items"],
            json!(daemon_sets(&render_stem(&stem))),
            "{stem}"
        );
    }
}

#[test]
fn configs_that_ask_for_nothing_are_a_clear_error() {
    let configs: Vec<PathBuf> = std::fs::read_dir(testdata().join("configs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let err = render(configs, OutputFormat::Yaml).unwrap_err().to_string();
    assert!(
        err.starts_with("no entry of the given BrowserConfigs asks for pre-pull"),
        "{err}"
    );
}
