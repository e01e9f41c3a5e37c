//! The layout the architecture page promises, checked against the tree: the module map of
//! `docs/architecture.md` names every source file and nothing that is gone, no module depends
//! on one that depends on it, and the core crate stays without an async runtime, a kube
//! client or a clock.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The crates' source folders: (folder, crate name).
const CRATES: [(&str, &str); 3] = [
    ("crates/core/src", "core"),
    ("src", "binary"),
    ("crates/testkit/src", "testkit"),
];

fn sources() -> Vec<String> {
    let mut relative: Vec<String> = CRATES
        .iter()
        .flat_map(|(dir, _)| testkit::rust_files(&repo().join(dir)))
        .map(|f| f.strip_prefix(repo()).unwrap().display().to_string())
        .collect();
    relative.sort();
    relative
}

/// The module map: each entry's path and its text (the description and its continuation
/// lines).
fn module_map() -> BTreeMap<String, String> {
    let page = std::fs::read_to_string(repo().join("docs/architecture.md")).unwrap();
    let section = page
        .split("## Module map")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("docs/architecture.md has a section \"Module map\"");
    let block = section
        .split("```")
        .nth(1)
        .expect("the module map is a code block");
    let mut entries = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in block.lines() {
        if line.starts_with(' ') {
            if let Some(path) = &current {
                let text: &mut String = entries.get_mut(path).unwrap();
                text.push(' ');
                text.push_str(line.trim());
            }
        } else if let Some((path, text)) = line.split_once(' ') {
            entries.insert(path.to_string(), text.trim().to_string());
            current = Some(path.to_string());
        }
    }
    entries
}

#[test]
fn the_module_map_names_every_source_file_and_only_what_exists() {
    let map = module_map();
    let mut problems = Vec::new();
    for path in map.keys() {
        if !repo().join(path).exists() {
            problems.push(format!("the module map names {path}, which does not exist"));
        }
    }
    for file in sources() {
        // A folder's entry describes its mod.rs: the folder stands for the file.
        let file = match file.strip_suffix("mod.rs") {
            Some(folder) => folder.to_string(),
            None => file,
        };
        if map.contains_key(&file) {
            continue;
        }
        // Named in the entry of the nearest folder above it, by its path below that folder.
        let named = Path::new(file.trim_end_matches('/'))
            .ancestors()
            .skip(1)
            .find_map(|dir| {
                let key = format!("{}/", dir.display());
                let text = map.get(&key)?;
                let below = Path::new(&file)
                    .strip_prefix(dir)
                    .ok()?
                    .display()
                    .to_string();
                let name = Path::new(&file).file_name()?.to_string_lossy().to_string();
                Some(
                    text.contains(&below)
                        || text.contains(&format!("({name}"))
                        || text.contains(&format!(" {name}")),
                )
            });
        if named != Some(true) {
            problems.push(format!("the module map does not name {file}"));
        }
    }
    assert!(
        problems.is_empty(),
        "docs/architecture.md, \"Module map\":\n{}",
        problems.join("\n")
    );
}

/// The top-level module a source file belongs to: `src/controller/watch.rs` → `controller`.
fn top_module(dir: &str, file: &str) -> Option<String> {
    let below = file.strip_prefix(dir)?.trim_start_matches('/');
    let first = below.split('/').next()?;
    let name = first.trim_end_matches(".rs");
    (!matches!(name, "lib" | "main")).then(|| name.to_string())
}

/// Every module path a source names through `crate::`, inside `use` lists too.
fn crate_paths(source: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = source;
    while let Some(at) = rest.find("crate::") {
        let after = &rest[at + "crate::".len()..];
        let preceded_by_ident = rest[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_');
        if !preceded_by_ident {
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            if !name.is_empty() {
                found.insert(name);
            }
            if after.starts_with('{') {
                let list = &after[1..after.find('}').unwrap_or(after.len())];
                for item in list.split(',') {
                    let name: String = item
                        .trim()
                        .chars()
                        .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                        .collect();
                    if !name.is_empty() {
                        found.insert(name);
                    }
                }
            }
        }
        rest = after;
    }
    found
}

/// The graph of top-level modules of one crate: module → the modules it uses.
fn dependencies(dir: &str) -> BTreeMap<String, BTreeSet<String>> {
    let files: Vec<String> = sources()
        .into_iter()
        .filter(|f| f.starts_with(&format!("{dir}/")))
        .collect();
    let modules: BTreeSet<String> = files.iter().filter_map(|f| top_module(dir, f)).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = modules
        .iter()
        .map(|m| (m.clone(), BTreeSet::new()))
        .collect();
    for file in &files {
        let Some(module) = top_module(dir, file) else {
            continue;
        };
        let source = std::fs::read_to_string(repo().join(file)).unwrap();
        for used in crate_paths(&source) {
            if used != module && modules.contains(&used) {
                graph.get_mut(&module).unwrap().insert(used);
            }
        }
    }
    graph
}

/// A cycle through `start`, if there is one.
fn cycle_through(graph: &BTreeMap<String, BTreeSet<String>>, start: &str) -> Option<Vec<String>> {
    let mut stack = vec![vec![start.to_string()]];
    let mut seen = BTreeSet::new();
    while let Some(path) = stack.pop() {
        let last = path.last()?;
        for next in graph.get(last).into_iter().flatten() {
            if next == start {
                let mut cycle = path.clone();
                cycle.push(start.to_string());
                return Some(cycle);
            }
            if seen.insert(next.clone()) {
                let mut longer = path.clone();
                longer.push(next.clone());
                stack.push(longer);
            }
        }
    }
    None
}

#[test]
fn no_module_depends_on_one_that_depends_on_it() {
    let mut cycles = Vec::new();
    for (dir, name) in CRATES {
        let graph = dependencies(dir);
        assert!(graph.len() > 3, "{dir}: found only {graph:?}");
        for module in graph.keys() {
            if let Some(cycle) = cycle_through(&graph, module) {
                cycles.push(format!("{name} crate: {}", cycle.join(" -> ")));
            }
        }
    }
    assert!(cycles.is_empty(), "module cycles:\n{}", cycles.join("\n"));
}

#[test]
fn the_cycle_check_finds_a_cycle() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("api", vec!["names"]),
        ("names", vec![]),
        ("pod", vec!["api", "lifecycle"]),
        ("lifecycle", vec!["pod"]),
    ]
    .into_iter()
    .map(|(m, used)| (m.to_string(), used.into_iter().map(String::from).collect()))
    .collect();
    assert_eq!(cycle_through(&graph, "api"), None);
    assert_eq!(
        cycle_through(&graph, "pod"),
        Some(vec!["pod".into(), "lifecycle".into(), "pod".into()])
    );
    assert_eq!(
        crate_paths(
            "use crate::{api::keys, names};\nlet x = crate::pod::render();\nfoo_crate::bar"
        ),
        ["api", "names", "pod"]
            .into_iter()
            .map(String::from)
            .collect()
    );
}

/// Dependencies of the core crate that would let it talk to the network or wait: an async
/// runtime, an HTTP stack, or kube's client.
const NOT_IN_THE_CORE: [&str; 7] = [
    "tokio",
    "kube",
    "kube-client",
    "kube-runtime",
    "hyper",
    "tower",
    "reqwest",
];

#[test]
fn the_core_crate_has_no_runtime_client_or_network() {
    let manifest = std::fs::read_to_string(repo().join("crates/core/Cargo.toml")).unwrap();
    let dependencies = manifest
        .split("[dependencies]")
        .nth(1)
        .and_then(|rest| rest.split("\n[").next())
        .expect("crates/core/Cargo.toml has [dependencies]");
    let names: Vec<&str> = dependencies
        .lines()
        .filter_map(|l| l.split_once('=').map(|(name, _)| name.trim()))
        .collect();
    assert!(names.contains(&"kube-core"), "{names:?}");
    for name in NOT_IN_THE_CORE {
        assert!(!names.contains(&name), "the core crate depends on {name}");
    }
    // Nor does any source of the core read the clock.
    let mut clocks = Vec::new();
    for file in sources().iter().filter(|f| f.starts_with("crates/core/")) {
        let source = std::fs::read_to_string(repo().join(file)).unwrap();
        for needle in [
            "Timestamp::now",
            "SystemTime::now",
            "Instant::now",
            "Zoned::now",
        ] {
            if source.contains(needle) {
                clocks.push(format!("{file}: {needle}"));
            }
        }
    }
    assert!(
        clocks.is_empty(),
        "the core reads the clock:\n{}",
        clocks.join("\n")
    );
}
