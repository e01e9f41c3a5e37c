//! The released CRD sets kept under `testdata/crd-history/<release>/` (the split-group layout
//! in its `split-groups/`): what `crds/` must replace with stored objects in place.

use std::path::{Path, PathBuf};

use browser_controller::api::crd::Layout;
use serde_json::Value;

/// One layout of one released set.
pub struct ReleasedSet {
    pub release: String,
    pub layout: Layout,
    pub crds: Vec<Value>,
}

/// Every released set, oldest release first, the default layout before the split one.
pub fn released_sets() -> Vec<ReleasedSet> {
    let root = crate::repo().join("testdata/crd-history");
    let mut releases: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .map(|e| e.unwrap().path())
        .collect();
    releases.sort();
    releases
        .iter()
        .flat_map(|dir| {
            let release = dir.file_name().unwrap().to_string_lossy().into_owned();
            [
                (Layout::Default, dir.clone()),
                (Layout::SplitGroups, dir.join("split-groups")),
            ]
            .map(|(layout, dir)| ReleasedSet {
                release: release.clone(),
                layout,
                crds: read_yaml_dir(&dir),
            })
        })
        .collect()
}

/// The documents of the YAML files directly in `dir`, in file name order.
fn read_yaml_dir(dir: &Path) -> Vec<Value> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
        .iter()
        .flat_map(|f| browser_controller::manifest::read_file(f).unwrap())
        .collect()
}
