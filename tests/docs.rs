//! The documentation against the code it describes, so that neither drifts silently: the
//! flag tables of `docs/operations.md` against the clap command, its metrics table against
//! what `Metrics` exports, the `render` example of `docs/configuration.md` against the
//! `render` subcommand, and the repository paths and links of every page against the tree.
//! Pure and fast: nothing here talks to a cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use clap::CommandFactory;
use kube::api::DynamicObject;
use kube::core::ApiResource;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher;
use serde_json::json;

use browser_controller::cached::CachedBrowser;
use browser_controller::cli::{Cli, OutputFormat, PolicyArgs, PrePullImageArgs, RenderArgs};
use browser_controller::commands;
use browser_controller::metrics::{CacheRegistration, Metrics, Stage};
use browser_controller::prepull::render as prepull;

const OPERATIONS: &str = "docs/operations.md";
const CONFIGURATION: &str = "docs/configuration.md";

/// Pages whose `--flags` are the operator's own (the benchmark's and the test harness' flags
/// appear in performance.md and architecture.md).
const FLAG_PAGES: [&str; 5] = [
    "README.md",
    "docs/behaviour.md",
    "docs/configuration.md",
    "docs/operations.md",
    "docs/compatibility.md",
];

/// Programs whose flags the docs quote in commands; their flags are not the operator's.
const OTHER_PROGRAMS: [&str; 12] = [
    "kubectl",
    "etcd",
    "stress-ng",
    "cargo",
    "sed",
    "go",
    "docker",
    "helm",
    "kustomize",
    "setup-envtest",
    "git",
    "cd",
];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(page: &str) -> String {
    std::fs::read_to_string(repo().join(page)).unwrap_or_else(|e| panic!("{page}: {e}"))
}

fn pages() -> Vec<String> {
    let mut pages = vec!["README.md".to_string()];
    let mut docs: Vec<String> = std::fs::read_dir(repo().join("docs"))
        .expect("docs/ exists")
        .map(|entry| entry.expect("docs/ is readable").file_name())
        .filter_map(|name| name.to_str().map(str::to_owned))
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

// ---- a little Markdown ------------------------------------------------------------------

/// One piece of a page: prose, or a fenced code block (`line`: its opening fence).
enum Piece {
    Prose { first_line: usize, text: String },
    Code { line: usize, text: String },
}

/// The page split into prose and fenced code blocks, with 1-based line numbers.
fn pieces(page: &str) -> Vec<Piece> {
    let mut out = Vec::new();
    let mut prose = String::new();
    let mut prose_start = 1;
    let mut code: Option<(usize, String)> = None;
    for (index, line) in page.lines().enumerate() {
        let number = index + 1;
        let fence = line.trim_start().strip_prefix("```");
        match (&mut code, fence) {
            (Some((start, text)), Some(_)) => {
                out.push(Piece::Code {
                    line: *start,
                    text: std::mem::take(text),
                });
                code = None;
                prose_start = number + 1;
            }
            (Some((_, text)), None) => {
                text.push_str(line);
                text.push('\n');
            }
            (None, Some(_)) => {
                out.push(Piece::Prose {
                    first_line: prose_start,
                    text: std::mem::take(&mut prose),
                });
                code = Some((number, String::new()));
            }
            (None, None) => {
                prose.push_str(line);
                prose.push('\n');
            }
        }
    }
    out.push(Piece::Prose {
        first_line: prose_start,
        text: prose,
    });
    out
}

/// The text of inline code spans (`…`) of a prose piece, with the line each starts on.
fn code_spans(first_line: usize, prose: &str) -> Vec<(usize, String)> {
    let mut spans = Vec::new();
    let mut rest = prose;
    let mut line = first_line;
    while let Some(open) = rest.find('`') {
        line += rest[..open].matches('\n').count();
        let after = &rest[open + 1..];
        let Some(close) = after.find('`') else { break };
        spans.push((line, after[..close].replace('\n', " ")));
        line += after[..close].matches('\n').count();
        rest = &after[close + 1..];
    }
    spans
}

/// Prose with its code spans removed, line by line.
fn outside_spans(prose: &str) -> String {
    prose
        .split('`')
        .enumerate()
        .map(|(i, part)| {
            if i % 2 == 0 {
                part.to_string()
            } else {
                "\n".repeat(part.matches('\n').count())
            }
        })
        .collect()
}

/// The sections of a page: each heading line with the text up to the next heading.
fn sections(page: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = vec![(String::new(), String::new())];
    let mut in_code = false;
    for line in page.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
        }
        if !in_code && line.starts_with('#') {
            out.push((
                line.trim_start_matches('#').trim().to_string(),
                String::new(),
            ));
        } else if let Some((_, body)) = out.last_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    out
}

/// The body of the first section whose heading satisfies `wanted`.
fn section<'a>(page: &'a [(String, String)], what: &str, wanted: impl Fn(&str) -> bool) -> &'a str {
    page.iter()
        .find(|(heading, _)| wanted(heading))
        .map(|(_, body)| body.as_str())
        .unwrap_or_else(|| panic!("{OPERATIONS}: no section {what}"))
}

/// The cells of a table row, `\|` kept as a literal bar.
fn cells(row: &str) -> Vec<String> {
    let inner = row.trim().trim_start_matches('|').trim_end_matches('|');
    let mut cells = vec![String::new()];
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                chars.next();
                if let Some(cell) = cells.last_mut() {
                    cell.push('|');
                }
            }
            '|' => cells.push(String::new()),
            _ => {
                if let Some(cell) = cells.last_mut() {
                    cell.push(c);
                }
            }
        }
    }
    cells.into_iter().map(|c| c.trim().to_string()).collect()
}

/// The first table of `body`: its header cells and its rows, each cell by header name.
fn first_table(body: &str) -> (Vec<String>, Vec<BTreeMap<String, String>>) {
    let lines: Vec<&str> = body
        .lines()
        .skip_while(|l| !l.trim_start().starts_with('|'))
        .take_while(|l| l.trim_start().starts_with('|'))
        .collect();
    let Some((header, rows)) = lines.split_first() else {
        return (Vec::new(), Vec::new());
    };
    let header = cells(header);
    let rows = rows
        .iter()
        .skip(1) // the |---| line
        .map(|row| header.iter().cloned().zip(cells(row)).collect())
        .collect();
    (header, rows)
}

/// The backticked words of a cell, in order.
fn ticked(cell: &str) -> Vec<String> {
    cell.split('`')
        .enumerate()
        .filter(|(i, _)| i % 2 == 1)
        .map(|(_, s)| s.to_string())
        .collect()
}

/// The backticked words of a cell outside parentheses (label names, not their values).
fn ticked_outside_parentheses(cell: &str) -> Vec<String> {
    let mut depth = 0usize;
    let outside: String = cell
        .chars()
        .filter(|c| {
            match c {
                '(' => depth += 1,
                ')' => depth = depth.saturating_sub(1),
                _ => return depth == 0,
            }
            false
        })
        .collect();
    ticked(&outside)
}

/// Every `--long-flag` in `text`.
fn long_flags(text: &str) -> Vec<String> {
    let mut flags = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(pos) = text[i..].find("--") {
        let start = i + pos;
        let preceded_by_word =
            start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'-');
        let name: String = text[start + 2..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')
            .collect();
        if !preceded_by_word && name.starts_with(|c: char| c.is_ascii_lowercase()) {
            flags.push(format!("--{}", name.trim_end_matches('-')));
        }
        i = start + 2 + name.len();
    }
    flags
}

/// The operator's arguments in a command line, or `None` when it runs another program.
/// `cargo run -- ARGS` runs the operator's binary with ARGS.
fn operator_part(command: &str) -> Option<&str> {
    let command = command.trim();
    let mut words = command.split_whitespace().skip_while(|w| {
        w.contains('=') && w.chars().next().is_some_and(|c| c.is_ascii_uppercase())
    });
    let first = words.next().unwrap_or_default();
    if first == "cargo" && words.next() == Some("run") {
        return command.split_once(" -- ").map(|(_, args)| args);
    }
    (!OTHER_PROGRAMS.contains(&first)).then_some(command)
}

// ---- flags -------------------------------------------------------------------------------

/// One long flag of the command line.
struct Flag {
    long: String,
    env: Option<String>,
    default: Option<String>,
}

/// The long flags of `command` (help and version excluded), by name.
fn flags_of(command: &clap::Command) -> BTreeMap<String, Flag> {
    command
        .get_arguments()
        .filter(|arg| !matches!(arg.get_id().as_str(), "help" | "version"))
        .filter_map(|arg| {
            let long = format!("--{}", arg.get_long()?);
            // A switch (`--split-groups`) has clap's implicit `false`, not a default to document.
            let takes_value = arg.get_action().takes_values();
            let defaults: Vec<String> = arg
                .get_default_values()
                .iter()
                .map(|v| v.to_string_lossy().into_owned())
                .collect();
            let flag = Flag {
                long: long.clone(),
                env: arg.get_env().map(|e| e.to_string_lossy().into_owned()),
                default: (takes_value && !defaults.is_empty()).then(|| defaults.join(",")),
            };
            Some((long, flag))
        })
        .collect()
}

/// The built command: the operator, then its subcommands (without clap's `help`).
fn commands() -> Vec<(String, clap::Command)> {
    let mut root = Cli::command();
    root.build();
    let mut out = vec![(String::new(), root.clone())];
    out.extend(
        root.get_subcommands()
            .filter(|sub| sub.get_name() != "help")
            .map(|sub| (sub.get_name().to_string(), sub.clone())),
    );
    out
}

/// Compares one command's flags with its table in operations.md; returns what drifted.
fn compare_flag_table(
    shown: &str,
    section_name: &str,
    body: &str,
    flags: &BTreeMap<String, Flag>,
) -> Vec<String> {
    let mut drift = Vec::new();
    let (header, rows) = first_table(body);
    if header.first().map(String::as_str) != Some("flag") {
        return vec![format!(
            "{OPERATIONS}, section {section_name}: expected a table whose first column is `flag`"
        )];
    }
    let mut documented = BTreeSet::new();
    for row in &rows {
        let cell = row.get("flag").map(String::as_str).unwrap_or_default();
        let Some(long) = ticked(cell).into_iter().find(|t| t.starts_with("--")) else {
            drift.push(format!(
                "{OPERATIONS}, section {section_name}: row {cell:?} names no `--flag`"
            ));
            continue;
        };
        documented.insert(long.clone());
        let Some(flag) = flags.get(&long) else {
            drift.push(format!(
                "{OPERATIONS}, section {section_name}: documents {long}, which `{shown} --help` does not have"
            ));
            continue;
        };
        if header.iter().any(|h| h == "env") {
            let doc_env = row.get("env").and_then(|c| ticked(c).into_iter().next());
            if doc_env != flag.env {
                drift.push(format!(
                    "{OPERATIONS}, section {section_name}: {long} is read from env {:?}, the docs say {:?}",
                    flag.env, doc_env
                ));
            }
        }
        if let Some(default) = &flag.default {
            let doc_default = row
                .get("default")
                .and_then(|c| ticked(c).into_iter().next());
            if doc_default.as_ref() != Some(default) {
                drift.push(format!(
                    "{OPERATIONS}, section {section_name}: {long} defaults to `{default}`, the docs say {doc_default:?}"
                ));
            }
        }
    }
    for flag in flags.values() {
        if !documented.contains(&flag.long) {
            drift.push(format!(
                "{OPERATIONS}, section {section_name}: {} (in `{shown} --help`) is not documented",
                flag.long
            ));
        }
    }
    drift
}

#[test]
fn every_flag_and_env_var_is_documented_and_every_documented_flag_exists() {
    let page = read(OPERATIONS);
    let page_sections = sections(&page);
    let mut drift = Vec::new();
    for (name, command) in commands() {
        let flags = flags_of(&command);
        let (shown, section_name, body) = if name.is_empty() {
            let title = "\"Flags and environment\"";
            let body = section(&page_sections, title, |h| h == "Flags and environment");
            ("browser-controller".to_string(), title.to_string(), body)
        } else {
            let title = format!("\"`{name}`\"");
            let wanted = format!("`{name}`");
            let body = section(&page_sections, &title, |h| h == wanted);
            (format!("browser-controller {name}"), title, body)
        };
        drift.extend(compare_flag_table(&shown, &section_name, body, &flags));
    }
    assert!(
        drift.is_empty(),
        "the docs drifted from the CLI:\n{}",
        drift.join("\n")
    );
}

#[test]
fn every_flag_the_docs_mention_exists() {
    let mut known: BTreeSet<String> = BTreeSet::new();
    for (_, mut command) in commands() {
        command.build();
        known.extend(
            command
                .get_arguments()
                .filter_map(|arg| arg.get_long().map(|l| format!("--{l}"))),
        );
    }
    let mut unknown = Vec::new();
    for page in FLAG_PAGES {
        let text = read(page);
        let mut mentioned: Vec<(usize, String)> = Vec::new();
        for piece in pieces(&text) {
            match piece {
                Piece::Prose { first_line, text } => {
                    for (line, span) in code_spans(first_line, &text) {
                        if let Some(args) = operator_part(&span) {
                            mentioned.extend(long_flags(args).into_iter().map(|f| (line, f)));
                        }
                    }
                    for (offset, line) in outside_spans(&text).lines().enumerate() {
                        mentioned.extend(
                            long_flags(line)
                                .into_iter()
                                .map(|f| (first_line + offset, f)),
                        );
                    }
                }
                Piece::Code { line, text, .. } => {
                    for (offset, command) in text.lines().enumerate() {
                        if let Some(args) = operator_part(command.split('#').next().unwrap_or("")) {
                            mentioned.extend(
                                long_flags(args).into_iter().map(|f| (line + 1 + offset, f)),
                            );
                        }
                    }
                }
            }
        }
        unknown.extend(
            mentioned
                .into_iter()
                .filter(|(_, flag)| !known.contains(flag))
                .map(|(line, flag)| {
                    format!("{page}:{line}: {flag} is no flag of browser-controller")
                }),
        );
    }
    assert!(
        unknown.is_empty(),
        "the docs name flags that do not exist:\n{}",
        unknown.join("\n")
    );
}

// ---- the render example ------------------------------------------------------------------

/// The `render` arguments of a command line, if it runs `render`.
fn render_args(command: &str) -> Option<RenderArgs> {
    let args = operator_part(command)?;
    let mut words = args.split_whitespace();
    words.find(|w| *w == "render")?;
    let (mut configs, mut browser, mut output) = (Vec::new(), None, OutputFormat::Yaml);
    let mut prepull = false;
    while let Some(word) = words.next() {
        let (flag, inline) = match word.split_once('=') {
            Some((flag, value)) => (flag, Some(value.to_string())),
            None => (word, None),
        };
        let mut value = || inline.clone().or_else(|| words.next().map(str::to_string));
        match flag {
            "-c" | "--config" => configs.push(repo().join(value()?)),
            "-b" | "--browser" => browser = Some(repo().join(value()?)),
            "--prepull" => prepull = true,
            "-o" | "--output" => {
                output = match value()?.as_str() {
                    "json" => OutputFormat::Json,
                    _ => OutputFormat::Yaml,
                }
            }
            _ => {}
        }
    }
    if browser.is_none() && !prepull {
        return None;
    }
    Some(RenderArgs {
        configs,
        browser,
        prepull,
        prepull_images: PrePullImageArgs {
            prepull_helper_image: prepull::DEFAULT_HELPER_IMAGE.into(),
            prepull_pause_image: prepull::DEFAULT_PAUSE_IMAGE.into(),
        },
        policy: PolicyArgs::default(),
        output,
    })
}

/// Where the docs' copy first differs from the real text (`source` says what that is).
fn first_difference(shown: &str, real: &str, source: &str) -> String {
    let (s, r): (Vec<&str>, Vec<&str>) = (shown.lines().collect(), real.lines().collect());
    let at = s.iter().zip(&r).take_while(|(x, y)| x == y).count();
    format!(
        "first difference at line {} of the block: {source} {:?}, the docs show {:?}",
        at + 1,
        r.get(at).copied().unwrap_or("<end>"),
        s.get(at).copied().unwrap_or("<end>")
    )
}

#[test]
fn the_merge_example_is_what_render_prints_for_the_files_it_names() {
    let page = read(CONFIGURATION);
    let pieces = pieces(&page);
    let mut checked = 0;
    let mut drift = Vec::new();
    for (index, piece) in pieces.iter().enumerate() {
        let Piece::Code { line, text, .. } = piece else {
            continue;
        };
        // A file shown whole: the block right after a line naming it, e.g. "`testdata/x.yaml`:".
        if let Some(Piece::Prose { text: before, .. }) = index.checked_sub(1).map(|i| &pieces[i])
            && let Some(path) = before
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .and_then(|l| l.trim().strip_prefix('`')?.strip_suffix("`:"))
        {
            let file = std::fs::read_to_string(repo().join(path))
                .unwrap_or_else(|e| panic!("{CONFIGURATION}:{line}: {path}: {e}"));
            if *text != file {
                drift.push(format!(
                    "{CONFIGURATION}:{line}: the copy of {path} differs from the file; {}",
                    first_difference(text, &file, "the file has")
                ));
            }
            checked += 1;
        }
        // A render command followed directly (only blank lines between) by its output.
        let Some(args) = text.lines().find_map(render_args) else {
            continue;
        };
        let output = match (pieces.get(index + 1), pieces.get(index + 2)) {
            (Some(Piece::Prose { text: gap, .. }), Some(Piece::Code { text, .. }))
                if gap.trim().is_empty() =>
            {
                text
            }
            _ => continue,
        };
        match commands::render(&args) {
            Ok(printed) if printed == *output => {}
            Ok(printed) => drift.push(format!(
                "{CONFIGURATION}:{line}: the output shown is not what the command prints; {}",
                first_difference(output, &printed, "render prints")
            )),
            Err(e) => drift.push(format!("{CONFIGURATION}:{line}: the command fails: {e}")),
        }
        checked += 1;
    }
    assert!(drift.is_empty(), "{}", drift.join("\n"));
    assert!(
        checked >= 2,
        "{CONFIGURATION}: expected the worked example's input file and a render command with its output; found {checked} checked blocks"
    );
}

// ---- metrics -----------------------------------------------------------------------------

/// A `Metrics` with a sample in every family: each recording method once, and a Browser,
/// a BrowserConfig and a pre-pull DaemonSet in the caches the gauges read.
fn metrics_with_every_family() -> (Metrics, Vec<CacheRegistration>) {
    let metrics = Metrics::new();
    metrics.write("apply", "pods");
    metrics.pod_create_error(403);
    metrics.failure("ConfigNotFound");
    metrics.reconcile_error("write");
    metrics.deletion("external");
    metrics.watch_error("pods");
    metrics.watch_restart("pods");
    metrics.event_dropped(false);
    metrics.watch_resync("pods", std::time::Duration::from_secs(3));
    drop(metrics.reconcile_started());
    let from: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().expect("timestamp");
    let to: jiff::Timestamp = "2026-01-01T00:00:02Z".parse().expect("timestamp");
    for stage in [Stage::PodCreated, Stage::Scheduled, Stage::Running] {
        metrics.startup(stage, from, to);
    }
    let resource = |kind: &str, plural: &str| ApiResource {
        group: "selenosis.io".into(),
        version: "v1".into(),
        api_version: "selenosis.io/v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    };
    let object = |value: serde_json::Value| -> DynamicObject {
        serde_json::from_value(value).expect("a valid object")
    };
    let mut browsers = Writer::<CachedBrowser>::new(resource("Browser", "browsers"));
    let browser: CachedBrowser = serde_json::from_value(json!({
        "apiVersion": "selenosis.io/v1", "kind": "Browser",
        "metadata": {"name": "s1", "namespace": "ns"},
        "spec": {"browserName": "chrome", "browserVersion": "139.0"},
        "status": {"phase": "Running"},
    }))
    .expect("a valid Browser");
    browsers.apply_watcher_event(&watcher::Event::Apply(browser));
    let mut configs = Writer::<DynamicObject>::new(resource("BrowserConfig", "browserconfigs"));
    configs.apply_watcher_event(&watcher::Event::Apply(object(json!({
        "apiVersion": "selenosis.io/v1", "kind": "BrowserConfig",
        "metadata": {"name": "chrome", "namespace": "ns"},
        "spec": {"browsers": {"chrome": {"139.0": {"image": "chrome:139"}}}},
    }))));
    let mut daemon_sets = Writer::<DynamicObject>::new(ApiResource {
        group: "apps".into(),
        version: "v1".into(),
        api_version: "apps/v1".into(),
        kind: "DaemonSet".into(),
        plural: "daemonsets".into(),
    });
    daemon_sets.apply_watcher_event(&watcher::Event::Apply(object(json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "chrome-prepull-0123456789", "namespace": "ns", "generation": 1,
            "ownerReferences": [{"apiVersion": "selenosis.io/v1", "kind": "BrowserConfig",
                "name": "chrome", "uid": "u1", "controller": true}]},
        "spec": {"template": {"spec": {"initContainers": [{"name": "pull-1", "image": "chrome:139"}]}}},
        "status": {"observedGeneration": 1, "desiredNumberScheduled": 2, "updatedNumberScheduled": 2, "numberReady": 1},
    }))));
    let registrations = vec![
        metrics.observe_browsers(browsers.as_reader()),
        metrics.observe_configs(configs.as_reader()),
        metrics.observe_prepull(daemon_sets.as_reader()),
    ];
    (metrics, registrations)
}

/// Label names of one exposition line `name{a="x",b="y"} 1`.
fn label_names(sample: &str) -> Vec<String> {
    let Some(open) = sample.find('{') else {
        return Vec::new();
    };
    let mut names = Vec::new();
    let mut rest = &sample[open + 1..];
    while let Some(eq) = rest.find("=\"") {
        names.push(rest[..eq].trim_start_matches(',').to_string());
        let mut escaped = false;
        let value_len = rest[eq + 2..]
            .char_indices()
            .find(|(_, c)| {
                let end = *c == '"' && !escaped;
                escaped = *c == '\\' && !escaped;
                end
            })
            .map_or(rest.len() - eq - 2, |(i, _)| i);
        rest = &rest[eq + 2 + value_len + 1..];
        if rest.starts_with('}') {
            break;
        }
    }
    names
}

/// What `/metrics` exports: the name users query (counters with `_total`) → (type, labels).
fn exported() -> BTreeMap<String, (String, BTreeSet<String>)> {
    let (metrics, _registrations) = metrics_with_every_family();
    let text = metrics.encode().expect("metrics encode");
    let mut families: BTreeMap<String, (String, BTreeSet<String>)> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("# TYPE name type");
            let queried = if kind == "counter" {
                format!("{name}_total")
            } else {
                name.to_string()
            };
            families.insert(queried, (kind.to_string(), BTreeSet::new()));
        }
    }
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let series = line.split(['{', ' ']).next().unwrap_or_default();
        let family = families
            .keys()
            .filter(|f| {
                series == f.as_str()
                    || ["_bucket", "_sum", "_count"]
                        .iter()
                        .any(|suffix| series.strip_suffix(suffix) == Some(f.as_str()))
            })
            .max_by_key(|f| f.len())
            .cloned();
        if let Some(family) = family
            && let Some((_, labels)) = families.get_mut(&family)
        {
            labels.extend(label_names(line).into_iter().filter(|l| l != "le"));
        }
    }
    families
}

#[test]
fn every_metric_family_is_documented_and_every_documented_family_exists() {
    let exported = exported();
    assert!(
        exported.len() >= 13,
        "expected every family to carry a sample, got {:?}",
        exported.keys()
    );
    let page = read(OPERATIONS);
    let page_sections = sections(&page);
    let (header, rows) = first_table(section(&page_sections, "\"Metrics\"", |h| h == "Metrics"));
    assert_eq!(
        header,
        ["family", "type", "labels", "meaning"],
        "{OPERATIONS}, section \"Metrics\": unexpected table header"
    );
    let mut drift = Vec::new();
    let mut documented = BTreeSet::new();
    for row in &rows {
        let Some(name) = ticked(&row["family"]).into_iter().next() else {
            drift.push(format!(
                "{OPERATIONS}: metrics row {:?} names no family",
                row["family"]
            ));
            continue;
        };
        documented.insert(name.clone());
        let Some((kind, labels)) = exported.get(&name) else {
            drift.push(format!(
                "{OPERATIONS} documents the metric {name}, which the operator does not export"
            ));
            continue;
        };
        if row["type"] != *kind {
            drift.push(format!(
                "{OPERATIONS}: {name} is documented as a {}, the operator exports a {kind}",
                row["type"]
            ));
        }
        let doc_labels: BTreeSet<String> = ticked_outside_parentheses(&row["labels"])
            .into_iter()
            .collect();
        if doc_labels != *labels {
            drift.push(format!(
                "{OPERATIONS}: {name} is documented with labels {doc_labels:?}, the operator exports {labels:?}"
            ));
        }
    }
    for name in exported.keys().filter(|name| !documented.contains(*name)) {
        drift.push(format!(
            "the operator exports the metric {name}, which {OPERATIONS} does not document"
        ));
    }
    assert!(
        drift.is_empty(),
        "the docs drifted from the metrics:\n{}",
        drift.join("\n")
    );
}

// ---- paths and links ---------------------------------------------------------------------

/// GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens.
fn anchor(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// Top-level folders of the repository that the docs point into.
const TREE: [&str; 9] = [
    "src/",
    "tests/",
    "benches/",
    "testdata/",
    "crds/",
    "rbac/",
    "deploy/",
    "docs/",
    ".ci/",
];

#[test]
fn links_and_repository_paths_in_the_docs_resolve() {
    let mut broken = Vec::new();
    for page in pages() {
        let text = read(&page);
        let dir = Path::new(&page).parent().unwrap_or(Path::new(""));
        // Markdown links to files of the repository, with their anchors.
        for (offset, line) in text.lines().enumerate() {
            for target in line.split("](").skip(1).filter_map(|s| s.split(')').next()) {
                if target.starts_with("http") {
                    continue;
                }
                let (file, fragment) = target.split_once('#').unwrap_or((target, ""));
                let file = if file.is_empty() {
                    PathBuf::from(&page)
                } else {
                    dir.join(file)
                };
                let Ok(linked) = std::fs::read_to_string(repo().join(&file)) else {
                    broken.push(format!(
                        "{page}:{}: link to {target}: no such file",
                        offset + 1
                    ));
                    continue;
                };
                if !fragment.is_empty()
                    && !sections(&linked)
                        .iter()
                        .any(|(heading, _)| anchor(heading) == fragment)
                {
                    broken.push(format!(
                        "{page}:{}: link to {target}: {} has no heading #{fragment}",
                        offset + 1,
                        file.display()
                    ));
                }
            }
        }
        // Paths of the repository in code spans.
        for piece in pieces(&text) {
            let Piece::Prose { first_line, text } = piece else {
                continue;
            };
            for (line, span) in code_spans(first_line, &text) {
                let path = span.trim();
                let is_path = TREE.iter().any(|dir| path.starts_with(dir))
                    && !path.contains([' ', '<', '*'])
                    && !path.contains("...");
                if is_path && !repo().join(path).exists() {
                    broken.push(format!("{page}:{line}: `{path}` does not exist"));
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "the docs point to what does not exist:\n{}",
        broken.join("\n")
    );
}

// ---- citations in the code ---------------------------------------------------------------

/// Source files under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("readable directory").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

/// A file's comments as one text: comment markers and line breaks inside comments removed,
/// so a citation wrapped over two lines reads whole.
fn comment_text(source: &str) -> String {
    let mut text = String::new();
    for line in source.lines() {
        let trimmed = line.trim_start();
        let comment = ["//!", "///", "//"]
            .iter()
            .find_map(|marker| trimmed.strip_prefix(marker));
        match comment {
            Some(comment) => {
                text.push_str(comment.trim());
                text.push(' ');
            }
            None => text.push('\n'),
        }
    }
    text
}

/// The citations in `text`: a page under docs/ followed by its quoted headings, each
/// after a comma.
fn citations(text: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    for (at, _) in text.match_indices("docs/") {
        let rest = &text[at..];
        let Some(end) = rest.find(".md") else {
            continue;
        };
        let page = &rest[..end + 3];
        if page.contains(char::is_whitespace) {
            continue;
        }
        let mut headings = Vec::new();
        let mut tail = &rest[end + 3..];
        while let Some(quoted) = tail.strip_prefix(", \"") {
            let Some(close) = quoted.find('"') else { break };
            headings.push(quoted[..close].to_string());
            tail = &quoted[close + 1..];
        }
        out.push((page.to_string(), headings));
    }
    out
}

#[test]
fn the_docs_headings_the_code_cites_exist() {
    let mut files = Vec::new();
    for dir in ["src", "tests", "benches"] {
        rust_files(&repo().join(dir), &mut files);
    }
    let mut broken = Vec::new();
    for file in files {
        let source = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{e}"));
        let shown = file
            .strip_prefix(repo())
            .unwrap_or(&file)
            .display()
            .to_string();
        for (page, headings) in citations(&comment_text(&source)) {
            let Ok(text) = std::fs::read_to_string(repo().join(&page)) else {
                broken.push(format!("{shown}: cites {page}, which does not exist"));
                continue;
            };
            let existing = sections(&text);
            for heading in headings {
                if !existing.iter().any(|(h, _)| *h == heading) {
                    broken.push(format!(
                        "{shown}: cites {page}, \"{heading}\": no such heading"
                    ));
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "comments cite docs that moved:\n{}",
        broken.join("\n")
    );
}
