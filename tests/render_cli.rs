//! The `render` and `crds` subcommands run as the real binary: what a user sees on stdout,
//! stderr and in the exit status.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::Value;

use browser_controller::manifest;

const PREFIX: &str = "browser-controller render: ";

fn testdata(path: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("testdata")
            .join(path),
    )
    .unwrap()
}

/// A path in the temp dir, unique per process and call, removed (file or directory) on drop.
struct TempPath(PathBuf);

impl TempPath {
    fn new(name: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        TempPath(std::env::temp_dir().join(format!(
            "browser-controller-render-cli-{}-{n}-{name}",
            std::process::id()
        )))
    }

    fn file(name: &str, contents: &str) -> Self {
        let path = Self::new(name);
        std::fs::write(&path.0, contents).unwrap();
        path
    }

    fn dir(name: &str) -> Self {
        let path = Self::new(name);
        std::fs::create_dir(&path.0).unwrap();
        path
    }

    fn as_str(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        if self.0.is_dir() {
            let _ = std::fs::remove_dir(&self.0);
        } else {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_browser-controller"))
        .args(args)
        .output()
        .unwrap()
}

fn render(config: &str, browser: &str, extra: &[&str]) -> Output {
    let mut args = vec!["render", "--config", config, "--browser", browser];
    args.extend_from_slice(extra);
    run(&args)
}

/// The single stderr line of a failed run, without its newline; stdout must be empty.
fn failure_line(output: &Output) -> String {
    assert!(!output.status.success(), "exit status {}", output.status);
    assert!(
        output.stdout.is_empty(),
        "stdout: {}",
        String::from_utf8_lossy(&output.stdout)
    );
    let stderr = String::from_utf8(output.stderr.clone()).unwrap();
    assert_eq!(
        stderr.lines().count(),
        1,
        "stderr is not one line: {stderr:?}"
    );
    assert!(stderr.ends_with('\n'), "{stderr:?}");
    stderr.trim_end_matches('\n').to_string()
}

fn chrome_config() -> TempPath {
    TempPath::file("config.yaml", &testdata("configs/single-sidecar.yaml"))
}

fn chrome_browser() -> TempPath {
    TempPath::file("browser.yaml", &testdata("browsers/chrome.yaml"))
}

#[test]
fn render_prints_the_pod_as_yaml() {
    let (config, browser) = (chrome_config(), chrome_browser());
    let output = render(config.as_str(), browser.as_str(), &[]);
    assert!(output.status.success(), "{output:?}");
    assert!(output.stderr.is_empty(), "{output:?}");
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(stdout.starts_with("apiVersion: v1\n"), "{stdout}");
    assert_eq!(stdout, testdata("golden/chrome.pod.yaml"));
}

#[test]
fn render_prints_json_on_request() {
    let (config, browser) = (chrome_config(), chrome_browser());
    let output = render(config.as_str(), browser.as_str(), &["-o", "json"]);
    assert!(output.status.success(), "{output:?}");
    let pod: Value = serde_json::from_slice(&output.stdout).unwrap();
    let golden: Value = serde_saphyr::from_str(&testdata("golden/chrome.pod.yaml")).unwrap();
    assert_eq!(pod, golden);
    assert_eq!(pod["spec"]["containers"][0]["name"], "browser");
}

#[test]
fn missing_file_is_named() {
    let browser = chrome_browser();
    let missing = TempPath::new("missing.yaml");
    let line = failure_line(&render(missing.as_str(), browser.as_str(), &[]));
    assert!(
        line.starts_with(&format!("{PREFIX}cannot read {}: ", missing.as_str())),
        "{line}"
    );
}

#[test]
fn unreadable_file_is_named() {
    let config = chrome_config();
    let directory = TempPath::dir("browser.yaml");
    let line = failure_line(&render(config.as_str(), directory.as_str(), &[]));
    assert!(
        line.starts_with(&format!("{PREFIX}cannot read {}: ", directory.as_str())),
        "{line}"
    );
}

#[test]
fn yaml_syntax_error_names_the_file_and_line() {
    let browser = chrome_browser();
    let config = TempPath::file(
        "broken.yaml",
        "apiVersion: selenosis.io/v1\nkind: BrowserConfig\nspec: {browsers: [unclosed\n",
    );
    let line = failure_line(&render(config.as_str(), browser.as_str(), &[]));
    assert!(
        line.starts_with(&format!("{PREFIX}{}: invalid YAML", config.as_str())),
        "{line}"
    );
    assert!(line.contains("line 3"), "{line}");
}

#[test]
fn unknown_version_lists_what_is_available() {
    let config = chrome_config();
    let browser = TempPath::file(
        "browser.yaml",
        &testdata("browsers/chrome.yaml").replace("\"139.0\"", "\"999.0\""),
    );
    let line = failure_line(&render(config.as_str(), browser.as_str(), &[]));
    assert!(
        line.starts_with(&format!("{PREFIX}Browser configuration not found")),
        "{line}"
    );
    assert!(line.contains("version 999.0"), "{line}");
    assert!(
        line.ends_with("(available: chrome:138.0, chrome:139.0)"),
        "{line}"
    );
}

#[test]
fn unknown_browser_lists_what_is_available() {
    let config = TempPath::file("config.yaml", &testdata("configs/wildcard.yaml"));
    let browser = chrome_browser();
    let line = failure_line(&render(config.as_str(), browser.as_str(), &[]));
    assert!(
        line.starts_with(&format!("{PREFIX}Browser configuration not found")),
        "{line}"
    );
    assert!(line.contains("browser chrome"), "{line}");
    assert!(
        line.ends_with("(available: firefox:*, firefox:115.0)"),
        "{line}"
    );
}

#[test]
fn invalid_options_annotation_is_reported() {
    let config = chrome_config();
    let browser = TempPath::file("browser.yaml", &testdata("browsers/invalid-options.yaml"));
    let line = failure_line(&render(config.as_str(), browser.as_str(), &[]));
    assert!(
        line.starts_with(&format!(
            "{PREFIX}InvalidSelenosisOptions: unmarshal selenosis.io/options: "
        )),
        "{line}"
    );
}

#[test]
fn browser_file_must_hold_exactly_one_browser() {
    let config = chrome_config();
    let two = format!(
        "{}---\n{}",
        testdata("browsers/chrome.yaml"),
        testdata("browsers/chrome-vnc.yaml")
    );
    let browser = TempPath::file("browsers.yaml", &two);
    let line = failure_line(&render(config.as_str(), browser.as_str(), &[]));
    assert_eq!(
        line,
        format!(
            "{PREFIX}{}: expected exactly one Browser, found 2",
            browser.as_str()
        )
    );
}

#[test]
fn config_file_without_browserconfig_is_rejected() {
    let browser = chrome_browser();
    let line = failure_line(&render(browser.as_str(), browser.as_str(), &[]));
    assert_eq!(
        line,
        format!(
            "{PREFIX}{}: no BrowserConfig found (expected kind: BrowserConfig)",
            browser.as_str()
        )
    );
}

#[test]
fn crds_prints_the_definitions() {
    let output = run(&["crds"]);
    assert!(output.status.success(), "{output:?}");
    assert!(output.stderr.is_empty(), "{output:?}");
    let text = String::from_utf8(output.stdout).unwrap();
    let objects = manifest::parse(&text, Path::new("crds output")).unwrap();
    let names: Vec<&str> = objects
        .iter()
        .map(|o| {
            assert_eq!(o["kind"], "CustomResourceDefinition");
            o["metadata"]["name"].as_str().unwrap()
        })
        .collect();
    assert!(names.contains(&"browsers.selenosis.io"), "{names:?}");
    assert!(names.contains(&"browserconfigs.selenosis.io"), "{names:?}");
}

#[test]
fn a_version_yaml_reads_as_a_number_gets_the_operators_message() {
    let config = chrome_config();
    let browser = TempPath::file(
        "browser.yaml",
        &testdata("browsers/chrome.yaml").replace("\"139.0\"", "139.0"),
    );
    let line = failure_line(&render(config.as_str(), browser.as_str(), &[]));
    assert_eq!(
        line,
        format!(
            "{PREFIX}InvalidSpec: invalid Browser spec: spec.browserVersion must be a string, got the number 139.0; quote it (\"139.0\") so it is read exactly as written"
        )
    );
}

#[test]
fn configs_of_another_namespace_are_named_with_the_browsers() {
    let config = chrome_config();
    let browser = TempPath::file(
        "browser.yaml",
        &testdata("browsers/chrome.yaml").replace("namespace: selenosis", "namespace: team-a"),
    );
    let line = failure_line(&render(config.as_str(), browser.as_str(), &[]));
    assert!(
        line.starts_with(&format!("{PREFIX}Browser configuration not found")),
        "{line}"
    );
    assert!(
        line.ends_with(
            "(the given BrowserConfigs are in namespace selenosis, the Browser is in namespace team-a: a Browser uses only the BrowserConfigs of its own namespace)"
        ),
        "{line}"
    );
}

#[test]
fn render_prepull_prints_the_daemon_sets_and_needs_no_browser() {
    let config = TempPath::file("prepull.yaml", &testdata("prepull/chrome.yaml"));
    let output = run(&["render", "--prepull", "-c", config.as_str()]);
    assert!(output.status.success(), "{output:?}");
    assert!(output.stderr.is_empty(), "{output:?}");
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert_eq!(stdout, testdata("golden/chrome.daemonset.yaml"));
    // The helper images come from the same flags (and variables) as the operator's.
    let output = Command::new(env!("CARGO_BIN_EXE_browser-controller"))
        .args(["render", "--prepull", "-c", config.as_str(), "-o", "json"])
        .env("PREPULL_HELPER_IMAGE", "mirror.example/busybox:1")
        .output()
        .unwrap();
    let list: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        list["items"][0]["spec"]["template"]["spec"]["initContainers"][0]["image"],
        "mirror.example/busybox:1"
    );
}

#[test]
fn render_needs_a_browser_unless_prepull_and_prepull_takes_none() {
    let config = chrome_config();
    let browser = chrome_browser();
    let output = run(&["render", "-c", config.as_str()]);
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("--browser"),
        "{output:?}"
    );
    let output = run(&[
        "render",
        "--prepull",
        "-c",
        config.as_str(),
        "-b",
        browser.as_str(),
    ]);
    assert!(!output.status.success(), "{output:?}");
    // A config that asks for no pre-pull: one clear line.
    let line = failure_line(&run(&["render", "--prepull", "-c", config.as_str()]));
    assert!(
        line.starts_with(&format!(
            "{PREFIX}no entry of the given BrowserConfigs asks for pre-pull"
        )),
        "{line}"
    );
}
