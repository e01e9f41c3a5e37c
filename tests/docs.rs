//! The documentation against the code it describes, so that neither drifts silently: the
//! flag tables of `docs/operations.md` against the clap command, its metrics table against
//! what `Metrics` exports, the `render` example of `docs/configuration.md` against the
//! `render` subcommand, the messages the docs quote (start-up errors in either log format,
//! the permission hint, lease timing, `InvalidConfig`) against what the code prints, the
//! `kubectl get` columns against the CRDs, and the repository paths and links of every page
//! against the tree. Pure and fast: nothing here talks to a cluster (the start-up errors come
//! from the binary pointed at a closed port).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use clap::CommandFactory;
use kube::api::DynamicObject;
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;
use testkit::host::{self, TempDir, free_port};
use testkit::kinds::kinds;
use testkit::markdown::anchor;
use testkit::metrics::{Family, exported};

use browser_controller::api::crd::{self, Layout};
use browser_controller::cli::{Cli, OutputFormat, PolicyArgs, PrePullImageArgs, RenderArgs};
use browser_controller::commands;
use browser_controller::leader::Timing;
use browser_controller::lifecycle::desired;
use browser_controller::lifecycle::plan::PodCreation;
use browser_controller::lifecycle::reason::Reason;
use browser_controller::permissions::{self, PermissionError};
use browser_controller::pod::policy::Policy;
use browser_controller::prepull::render as prepull;

const OPERATIONS: &str = "docs/operations.md";
const CONFIGURATION: &str = "docs/configuration.md";

/// Pages whose `--flags` are the operator's own (the benchmark's and the test harness' flags
/// appear in performance.md and architecture.md).
const FLAG_PAGES: [&str; 7] = [
    "README.md",
    "docs/behaviour.md",
    "docs/configuration.md",
    "docs/operations.md",
    "docs/compatibility.md",
    "docs/quickstart.md",
    "docs/versioning.md",
];

/// Programs whose flags the docs quote in commands; their flags are not the operator's.
const OTHER_PROGRAMS: [&str; 13] = [
    "kubectl",
    "geckodriver",
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
    ticked(&without_parentheses(cell))
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
#[derive(PartialEq)]
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
    let operator_flags = flags_of(&Cli::command());
    for (name, command) in commands() {
        let mut flags = flags_of(&command);
        // A subcommand that takes every flag of the operator (`check`) documents only its
        // own: the others are in "Flags and environment".
        if !name.is_empty()
            && operator_flags
                .iter()
                .all(|(long, flag)| flags.get(long) == Some(flag))
        {
            flags.retain(|long, _| !operator_flags.contains_key(long));
        }
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
        let Some(Family { kind, labels }) = exported.get(&name) else {
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
                // Pictures and other files than pages only need to exist.
                if file.extension().is_some_and(|e| e != "md") && repo().join(&file).is_file() {
                    continue;
                }
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
    let files: Vec<PathBuf> = ["src", "crates", "tests", "benches"]
        .iter()
        .flat_map(|dir| testkit::rust_files(&repo().join(dir)))
        .collect();
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

// ---- messages the operator prints ---------------------------------------------------------

/// Whether `text` is `pattern` with its wildcards filled in: `…`, and with `placeholders` also
/// `<…>` (the docs' `<API message>`). Anchored at both ends unless a wildcard is there.
fn glob(pattern: &str, text: &str, placeholders: bool) -> bool {
    let mut literals = vec![String::new()];
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c == '…' || (placeholders && c == '<') {
            if c == '<' {
                chars.by_ref().take_while(|c| *c != '>').for_each(drop);
            }
            literals.push(String::new());
        } else if let Some(last) = literals.last_mut() {
            last.push(c);
        }
    }
    let (first, rest) = literals.split_first().expect("one literal at least");
    let Some(mut remaining) = text.strip_prefix(first.as_str()) else {
        return false;
    };
    let Some((last, middle)) = rest.split_last() else {
        return remaining.is_empty();
    };
    for literal in middle {
        match remaining.find(literal.as_str()) {
            Some(at) => remaining = &remaining[at + literal.len()..],
            None => return false,
        }
    }
    remaining.ends_with(last.as_str())
}

/// The body of the section titled exactly `heading` in `page` (named `name` in failures).
fn section_of<'a>(name: &str, page: &'a [(String, String)], heading: &str) -> &'a str {
    page.iter()
        .find(|(h, _)| h == heading)
        .map(|(_, body)| body.as_str())
        .unwrap_or_else(|| panic!("{name}: no section {heading:?}"))
}

/// The message patterns of the "Start-up errors" table: every code span of its `message`
/// column.
fn start_up_error_patterns() -> Vec<String> {
    let page = read(OPERATIONS);
    let (header, rows) = first_table(section_of(OPERATIONS, &sections(&page), "Start-up errors"));
    assert_eq!(
        header.first().map(String::as_str),
        Some("message"),
        "{OPERATIONS}, section \"Start-up errors\": unexpected table header"
    );
    rows.iter()
        .flat_map(|row| ticked(&row["message"]))
        .collect()
}

/// Start-up errors in `messages` that no row of the "Start-up errors" table matches.
fn undocumented_start_up_errors<'a>(messages: impl IntoIterator<Item = &'a String>) -> Vec<String> {
    let patterns = start_up_error_patterns();
    messages
        .into_iter()
        .filter(|m| {
            let first_line = m.lines().next().unwrap_or_default();
            !patterns.iter().any(|p| glob(p, first_line, false))
        })
        .map(|m| format!("{OPERATIONS}, \"Start-up errors\": no row matches {m:?}"))
        .collect()
}

// ---- the permission hint -------------------------------------------------------------------

/// What `logging::fatal` puts before each line of a fatal error in a text log; the start-up
/// example test holds it against the binary.
const TEXT_PREFIX: &str = "browser-controller: ";

/// The `rbac/…` paths a text names.
fn rbac_paths(text: &str) -> BTreeSet<String> {
    text.split_whitespace()
        .map(|w| w.trim_end_matches([',', ')', ';']).trim_start_matches('('))
        .filter(|w| w.starts_with("rbac/"))
        .map(str::to_string)
        .collect()
}

#[test]
fn the_missing_permission_output_the_docs_quote_is_what_the_check_prints() {
    let page = read(OPERATIONS);
    let page_sections = sections(&page);
    let body = section_of(OPERATIONS, &page_sections, "Start-up permission check");
    let quoted = pieces(body)
        .into_iter()
        .find_map(|piece| match piece {
            Piece::Code { text, .. } if text.lines().all(|l| l.starts_with(TEXT_PREFIX)) => {
                Some(text)
            }
            _ => None,
        })
        .expect("the section quotes what the operator prints");
    let shown: Vec<&str> = quoted
        .lines()
        .map(|l| l.strip_prefix(TEXT_PREFIX).unwrap_or(l))
        .collect();
    // The code's own line for a missing permission, without the permission.
    let missing_prefix = PermissionError::Missing(vec![String::new()]).to_string();
    let missing_prefix = missing_prefix.lines().next().unwrap_or_default();
    let missing: Vec<String> = shown
        .iter()
        .filter_map(|l| l.strip_prefix(missing_prefix))
        .map(str::to_string)
        .collect();
    assert!(
        !missing.is_empty(),
        "{OPERATIONS}: the quote names no missing permission"
    );
    let printed = PermissionError::Missing(missing.clone()).to_string();
    let printed: Vec<&str> = printed.lines().collect();
    assert_eq!(
        shown, printed,
        "{OPERATIONS}, \"Start-up permission check\": the quote is not what the operator prints"
    );

    // The extra hint lines for DaemonSets and the Lease name files the section names too.
    let prose: Vec<String> = pieces(body)
        .into_iter()
        .flat_map(|piece| match piece {
            Piece::Prose { first_line, text } => code_spans(first_line, &text),
            Piece::Code { .. } => Vec::new(),
        })
        .map(|(_, span)| span)
        .filter(|span| span.starts_with("rbac/") && span != "rbac/")
        .collect();
    let base: BTreeSet<String> = printed.iter().map(|l| l.to_string()).collect();
    let mut drift = Vec::new();
    let kinds = kinds(Layout::Default);
    let namespaces = ["team-a".to_string()];
    let extra_cases = [
        permissions::prepull(&namespaces),
        permissions::lease("browser-controller"),
    ];
    for accesses in &extra_cases {
        let mut lines = missing.clone();
        lines.extend(accesses.iter().map(ToString::to_string));
        let text = PermissionError::Missing(lines).to_string();
        for line in text.lines().filter(|l| !l.starts_with(missing_prefix)) {
            if base.contains(line) {
                continue;
            }
            for path in rbac_paths(line) {
                if !prose.iter().any(|span| path.starts_with(span.as_str())) {
                    drift.push(format!(
                        "{OPERATIONS}, \"Start-up permission check\": the hint {line:?} names {path}, the section does not"
                    ));
                }
            }
        }
    }

    // The troubleshooting rows for a missing permission name every file its hint lines name.
    let page_rows = first_table(section_of(OPERATIONS, &page_sections, "Start-up errors")).1;
    let every_access = permissions::required(&kinds, &namespaces)
        .into_iter()
        .chain(extra_cases.into_iter().flatten());
    for access in every_access {
        let text = PermissionError::Missing(vec![access.to_string()]).to_string();
        let (first, hints) = text.split_once('\n').unwrap_or((&text, ""));
        // Together, the rows that match the line tell what its hint lines tell.
        let rows: Vec<_> = page_rows
            .iter()
            .filter(|row| {
                ticked(&row["message"])
                    .iter()
                    .any(|p| glob(p, first, false))
            })
            .collect();
        if rows.is_empty() {
            drift.push(format!(
                "{OPERATIONS}, \"Start-up errors\": no row matches {first:?}"
            ));
        }
        let advice: BTreeSet<String> = rows
            .iter()
            .flat_map(|row| rbac_paths(&row["what to do"].replace('`', "")))
            .collect();
        for path in rbac_paths(hints).difference(&advice) {
            drift.push(format!(
                "{OPERATIONS}, \"Start-up errors\": the rows for {first:?} do not name {path}, which the operator's hint names"
            ));
        }
    }
    drift.sort();
    drift.dedup();
    assert!(drift.is_empty(), "{}", drift.join("\n"));
}

// ---- printer columns -----------------------------------------------------------------------

/// A list of column names as the docs write it: `Browser, Version and Age` (parenthesised
/// remarks dropped); `None` when it is not a list of single words.
fn column_list(text: &str) -> Option<Vec<String>> {
    let text = text.trim().trim_start_matches("the columns ");
    let names: Vec<String> = text
        .replace(" and ", ",")
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    (!names.is_empty() && names.iter().all(|n| n.chars().all(char::is_alphanumeric)))
        .then_some(names)
}

/// Text without its parenthesised parts.
fn without_parentheses(text: &str) -> String {
    let mut depth = 0usize;
    text.chars()
        .filter(|c| {
            match c {
                '(' => depth += 1,
                ')' => depth = depth.saturating_sub(1),
                _ => return depth == 0,
            }
            false
        })
        .collect()
}

#[test]
fn the_columns_the_docs_name_are_the_printer_columns_of_the_crds() {
    let mut drift = Vec::new();
    let crds = crd::crds(Layout::Default);
    // Short name → (columns by default, columns `-o wide` adds), in the CRD's order.
    let mut kinds: BTreeMap<String, (Vec<String>, Vec<String>)> = BTreeMap::new();
    for crd in &crds {
        let short = crd["spec"]["names"]["shortNames"][0]
            .as_str()
            .expect("a short name")
            .to_string();
        let mut columns = (Vec::new(), Vec::new());
        for column in crd["spec"]["versions"][0]["additionalPrinterColumns"]
            .as_array()
            .expect("printer columns")
        {
            let name = column["name"].as_str().expect("a column name").to_string();
            if column["priority"].as_i64().unwrap_or(0) == 0 {
                columns.0.push(name);
            } else {
                columns.1.push(name);
            }
        }
        kinds.insert(short, columns);
    }
    let same = |docs: &[String], crd: &[String]| {
        docs.len() == crd.len() && docs.iter().zip(crd).all(|(d, c)| d.eq_ignore_ascii_case(c))
    };
    let mut described = BTreeSet::new();
    for page in pages() {
        let text = read(&page);
        let mut last_get: Option<(String, bool)> = None;
        for piece in pieces(&text) {
            match piece {
                // "`kubectl get brw` shows the columns A, B and C; `-o wide` adds D."
                Piece::Prose {
                    first_line,
                    text: prose,
                } => {
                    let text = prose.replace('\n', " ");
                    for (short, (normal, wide)) in &kinds {
                        let lead = format!("`kubectl get {short}` shows ");
                        for (at, _) in text.match_indices(&lead) {
                            let line = first_line + prose[..at].matches('\n').count();
                            let rest = without_parentheses(&text[at + lead.len()..]);
                            let end = rest.find(['.', ';']).unwrap_or(rest.len());
                            let Some(shown) = column_list(&rest[..end]) else {
                                continue;
                            };
                            described.insert(short.clone());
                            let after = rest[end..].trim_start_matches([';', ' ']);
                            let added = after
                                .strip_prefix("`-o wide` adds ")
                                .and_then(|w| column_list(&w[..w.find('.').unwrap_or(w.len())]))
                                .unwrap_or_default();
                            if !same(&shown, normal) || !same(&added, wide) {
                                drift.push(format!(
                                    "{page}:{line}: `kubectl get {short}` shows {normal:?} and with -o wide adds {wide:?}; the docs say {shown:?} and {added:?}"
                                ));
                            }
                        }
                    }
                }
                // A table printed by `kubectl get <short name>`: its header.
                Piece::Code { line, text } => {
                    for (offset, l) in text.lines().enumerate() {
                        if let Some(rest) = l.split("kubectl get ").nth(1) {
                            let short = rest.split_whitespace().next().unwrap_or_default();
                            last_get = kinds
                                .contains_key(short)
                                .then(|| (short.to_string(), l.contains("-o wide")));
                        } else if let Some((short, wide)) = &last_get
                            && l.split_whitespace().next() == Some("NAME")
                        {
                            let (normal, added) = &kinds[short];
                            let mut expected = normal.clone();
                            if *wide {
                                expected.extend(added.iter().cloned());
                            }
                            let header: Vec<String> =
                                l.split_whitespace().skip(1).map(str::to_string).collect();
                            if !same(&header, &expected) {
                                drift.push(format!(
                                    "{page}:{}: `kubectl get {short}` prints the columns NAME {expected:?}, the docs show {header:?}",
                                    line + 1 + offset
                                ));
                            }
                        }
                    }
                }
            }
        }
    }
    for short in kinds.keys().filter(|s| !described.contains(*s)) {
        drift.push(format!(
            "no page says which columns `kubectl get {short}` shows (\"`kubectl get {short}` shows the columns …\")"
        ));
    }
    assert!(drift.is_empty(), "{}", drift.join("\n"));
}

// ---- InvalidConfig messages ----------------------------------------------------------------

const BEHAVIOUR: &str = "docs/behaviour.md";

/// The `InvalidConfig` message of a chrome 139.0 Browser against one BrowserConfig `chrome`
/// with `spec`, the cluster's dry run answering `rejected` (as the docs' examples name them).
fn invalid_config_message(spec: serde_json::Value, rejected: Option<&str>) -> String {
    let browser: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "selenosis.io/v1", "kind": "Browser",
        "metadata": {"name": "s1", "namespace": "selenosis", "uid": "u1"},
        "spec": {"browserName": "chrome", "browserVersion": "139.0"},
    }))
    .expect("a valid Browser");
    let config: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "selenosis.io/v1", "kind": "BrowserConfig",
        "metadata": {"name": "chrome", "namespace": "selenosis",
            "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": spec,
    }))
    .expect("a valid BrowserConfig");
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("selenosis.io", "v1", "Browser"),
        "browsers",
    );
    let outcome = desired::pod_for(
        &browser,
        &[config],
        &resource,
        &Policy::default(),
        None,
        |_, _, _| rejected.map(str::to_string),
    );
    match outcome {
        PodCreation::Fail(f) if f.reason == Reason::InvalidConfig.as_str() => f.message,
        PodCreation::Fail(f) => panic!("expected InvalidConfig, got {}: {}", f.reason, f.message),
        PodCreation::Render { .. } => panic!("expected InvalidConfig, got a pod"),
    }
}

#[test]
fn every_invalid_config_message_has_a_documented_format() {
    let image = "selenium/standalone-chrome:139.0";
    let entry = |extra: serde_json::Value| {
        let mut entry = json!({"image": image});
        if let (Some(entry), Some(extra)) = (entry.as_object_mut(), extra.as_object()) {
            entry.extend(extra.clone());
        }
        json!({"browsers": {"chrome": {"139.0": entry}}})
    };
    // One Browser for each way pod_for fails with InvalidConfig.
    let messages = [
        // A local check.
        invalid_config_message(entry(json!({"sidecars": {}})), None),
        // The cluster's dry run.
        invalid_config_message(
            entry(json!({})),
            Some("admission webhook \"policy.example.com\" denied the request"),
        ),
        // No image once merged.
        invalid_config_message(json!({"browsers": {"chrome": {"139.0": null}}}), None),
        // A tier that is no map.
        invalid_config_message(
            json!({"template": [], "browsers": {"chrome": {"139.0": {"image": image}}}}),
            None,
        ),
        // A field of the wrong type, found while rendering.
        invalid_config_message(entry(json!({"labels": {"app": 1}})), None),
        // Above the pod security ceiling.
        invalid_config_message(entry(json!({"privileged": true})), None),
    ];
    let page = read(BEHAVIOUR);
    let (header, rows) = first_table(section_of(BEHAVIOUR, &sections(&page), "Messages"));
    assert_eq!(header, ["reason", "message"], "{BEHAVIOUR}, \"Messages\"");
    // The formats: code spans of several words in the rows of InvalidConfig.
    let formats: Vec<String> = rows
        .iter()
        .filter(|row| ticked(&row["reason"]).contains(&Reason::InvalidConfig.as_str().to_string()))
        .flat_map(|row| ticked(&row["message"]))
        .filter(|span| span.matches(' ').count() >= 2)
        .collect();
    let mut drift = Vec::new();
    for message in &messages {
        if !formats.iter().any(|f| glob(f, message, true)) {
            drift.push(format!(
                "{BEHAVIOUR}, \"Messages\": no InvalidConfig format matches {message:?}"
            ));
        }
    }
    for format in formats.iter().filter(|f| f.contains(['<', '…'])) {
        if !messages.iter().any(|m| glob(format, m, true)) {
            drift.push(format!(
                "{BEHAVIOUR}, \"Messages\": the InvalidConfig format {format:?} matches no message the operator writes"
            ));
        }
    }
    assert!(drift.is_empty(), "{}", drift.join("\n"));
}

// ---- start-up errors -----------------------------------------------------------------------

const BIN: &str = env!("CARGO_BIN_EXE_browser-controller");

/// Runs the operator against an API server address nobody listens on, with `flags`: its
/// stderr, as it reads with the default `--startup-timeout` (the run waits 1 s, not 2 m).
fn run_unreachable(flags: &[&str]) -> String {
    let dir = TempDir::new("docs-unreachable");
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:{}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user: {{}}\n",
            free_port()
        ),
    )
    .expect("kubeconfig written");
    let log = dir.join("stderr");
    let mut child = std::process::Command::new(BIN)
        .args([
            "--metrics-addr=0",
            "--health-probe-bind-address=0",
            "--startup-timeout=1s",
        ])
        .args(flags)
        .env("KUBECONFIG", &kubeconfig)
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("the binary starts");
    let Some(status) = host::wait_exit(&mut child, std::time::Duration::from_secs(20)) else {
        host::kill(&mut child);
        panic!("the operator did not exit");
    };
    assert!(!status.success(), "the operator exited 0");
    std::fs::read_to_string(&log)
        .expect("stderr")
        .replace("--startup-timeout=1s)", "--startup-timeout=2m0s)")
}

/// Where the real JSON record differs from the docs' example, whose strings may hold `…`.
fn json_difference(path: &str, shown: &serde_json::Value, real: &serde_json::Value) -> Vec<String> {
    use serde_json::Value;
    match (shown, real) {
        (Value::Object(s), Value::Object(r)) => {
            let keys: BTreeSet<&String> = s.keys().chain(r.keys()).collect();
            keys.into_iter()
                .flat_map(|k| match (s.get(k), r.get(k)) {
                    (Some(s), Some(r)) => json_difference(&format!("{path}.{k}"), s, r),
                    (Some(_), None) => vec![format!("{path}.{k}: not in the real record")],
                    _ => vec![format!("{path}.{k}: missing from the example")],
                })
                .collect()
        }
        (Value::String(s), Value::String(r)) if glob(s, r, false) => Vec::new(),
        (s, r) if s == r => Vec::new(),
        (s, r) => vec![format!(
            "{path}: the example has {s}, the operator prints {r}"
        )],
    }
}

#[test]
fn start_up_errors_look_as_the_docs_show_them_in_either_log_format() {
    let page = read(OPERATIONS);
    let page_sections = sections(&page);
    let body = section_of(OPERATIONS, &page_sections, "Start-up");
    let blocks: Vec<String> = pieces(body)
        .into_iter()
        .filter_map(|piece| match piece {
            Piece::Code { text, .. } => Some(text),
            Piece::Prose { .. } => None,
        })
        .collect();
    let text_example = blocks
        .iter()
        .find(|b| b.lines().all(|l| l.starts_with(TEXT_PREFIX)))
        .unwrap_or_else(|| panic!("{OPERATIONS}: \"Start-up\" shows no start-up error as text"));
    let json_example = blocks
        .iter()
        .find(|b| b.trim_start().starts_with('{'))
        .unwrap_or_else(|| {
            panic!("{OPERATIONS}: \"Start-up\" shows no start-up error as a JSON record")
        });

    // The warnings of the attempts before come first; the error is what the example shows.
    let text = run_unreachable(&[]);
    let (shown, real): (Vec<&str>, Vec<&str>) = (
        text_example.lines().collect(),
        text.lines()
            .filter(|l| l.starts_with(TEXT_PREFIX))
            .collect(),
    );
    assert!(
        shown.len() == real.len() && shown.iter().zip(&real).all(|(s, r)| glob(s, r, false)),
        "{OPERATIONS}, \"Start-up\": the text example is not what the operator prints:\n{}",
        first_difference(text_example, &text, "the operator prints")
    );

    let json = run_unreachable(&["--log-format=json"]);
    let records: Vec<serde_json::Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .filter(|r: &serde_json::Value| r["level"] != "WARN")
        .collect();
    let example: serde_json::Value = serde_json::from_str(json_example.trim())
        .unwrap_or_else(|e| panic!("{OPERATIONS}, \"Start-up\": the JSON example: {e}"));
    assert_eq!(records.len(), 1, "one record for a start-up error:\n{json}");
    let difference = json_difference("", &example, &records[0]);
    assert!(
        difference.is_empty(),
        "{OPERATIONS}, \"Start-up\": the JSON example is not what the operator prints:\n{}",
        difference.join("\n")
    );

    // The message is a row of the troubleshooting table.
    let message = real
        .first()
        .and_then(|l| l.strip_prefix(TEXT_PREFIX))
        .unwrap_or_default()
        .to_string();
    let undocumented = undocumented_start_up_errors([&message]);
    assert!(undocumented.is_empty(), "{}", undocumented.join("\n"));
}

/// `--flag=value` of a message as `--flag`.
fn without_values(text: &str) -> String {
    text.split(' ')
        .map(|word| match word.split_once('=') {
            Some((flag, _)) if flag.starts_with("--") => flag,
            _ => word,
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn the_lease_timing_rules_are_documented_as_the_operator_enforces_them() {
    use std::time::Duration;
    // Durations around every bound the rules might have.
    let probes = [0, 500, 1000, 1500, 2000, 3000, 10_000, 15_000].map(Duration::from_millis);
    let mut messages: BTreeMap<(String, String), String> = BTreeMap::new();
    for lease in probes {
        for renew in probes {
            for retry in probes {
                let Err(e) = Timing::new(lease, renew, retry) else {
                    continue;
                };
                let message = e.to_string();
                let flag = long_flags(&message).into_iter().next().unwrap_or_default();
                let rule = message
                    .split_once(" must be ")
                    .map(|(_, rule)| without_values(rule))
                    .unwrap_or_default();
                messages.entry((flag, rule)).or_insert(message);
            }
        }
    }
    assert!(
        messages.len() >= 3,
        "expected a rule per timing flag: {messages:?}"
    );
    let page = read(OPERATIONS);
    let (_, rows) = first_table(section_of(
        OPERATIONS,
        &sections(&page),
        "Flags and environment",
    ));
    let mut drift = Vec::new();
    let flags: BTreeSet<&String> = messages.keys().map(|(flag, _)| flag).collect();
    for flag in flags {
        let enforced: BTreeSet<&String> = messages
            .keys()
            .filter(|(f, _)| f == flag)
            .map(|(_, rule)| rule)
            .collect();
        let row = rows
            .iter()
            .find(|row| ticked(&row["flag"]).first() == Some(flag))
            .unwrap_or_else(|| panic!("{OPERATIONS}: no row for {flag}"));
        let meaning = row["meaning"].replace('`', "");
        let documented: BTreeSet<String> = meaning
            .split(';')
            .filter_map(|clause| clause.trim().strip_prefix("must be "))
            .map(str::to_string)
            .collect();
        let documented: BTreeSet<&String> = documented.iter().collect();
        if documented != enforced {
            drift.push(format!(
                "{OPERATIONS}, \"Flags and environment\": {flag} must be {enforced:?}, the docs say {documented:?}"
            ));
        }
    }
    drift.extend(undocumented_start_up_errors(messages.values()));
    assert!(drift.is_empty(), "{}", drift.join("\n"));
}

// ---- claims about the Go controller and the render help ------------------------------------

/// The rules the selenosis Helm chart's ClusterRole must gain (`deploy/HELM-VALUES.md`, the
/// rows whose action is plainly "add"), each as (group, resource).
fn rules_the_chart_lacks() -> Vec<(String, String)> {
    let page = "deploy/HELM-VALUES.md";
    let text = read(page);
    let page_sections = sections(&text);
    let (_, body) = page_sections
        .iter()
        .find(|(h, _)| h.starts_with("RBAC"))
        .unwrap_or_else(|| panic!("{page}: no RBAC section"));
    let (header, rows) = first_table(body);
    let rule = header.first().expect("a table of rules");
    rows.iter()
        .filter(|row| row.get("action").map(|a| a.trim_matches('*')) == Some("add"))
        .filter_map(|row| {
            let names = ticked(row.get(rule)?);
            // `""` is the core group.
            let group = names.first()?.trim_matches('"').to_string();
            Some((group, names.get(1)?.clone()))
        })
        .collect()
}

/// Paragraphs of prose (blank-line separated), each table row on its own.
fn paragraphs(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for piece in pieces(text) {
        let Piece::Prose { text, .. } = piece else {
            continue;
        };
        for paragraph in text.split("\n\n") {
            if paragraph.trim_start().starts_with('|') {
                out.extend(paragraph.lines().map(str::to_string));
            } else {
                out.push(paragraph.to_string());
            }
        }
    }
    out
}

#[test]
fn a_drop_in_claim_names_the_rbac_rules_the_go_controller_lacks() {
    let lacking = rules_the_chart_lacks();
    assert!(
        !lacking.is_empty(),
        "deploy/HELM-VALUES.md names no rule to add"
    );
    // Only what the operator asks for belongs there, in either layout.
    let split = kinds(Layout::SplitGroups);
    let required = permissions::required(&split, &[]);
    for (group, resource) in &lacking {
        assert!(
            required
                .iter()
                .any(|a| a.group == *group && a.resource == *resource),
            "deploy/HELM-VALUES.md: the operator does not need {group} {resource}"
        );
    }
    let mut claims = 0;
    let mut drift = Vec::new();
    for page in pages() {
        for paragraph in paragraphs(&read(&page)) {
            if !paragraph.to_lowercase().contains("drop-in") {
                continue;
            }
            claims += 1;
            for (group, resource) in &lacking {
                // A core-group rule is named by its resource.
                let name = if group.is_empty() { resource } else { group };
                if !paragraph.contains(name.as_str()) {
                    drift.push(format!(
                        "{page}: calls the operator a drop-in replacement without naming the {name} rule the Go controller's RBAC lacks:\n{}",
                        paragraph.trim()
                    ));
                }
            }
        }
    }
    assert!(
        claims > 0,
        "no page says the operator is a drop-in replacement"
    );
    assert!(drift.is_empty(), "{}", drift.join("\n"));
}

/// The help of one option in clap's long help: its line and the indented lines below it.
fn option_help(help: &str, flag: &str) -> Option<String> {
    let mut current: Option<(bool, String)> = None;
    let mut found = None;
    for line in help.lines() {
        let indent = line.len() - line.trim_start().len();
        if line.trim_start().starts_with('-') && indent <= 6 {
            if let Some((true, text)) = current.take() {
                found = Some(text);
            }
            current = Some((
                long_flags(line).contains(&flag.to_string()),
                line.to_string(),
            ));
        } else if let Some((_, text)) = current.as_mut() {
            text.push(' ');
            text.push_str(line.trim());
        }
    }
    if let Some((true, text)) = current {
        found = Some(text);
    }
    found
}

#[test]
fn render_help_and_docs_say_when_the_browser_file_is_required() {
    let mut root = Cli::command();
    root.build();
    let render = root
        .find_subcommand("render")
        .expect("a render subcommand")
        .clone();
    let parse = |extra: &[&str]| {
        let mut args = vec!["render", "--config", "c.yaml"];
        args.extend_from_slice(extra);
        render.clone().try_get_matches_from(args)
    };
    // Which option `render --config FILE` alone lacks.
    let missing = parse(&[]).expect_err("render needs more than --config");
    assert_eq!(
        missing.kind(),
        clap::error::ErrorKind::MissingRequiredArgument
    );
    let needed = match missing.get(clap::error::ContextKind::InvalidArg) {
        Some(clap::error::ContextValue::Strings(names)) => long_flags(&names.join(" ")),
        other => panic!("no missing argument named: {other:?}"),
    };
    assert_eq!(needed.len(), 1, "{needed:?}");
    let needed = &needed[0];
    // The switches that make it unnecessary.
    let instead: Vec<String> = render
        .get_arguments()
        .filter(|arg| matches!(arg.get_action(), clap::ArgAction::SetTrue))
        .filter_map(|arg| arg.get_long().map(|l| format!("--{l}")))
        .filter(|switch| parse(&[switch.as_str()]).is_ok())
        .collect();
    assert!(
        !instead.is_empty(),
        "{needed} is required without exception"
    );

    let says_when = |text: &str| {
        text.to_lowercase().contains("required")
            && instead
                .iter()
                .all(|switch| long_flags(text).contains(switch))
    };
    let help = render.clone().render_long_help().to_string();
    let shown = option_help(&help, needed).unwrap_or_else(|| panic!("{needed} not in:\n{help}"));
    let mut drift = Vec::new();
    if !says_when(&shown) {
        drift.push(format!(
            "`render --help` does not say that {needed} is required unless {instead:?} is given: {shown:?}"
        ));
    }
    let page = read(OPERATIONS);
    let (_, rows) = first_table(section_of(OPERATIONS, &sections(&page), "`render`"));
    let row = rows
        .iter()
        .find(|row| ticked(&row["flag"]).first() == Some(needed))
        .unwrap_or_else(|| panic!("{OPERATIONS}: no row for {needed}"));
    let documented = format!("{} {}", row["flag"], row["meaning"]);
    if !says_when(&documented) {
        drift.push(format!(
            "{OPERATIONS}, \"`render`\": the row of {needed} does not say that it is required unless {instead:?} is given"
        ));
    }
    assert!(drift.is_empty(), "{}", drift.join("\n"));
}
