//! Golden files of the `render` subcommand: the pod each testdata Browser gets from its
//! BrowserConfig (docs/behaviour.md, "The Pod of a Browser"; docs/configuration.md), and
//! compatibility with the BrowserConfigs of the current Selenosis stack.

use testkit as support;
use testkit::golden;

use std::path::{Path, PathBuf};

use kube::api::DynamicObject;
use kube::core::ApiResource;
use serde_json::{Value, json};

use browser_controller::cli::{OutputFormat, PolicyArgs, PrePullImageArgs, RenderArgs};
use browser_controller::commands::{self, RenderCommandError};
use browser_controller::config::{lookup, validate};
use browser_controller::lifecycle::desired;
use browser_controller::lifecycle::plan::PodCreation;
use browser_controller::manifest;
use browser_controller::pod::policy::Policy;
use browser_controller::pod::schema::PodSchema;
use browser_controller::prepull::render as prepull;
use golden::{first_difference, stems, testdata};

const REGENERATE: &str = "UPDATE_GOLDEN=1 cargo test --test render_golden";

/// Each testdata Browser (file stem) with the config file (stem) that resolves it.
const CASES: [(&str, &str); 6] = [
    ("chrome", "single-sidecar"),
    ("long-name-foreign-metadata", "single-sidecar"),
    ("chrome-vnc", "vnc-stack"),
    ("playwright", "playwright"),
    ("firefox-wildcard", "wildcard"),
    ("firefox-pinned", "wildcard"),
];

/// Testdata Browsers that must not render, with the config, the reason they fail with and
/// the end of the message.
const FAILING: [(&str, &str, &str, &str); 4] = [
    (
        "invalid-options",
        "single-sidecar",
        "InvalidSelenosisOptions",
        "invalid type: integer `1920`, expected a string at line 1 column 52",
    ),
    (
        "options-loader-variable",
        "single-sidecar",
        "InvalidSelenosisOptions",
        "container \"browser\": env \"LD_PRELOAD\" changes how programs are loaded and cannot be set by options",
    ),
    (
        "options-value-from",
        "single-sidecar",
        "InvalidSelenosisOptions",
        "container \"seleniferous\": env \"POD_IP\" comes from valueFrom in the BrowserConfig and cannot be replaced by options",
    ),
    (
        "chromium-privileged",
        "privileged-sidecar",
        "InvalidConfig",
        "is above the operator's pod security level baseline: spec.volumes[0] (docker): hostPath volumes are not allowed; spec.containers[1] (docker).securityContext.privileged is true; spec.containers[1] (docker).securityContext.capabilities.add: SYS_ADMIN is not in the default set",
    ),
];

fn browser_file(stem: &str) -> PathBuf {
    testdata().join("browsers").join(format!("{stem}.yaml"))
}

fn config_file(stem: &str) -> PathBuf {
    testdata().join("configs").join(format!("{stem}.yaml"))
}

fn golden_file(stem: &str) -> PathBuf {
    testdata().join("golden").join(format!("{stem}.pod.yaml"))
}

fn render(
    configs: Vec<PathBuf>,
    browser: PathBuf,
    output: OutputFormat,
) -> Result<String, RenderCommandError> {
    commands::render(&RenderArgs {
        configs,
        browser: Some(browser),
        prepull: false,
        prepull_images: PrePullImageArgs {
            prepull_helper_image: prepull::DEFAULT_HELPER_IMAGE.into(),
            prepull_pause_image: prepull::DEFAULT_PAUSE_IMAGE.into(),
        },
        policy: PolicyArgs::default(),
        output,
    })
}

fn render_case(browser: &str, config: &str) -> String {
    render(
        vec![config_file(config)],
        browser_file(browser),
        OutputFormat::Yaml,
    )
    .unwrap_or_else(|e| panic!("{browser} with {config}: {e}"))
}

/// Compares `actual` with the golden file of `stem`, or rewrites it under UPDATE_GOLDEN=1.
fn check_golden(stem: &str, actual: &str) {
    golden::check(&golden_file(stem), actual, REGENERATE);
}

fn golden_case(browser: &str, config: &str) {
    check_golden(browser, &render_case(browser, config));
}

#[test]
fn golden_chrome_with_single_sidecar() {
    golden_case("chrome", "single-sidecar");
}

#[test]
fn golden_long_name_and_foreign_metadata_stay_off_the_pod() {
    golden_case("long-name-foreign-metadata", "single-sidecar");
}

#[test]
fn golden_chrome_vnc_with_vnc_stack() {
    golden_case("chrome-vnc", "vnc-stack");
}

#[test]
fn golden_playwright() {
    golden_case("playwright", "playwright");
}

#[test]
fn golden_firefox_through_the_wildcard_entry() {
    golden_case("firefox-wildcard", "wildcard");
}

#[test]
fn golden_firefox_pinned_version_over_the_wildcard_entry() {
    golden_case("firefox-pinned", "wildcard");
}

#[test]
fn every_testdata_browser_has_a_golden_or_an_expected_failure() {
    let covered: Vec<&str> = CASES
        .iter()
        .map(|(browser, _)| *browser)
        .chain(FAILING.iter().map(|(browser, _, _, _)| *browser))
        .collect();
    for browser in stems(&testdata().join("browsers"), ".yaml") {
        assert!(
            covered.contains(&browser.as_str()),
            "testdata/browsers/{browser}.yaml has no golden case: add it to CASES"
        );
    }
    if testdata().join("golden").is_dir() {
        for golden in stems(&testdata().join("golden"), ".pod.yaml") {
            assert!(
                CASES.iter().any(|(browser, _)| *browser == golden),
                "testdata/golden/{golden}.pod.yaml belongs to no case: remove it"
            );
        }
    }
    for (browser, config, reason, ending) in FAILING {
        match render(
            vec![config_file(config)],
            browser_file(browser),
            OutputFormat::Yaml,
        ) {
            Err(RenderCommandError::Rejected {
                reason: got,
                message,
            }) => {
                assert_eq!(got, reason, "{browser}");
                assert!(message.ends_with(ending), "{browser}: {message}");
            }
            other => panic!("{browser}: expected {reason}, got {other:?}"),
        }
    }
}

#[test]
fn rendering_with_every_config_at_once_gives_the_same_pod() {
    let all: Vec<PathBuf> = stems(&testdata().join("configs"), ".yaml")
        .iter()
        .map(|stem| config_file(stem))
        .collect();
    assert!(all.len() >= 4, "{all:?}");
    let reversed: Vec<PathBuf> = all.iter().rev().cloned().collect();
    for (browser, config) in CASES {
        let alone = render_case(browser, config);
        for configs in [&all, &reversed] {
            let together =
                render(configs.clone(), browser_file(browser), OutputFormat::Yaml).unwrap();
            assert!(
                first_difference(&together, &alone).is_none(),
                "{browser}: rendering with all configs differs from {config} alone: {:?}",
                first_difference(&together, &alone)
            );
        }
    }
}

#[test]
fn yaml_and_json_outputs_describe_the_same_pod() {
    for (browser, config) in CASES {
        let yaml = render_case(browser, config);
        let json = render(
            vec![config_file(config)],
            browser_file(browser),
            OutputFormat::Json,
        )
        .unwrap();
        let from_yaml: Value = serde_saphyr::from_str(&yaml).unwrap();
        let from_json: Value = serde_json::from_str(&json).unwrap();
        assert_eq!(from_yaml, from_json, "{browser}");
        // Key order is part of the output: the YAML keeps the rendered order too.
        assert_eq!(
            serde_json::to_string(&from_yaml).unwrap(),
            serde_json::to_string(&from_json).unwrap(),
            "{browser}"
        );
    }
}

#[test]
fn first_difference_points_at_the_first_differing_line() {
    assert_eq!(first_difference("a\nb\n", "a\nb\n"), None);
    assert_eq!(first_difference("a\nb\n", "a\nc\n"), Some((2, "b", "c")));
    assert_eq!(
        first_difference("a\n", "a\nb\n"),
        Some((2, "<end of output>", "b"))
    );
    assert_eq!(
        first_difference("a\nb\n", "a\nb"),
        Some((3, "<newline at end>", "<none>"))
    );
}

// ---- compatibility with the BrowserConfigs of the current Selenosis stack ----

/// Every YAML file below `dir`, recursively, sorted.
fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// The image an entry's pod must run: the last tier (template, `"*"`, version) that sets
/// one, `{version}` replaced by the requested version.
fn expected_image(config: &Value, browser: &str, version: &str, requested: &str) -> String {
    let versions = &config["spec"]["browsers"][browser];
    let mut tiers = vec![&config["spec"]["template"], &versions["*"]];
    if version != "*" {
        tiers.push(&versions[version]);
    }
    tiers
        .iter()
        .rev()
        .find_map(|tier| tier["image"].as_str().filter(|image| !image.is_empty()))
        .unwrap()
        .replace("{version}", requested)
}

fn browser_resource(config: &Value) -> ApiResource {
    // The split-group layout of the Helm chart pairs browserconfig.selenosis.io with
    // browser.selenosis.io; the default layout uses selenosis.io for both.
    let api_version = match config["apiVersion"].as_str().unwrap() {
        "browserconfig.selenosis.io/v1" => "browser.selenosis.io/v1",
        _ => "selenosis.io/v1",
    };
    let (group, version) = api_version.split_once('/').unwrap();
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: api_version.into(),
        kind: "Browser".into(),
        plural: "browsers".into(),
    }
}

#[test]
fn upstream_browserconfigs_render_every_entry() {
    let Some(dir) = support::upstream::dir("upstream BrowserConfigs not rendered") else {
        return;
    };
    let (mut configs_checked, mut entries_checked) = (0, 0);
    for path in yaml_files(&dir) {
        let text = std::fs::read_to_string(&path).unwrap();
        // Helm templates are Go templates, not YAML; they hold the CRDs, not configs.
        if text.contains("{{") {
            continue;
        }
        let objects = manifest::parse(&text, &path).unwrap();
        for value in objects.into_iter().filter(|o| o["kind"] == "BrowserConfig") {
            let file = path.display();
            let config: DynamicObject = serde_json::from_value(value.clone()).unwrap();
            let reports = validate::validate_config(&config);
            let problems: Vec<_> = reports.iter().filter(|r| !r.problems.is_empty()).collect();
            assert!(problems.is_empty(), "{file}: {problems:#?}");
            let namespace = config.metadata.namespace.as_deref().unwrap_or("default");
            let resource = browser_resource(&value);
            configs_checked += 1;
            for (browser_name, version) in lookup::entries(&config) {
                let has_image = value["spec"]["browsers"][&browser_name][&version]["image"]
                    .as_str()
                    .is_some_and(|image| !image.is_empty());
                if version == "*" && !has_image {
                    continue;
                }
                let requested = if version == "*" { "1.0" } else { &version };
                entries_checked += 1;
                let name = format!("compat-{entries_checked}");
                let browser: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": resource.api_version,
                    "kind": "Browser",
                    "metadata": {
                        "name": name,
                        "namespace": namespace,
                        "uid": format!("00000000-0000-4000-8000-{entries_checked:012}"),
                    },
                    "spec": {"browserName": browser_name, "browserVersion": requested},
                }))
                .unwrap();
                // Under the default ceiling (baseline): today's Selenosis configs keep working.
                let pod = match desired::pod_for(
                    &browser,
                    std::slice::from_ref(&config),
                    &resource,
                    &Policy::default(),
                    None,
                    |_, _, _| None,
                ) {
                    PodCreation::Render { pod, .. } => pod,
                    PodCreation::Fail(failure) => {
                        panic!("{file}: {browser_name} {version}: {failure:?}")
                    }
                };
                let first = &pod["spec"]["containers"][0];
                assert_eq!(first["name"], "browser", "{file}: {browser_name} {version}");
                assert_eq!(
                    first["image"],
                    expected_image(&value, &browser_name, &version, requested),
                    "{file}: {browser_name} {version}"
                );
                assert_eq!(pod["metadata"]["name"], name);
                assert_eq!(pod["metadata"]["namespace"], namespace);
            }
        }
    }
    println!(
        "upstream compatibility: {configs_checked} BrowserConfigs, {entries_checked} entries rendered"
    );
    assert!(
        entries_checked >= 10,
        "only {entries_checked} upstream entries checked"
    );
}

async fn openapi(client: &kube::Client, path: &str) -> Value {
    let request = http::Request::get(path).body(Vec::new()).unwrap();
    client.request::<Value>(request).await.unwrap()
}

/// Against the Pod schema of the newest supported Kubernetes (k8s-openapi's, as the API
/// server double serves it), pruning removes nothing from any golden pod, nor from one
/// using native sidecars and resource claims: fields the cluster knows are never removed.
#[tokio::test]
async fn golden_pods_lose_nothing_to_the_current_pod_schema() {
    let server = support::apiserver::ApiServer::new();
    server.serve_openapi(true, true);
    let client = server.client();
    let v3 = openapi(&client, "/openapi/v3/api/v1").await;
    let v2 = openapi(&client, "/openapi/v2").await;
    let schemas = [
        PodSchema::from_openapi_v3(&v3).unwrap(),
        PodSchema::from_openapi_v2(&v2).unwrap(),
    ];
    let mut pods = Vec::new();
    for (browser, _) in CASES {
        let text = std::fs::read_to_string(golden_file(browser)).unwrap();
        pods.extend(manifest::parse(&text, &golden_file(browser)).unwrap());
    }
    let mut newest = pods[0].clone();
    newest["spec"]["initContainers"] =
        json!([{"name": "proxy", "image": "p", "restartPolicy": "Always"}]);
    newest["spec"]["containers"][0]["resources"]["claims"] = json!([{"name": "gpu"}]);
    newest["spec"]["resourceClaims"] = json!([{"name": "gpu", "resourceClaimName": "gpu"}]);
    pods.push(newest);
    for schema in &schemas {
        for pod in &pods {
            let mut pruned = pod.clone();
            assert_eq!(schema.prune(&mut pruned), Vec::<String>::new(), "{pod:#}");
            assert_eq!(&pruned, pod);
        }
    }
    // The same schema, as an older cluster serves it, removes exactly the newer fields.
    server.remove_schema_field("io.k8s.api.core.v1.Container", "restartPolicy");
    let older = PodSchema::from_openapi_v2(&openapi(&client, "/openapi/v2").await).unwrap();
    let mut pod = pods.last().unwrap().clone();
    assert_eq!(
        older.prune(&mut pod),
        ["spec.initContainers[proxy].restartPolicy"]
    );
}
