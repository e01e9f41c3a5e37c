//! Lookup with its tiers (docs/configuration.md, "Lookup", "Tiers and merge rules"): which
//! BrowserConfig entry a browser name and version resolve to, among the BrowserConfigs of one
//! namespace (the caller filters).
//!
//! Within a config, browser and version keys match case-insensitively; when several keys
//! are equal ignoring case, the exact-case key is used, else the lexicographically
//! smallest. An explicit version entry resolves; the `"*"` entry alone resolves any
//! version only if it carries an `image` itself.
//!
//! Across configs, the configs are ranked oldest first (`creationTimestamp`, then name; a
//! missing timestamp sorts last). An explicit entry beats a `"*"` entry whatever their
//! ages, exactly as within one config: the winner for a pair is the first ranked config
//! with an explicit entry for it, and only when none has one, the first ranked config
//! whose `"*"` entry resolves it. So each (browser, version) key — `"*"` being a key of
//! its own — belongs to the oldest config defining it, which is what [`conflicts`]
//! reports, and a newer config adding a specific version is never silently shadowed by
//! an older catch-all.

use std::borrow::Borrow;
use std::collections::BTreeMap;

use kube_core::DynamicObject;
use serde_json::{Map, Value};

use super::merge::merge_tiers;

/// Version key of the browser-level defaults (docs/configuration.md, "Tiers and merge rules").
pub const WILDCARD: &str = "*";
/// Placeholder in `image` replaced by the requested version.
pub const VERSION_PLACEHOLDER: &str = "{version}";

/// The entry a browser name and version resolve to.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    /// Name of the BrowserConfig the entry comes from.
    pub config_name: String,
    /// The merged tiers, `{version}` in `image` replaced by the requested version.
    pub entry: Value,
}

/// Why a browser name and version do not resolve to a usable entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    /// No config defines the pair (message: docs/behaviour.md, "Messages").
    #[error("Browser configuration not found for browser \"{browser}\" version \"{version}\"")]
    NotFound {
        browser: String,
        version: String,
        /// Resolvable entries present, as sorted `name:version` (or `name:*`).
        available: Vec<String>,
    },
    /// The winning entry has no image after merging its tiers.
    #[error("BrowserConfig \"{config}\": entry {browser}:{version} has no image")]
    NoImage {
        config: String,
        browser: String,
        version: String,
    },
    /// A tier of the winning entry is neither an object nor empty.
    #[error("BrowserConfig \"{config}\": {path} is not an object")]
    NotAnObject { config: String, path: String },
}

/// A (browser, version) key defined by several configs: `loser` is ignored for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// Name of the config whose definition is ignored.
    pub loser: String,
    /// Name of the config that wins (the oldest).
    pub winner: String,
    /// Browser key as the loser spells it.
    pub browser: String,
    /// Version key as the loser spells it (`*` for browser-level entries).
    pub version: String,
}

/// Resolves `browser_name` / `browser_version` among the configs of one namespace.
pub fn resolve(
    configs: &[impl Borrow<DynamicObject>],
    browser_name: &str,
    browser_version: &str,
) -> Result<Resolved, LookupError> {
    let ranked = ranked(configs);
    let explicit = ranked.iter().copied().find_map(|config| {
        let (browser, versions) = browser_entry(config, browser_name)?;
        let version = explicit_key(versions, browser_version)?;
        Some((config, browser, version))
    });
    let found = explicit.or_else(|| {
        ranked.iter().copied().find_map(|config| {
            let (browser, versions) = browser_entry(config, browser_name)?;
            wildcard_resolves(versions).then_some((config, browser, WILDCARD))
        })
    });
    let Some((config, browser, version)) = found else {
        return Err(LookupError::NotFound {
            browser: browser_name.to_owned(),
            version: browser_version.to_owned(),
            available: available(configs),
        });
    };
    let entry =
        merged_entry(config, browser, version).map_err(|error| LookupError::NotAnObject {
            config: name(config).to_owned(),
            path: error.path,
        })?;
    let entry = with_version(entry, browser_version).ok_or_else(|| LookupError::NoImage {
        config: name(config).to_owned(),
        browser: browser.to_owned(),
        version: version.to_owned(),
    })?;
    Ok(Resolved {
        config_name: name(config).to_owned(),
        entry,
    })
}

/// Every (browser, version) key defined by more than one config, each loser with its
/// winner; ordered by browser and version (ignoring case), then by the losers' rank.
/// A `"*"` key counts only where it resolves versions (it carries an image).
pub fn conflicts(configs: &[impl Borrow<DynamicObject>]) -> Vec<Conflict> {
    // Keyed by browser and version in lower case; the value is the winner's name.
    let mut owners: BTreeMap<(String, String), &str> = BTreeMap::new();
    let mut conflicts = Vec::new();
    for config in ranked(configs) {
        let mut own: Vec<(String, String)> = Vec::new();
        for (browser, version) in resolvable_entries(config) {
            let key = (browser.to_lowercase(), version.to_lowercase());
            if own.contains(&key) {
                continue;
            }
            own.push(key.clone());
            match owners.get(&key) {
                Some(winner) => conflicts.push(Conflict {
                    loser: name(config).to_owned(),
                    winner: (*winner).to_owned(),
                    browser,
                    version,
                }),
                None => {
                    owners.insert(key, name(config));
                }
            }
        }
    }
    // Stable: losers of one key stay in rank order.
    conflicts.sort_by_cached_key(|conflict| {
        (
            conflict.browser.to_lowercase(),
            conflict.version.to_lowercase(),
        )
    });
    conflicts
}

/// The (browser, version) keys `config` defines, in document order, `"*"` included.
pub fn entries(config: &DynamicObject) -> Vec<(String, String)> {
    browsers(config)
        .into_iter()
        .flatten()
        .filter_map(|(browser, versions)| Some((browser, versions.as_object()?)))
        .flat_map(|(browser, versions)| {
            versions
                .keys()
                .map(move |version| (browser.clone(), version.clone()))
        })
        .collect()
}

/// The keys of `config` that resolve versions: explicit ones, and `"*"` with an image.
pub fn resolvable_entries(config: &DynamicObject) -> Vec<(String, String)> {
    entries(config)
        .into_iter()
        .filter(|(browser, version)| version != WILDCARD || wildcard_has_image(config, browser))
        .collect()
}

fn wildcard_has_image(config: &DynamicObject, browser: &str) -> bool {
    browsers(config)
        .and_then(|browsers| browsers.get(browser))
        .and_then(Value::as_object)
        .is_some_and(wildcard_resolves)
}

/// A tier that is neither an object nor empty (`null`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NotAnObject {
    /// Dotted path of the tier, e.g. `spec.browsers.chrome.120`.
    pub path: String,
}

/// The tiers of one entry merged (docs/configuration.md, "Tiers and merge rules"), `{version}`
/// left as is. `version_key` is an exact key of `browser_key`'s map, or `"*"` for the
/// browser-level entry alone.
pub(crate) fn merged_entry(
    config: &DynamicObject,
    browser_key: &str,
    version_key: &str,
) -> Result<Value, NotAnObject> {
    let versions = browsers(config)
        .and_then(|browsers| browsers.get(browser_key))
        .and_then(Value::as_object);
    let browser_path = format!("spec.browsers.{browser_key}");
    let mut tiers = vec![(
        "spec.template".to_owned(),
        spec(config).and_then(|spec| spec.get("template")),
    )];
    tiers.push((
        format!("{browser_path}.{WILDCARD}"),
        versions.and_then(|versions| versions.get(WILDCARD)),
    ));
    if version_key != WILDCARD {
        tiers.push((
            format!("{browser_path}.{version_key}"),
            versions.and_then(|versions| versions.get(version_key)),
        ));
    }
    let mut present = Vec::with_capacity(tiers.len());
    for (path, tier) in tiers {
        match tier {
            None | Some(Value::Null) => {}
            Some(tier @ Value::Object(_)) => present.push(tier),
            Some(_) => return Err(NotAnObject { path }),
        }
    }
    Ok(merge_tiers(present))
}

/// The entry with `{version}` in its image replaced, or `None` when it has no image.
pub(crate) fn with_version(mut entry: Value, version: &str) -> Option<Value> {
    let image = entry
        .get("image")
        .and_then(Value::as_str)
        .filter(|image| !image.trim().is_empty())?
        .replace(VERSION_PLACEHOLDER, version);
    entry["image"] = Value::String(image);
    Some(entry)
}

/// Configs oldest first: by `creationTimestamp` (missing last), then by name.
fn ranked(configs: &[impl Borrow<DynamicObject>]) -> Vec<&DynamicObject> {
    let mut ranked: Vec<&DynamicObject> = configs.iter().map(Borrow::borrow).collect();
    ranked.sort_by(|a, b| {
        let created = |config: &DynamicObject| config.metadata.creation_timestamp.clone();
        let (created_a, created_b) = (created(a), created(b));
        (created_a.is_none(), created_a, name(a)).cmp(&(created_b.is_none(), created_b, name(b)))
    });
    ranked
}

fn name(config: &DynamicObject) -> &str {
    config.metadata.name.as_deref().unwrap_or_default()
}

fn spec(config: &DynamicObject) -> Option<&Value> {
    config.data.get("spec")
}

fn browsers(config: &DynamicObject) -> Option<&Map<String, Value>> {
    spec(config)?.get("browsers")?.as_object()
}

/// The browser's key and its map of versions.
fn browser_entry<'a>(
    config: &'a DynamicObject,
    browser_name: &str,
) -> Option<(&'a str, &'a Map<String, Value>)> {
    let browsers = browsers(config)?;
    let key = matching_key(browsers, browser_name)?;
    Some((key, browsers.get(key)?.as_object()?))
}

/// The explicit version key matching `version`; `"*"` is never an explicit key.
fn explicit_key<'a>(versions: &'a Map<String, Value>, version: &str) -> Option<&'a str> {
    matching_key(versions, version).filter(|key| *key != WILDCARD)
}

/// Whether the `"*"` entry resolves versions alone: it carries a non-empty image.
fn wildcard_resolves(versions: &Map<String, Value>) -> bool {
    versions
        .get(WILDCARD)
        .and_then(|entry| entry.get("image"))
        .and_then(Value::as_str)
        .is_some_and(|image| !image.trim().is_empty())
}

/// The key equal to `wanted` ignoring case: the exact-case key if present, otherwise
/// the lexicographically smallest.
fn matching_key<'a>(map: &'a Map<String, Value>, wanted: &str) -> Option<&'a str> {
    if let Some((key, _)) = map.get_key_value(wanted) {
        return Some(key);
    }
    let wanted = wanted.to_lowercase();
    map.keys()
        .filter(|key| key.to_lowercase() == wanted)
        .min()
        .map(String::as_str)
}

/// The version key an entry was defined under: the explicit one, else `"*"`.
pub fn version_key(config: &DynamicObject, browser: &str, version: &str) -> String {
    let explicit = entries(config)
        .into_iter()
        .any(|(b, v)| b.eq_ignore_ascii_case(browser) && v.eq_ignore_ascii_case(version));
    if explicit {
        version.to_string()
    } else {
        WILDCARD.to_string()
    }
}

/// Resolvable entries of every config as sorted, distinct `browser:version` strings.
fn available(configs: &[impl Borrow<DynamicObject>]) -> Vec<String> {
    let mut available: Vec<String> = configs
        .iter()
        .flat_map(|c| resolvable_entries(c.borrow()))
        .map(|(browser, version)| format!("{browser}:{version}"))
        .collect();
    available.sort();
    available.dedup();
    available
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use serde_json::json;

    fn config(name: &str, created: Option<&str>, spec: Value) -> DynamicObject {
        let config = fixtures::config(name).namespace("ns").spec(spec);
        match created {
            Some(at) => config.created(at).object(),
            None => config.object(),
        }
    }

    const OLD: Option<&str> = Some("2026-01-01T00:00:00Z");
    const NEW: Option<&str> = Some("2026-02-01T00:00:00Z");

    fn image(resolved: &Resolved) -> &str {
        resolved.entry["image"].as_str().unwrap()
    }

    #[test]
    fn browser_and_version_match_ignoring_case() {
        let configs = [config(
            "a",
            OLD,
            json!({"browsers": {"Chrome": {"120.0-Beta": {"image": "c:beta"}}}}),
        )];
        let resolved = resolve(&configs, "chrome", "120.0-beta").unwrap();
        assert_eq!(resolved.config_name, "a");
        assert_eq!(image(&resolved), "c:beta");
    }

    #[test]
    fn exact_case_key_is_preferred_then_the_smallest() {
        let configs = [config(
            "a",
            OLD,
            json!({"browsers": {"chrome": {
                "b1": {"image": "lower"}, "B1": {"image": "upper"}, "bX": {"image": "x-upper"}, "Bx": {"image": "b-upper"}
            }}}),
        )];
        assert_eq!(image(&resolve(&configs, "chrome", "b1").unwrap()), "lower");
        assert_eq!(image(&resolve(&configs, "chrome", "B1").unwrap()), "upper");
        // No exact spelling: the smallest key, "Bx" < "bX".
        assert_eq!(
            image(&resolve(&configs, "chrome", "bx").unwrap()),
            "b-upper"
        );
    }

    #[test]
    fn tiers_merge_template_then_wildcard_then_version() {
        let configs = [config(
            "a",
            OLD,
            json!({
                "template": {"labels": {"t": "1", "w": "0", "v": "0"}, "env": [{"name": "A", "value": "t"}]},
                "browsers": {"chrome": {
                    "*": {"labels": {"w": "1", "v": "1"}, "env": [{"name": "B", "value": "w"}]},
                    "120": {"image": "c:120", "labels": {"v": "2"}, "env": [{"name": "A", "value": "v"}]}
                }}
            }),
        )];
        assert_eq!(
            resolve(&configs, "chrome", "120").unwrap().entry,
            json!({
                "labels": {"t": "1", "w": "1", "v": "2"},
                "env": [{"name": "A", "value": "v"}, {"name": "B", "value": "w"}],
                "image": "c:120"
            })
        );
    }

    #[test]
    fn wildcard_with_image_resolves_any_version() {
        let configs = [config(
            "a",
            OLD,
            json!({"browsers": {"chrome": {
                "*": {"image": "selenium/standalone-chrome:{version}"},
                "120": {"labels": {"pinned": "yes"}}
            }}}),
        )];
        let any = resolve(&configs, "chrome", "121.0").unwrap();
        assert_eq!(
            any.entry,
            json!({"image": "selenium/standalone-chrome:121.0"})
        );
        let explicit = resolve(&configs, "chrome", "120").unwrap();
        assert_eq!(
            explicit.entry,
            json!({"image": "selenium/standalone-chrome:120", "labels": {"pinned": "yes"}})
        );
    }

    #[test]
    fn wildcard_without_image_does_not_resolve() {
        let configs = [config(
            "a",
            OLD,
            json!({
                "template": {"image": "from-template"},
                "browsers": {"chrome": {"*": {"labels": {"x": "y"}}, "120": {"image": "c:120"}}}
            }),
        )];
        let error = resolve(&configs, "chrome", "121").unwrap_err();
        assert!(matches!(error, LookupError::NotFound { .. }), "{error:?}");
    }

    #[test]
    fn explicit_entry_without_image_is_reported() {
        let configs = [config(
            "a",
            OLD,
            json!({"browsers": {"chrome": {"120": {"labels": {}}}}}),
        )];
        let error = resolve(&configs, "chrome", "120").unwrap_err();
        assert_eq!(
            error,
            LookupError::NoImage {
                config: "a".into(),
                browser: "chrome".into(),
                version: "120".into()
            }
        );
        assert_eq!(
            error.to_string(),
            "BrowserConfig \"a\": entry chrome:120 has no image"
        );
    }

    #[test]
    fn empty_explicit_entry_lists_a_version_of_the_wildcard() {
        let configs = [config(
            "a",
            OLD,
            json!({"browsers": {"chrome": {"*": {"image": "c:{version}"}, "120": null}}}),
        )];
        assert_eq!(image(&resolve(&configs, "chrome", "120").unwrap()), "c:120");
    }

    #[test]
    fn tier_that_is_not_an_object_is_reported() {
        let configs = [config(
            "a",
            OLD,
            json!({"template": ["x"], "browsers": {"chrome": {"120": {"image": "c"}}}}),
        )];
        assert_eq!(
            resolve(&configs, "chrome", "120").unwrap_err(),
            LookupError::NotAnObject {
                config: "a".into(),
                path: "spec.template".into()
            }
        );
    }

    #[test]
    fn oldest_config_wins_then_name_and_missing_timestamp_last() {
        let entry = |image: &str| json!({"browsers": {"chrome": {"120": {"image": image}}}});
        let configs = [
            config("undated", None, entry("undated")),
            config("b", OLD, entry("b")),
            config("newer", NEW, entry("newer")),
            config("a", OLD, entry("a")),
        ];
        assert_eq!(resolve(&configs, "chrome", "120").unwrap().config_name, "a");
        assert_eq!(
            resolve(&configs[..1], "chrome", "120").unwrap().config_name,
            "undated"
        );
        assert_eq!(
            resolve(&configs[..3], "chrome", "120").unwrap().config_name,
            "b"
        );
        let undated_and_newer = [configs[0].clone(), configs[2].clone()];
        assert_eq!(
            resolve(&undated_and_newer, "chrome", "120")
                .unwrap()
                .config_name,
            "newer"
        );
    }

    #[test]
    fn explicit_entry_beats_an_older_wildcard() {
        let configs = [
            config(
                "catch-all",
                OLD,
                json!({"browsers": {"chrome": {"*": {"image": "generic:{version}"}}}}),
            ),
            config(
                "pinned",
                NEW,
                json!({"browsers": {"Chrome": {"120": {"image": "special:120"}}}}),
            ),
        ];
        let pinned = resolve(&configs, "chrome", "120").unwrap();
        assert_eq!(
            (pinned.config_name.as_str(), image(&pinned)),
            ("pinned", "special:120")
        );
        let other = resolve(&configs, "chrome", "121").unwrap();
        assert_eq!(
            (other.config_name.as_str(), image(&other)),
            ("catch-all", "generic:121")
        );
        assert!(conflicts(&configs).is_empty());
    }

    #[test]
    fn losers_are_reported_with_the_winner() {
        let configs = [
            config(
                "c",
                NEW,
                json!({"browsers": {"Chrome": {"120": {"image": "x"}, "*": {"image": "x:{version}"}}}}),
            ),
            config(
                "b",
                OLD,
                json!({"browsers": {"chrome": {"120": {"image": "x"}, "*": {"labels": {}}}}}),
            ),
            config(
                "a",
                OLD,
                json!({"browsers": {"chrome": {"120": {"image": "x"}, "*": {"image": "y"}}, "firefox": {"1": {}}}}),
            ),
            config("d", NEW, json!({"browsers": {"firefox": {"2": {}}}})),
        ];
        let conflict = |loser: &str, winner: &str, browser: &str, version: &str| Conflict {
            loser: loser.into(),
            winner: winner.into(),
            browser: browser.into(),
            version: version.into(),
        };
        assert_eq!(
            conflicts(&configs),
            vec![
                conflict("c", "a", "Chrome", "*"),
                conflict("b", "a", "chrome", "120"),
                conflict("c", "a", "Chrome", "120"),
            ]
        );
    }

    #[test]
    fn not_found_lists_available_entries() {
        let configs = [
            config(
                "a",
                OLD,
                json!({"browsers": {"firefox": {"*": {"image": "f:{version}"}}, "chrome": {"120": {}, "*": {}}}}),
            ),
            config(
                "b",
                NEW,
                json!({"browsers": {"chrome": {"119": {}, "120": {}}}}),
            ),
        ];
        let error = resolve(&configs, "edge", "1").unwrap_err();
        assert_eq!(
            error,
            LookupError::NotFound {
                browser: "edge".into(),
                version: "1".into(),
                available: vec!["chrome:119".into(), "chrome:120".into(), "firefox:*".into()],
            }
        );
        let message = error.to_string();
        assert!(
            message.starts_with("Browser configuration not found"),
            "{message}"
        );
        assert!(
            message.contains("\"edge\"") && message.contains("\"1\""),
            "{message}"
        );
    }

    #[test]
    fn entries_are_listed_in_document_order() {
        let a = config(
            "a",
            OLD,
            json!({"browsers": {"zeta": {"2": {}, "*": {}}, "alpha": {"1": {}}, "bad": "x"}}),
        );
        assert_eq!(
            entries(&a),
            vec![
                ("zeta".to_owned(), "2".to_owned()),
                ("zeta".to_owned(), "*".to_owned()),
                ("alpha".to_owned(), "1".to_owned())
            ]
        );
    }
}
