//! The CRDs as YAML: the `crds` command's output and the files under `crds/`.

use std::path::PathBuf;

use super::{CrdError, Features, Layout, crds_with};

/// The CRDs of a layout as multi-document YAML, every document starting with `---`, so
/// that the output with [`Features::PORTABLE`] is the concatenation of the layout's files.
pub fn to_yaml(layout: Layout, features: Features) -> Result<String, CrdError> {
    Ok(documents(layout, features)?
        .into_iter()
        .map(|(_, text)| text)
        .collect())
}

/// Every CRD file of `crds/`: path relative to that directory, and content.
pub fn files() -> Result<Vec<(PathBuf, String)>, CrdError> {
    let mut files = Vec::new();
    for layout in Layout::ALL {
        for (name, text) in documents(layout, Features::PORTABLE)? {
            files.push((layout.dir().join(format!("{name}.yaml")), text));
        }
    }
    Ok(files)
}

/// (CRD name, YAML document) of each CRD of a layout.
fn documents(layout: Layout, features: Features) -> Result<Vec<(String, String)>, CrdError> {
    crds_with(layout, features)
        .into_iter()
        .map(|crd| {
            let name = crd["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            match serde_saphyr::to_string(&crd) {
                Ok(text) => Ok((name, format!("---\n{text}"))),
                Err(e) => Err(CrdError::Yaml {
                    name,
                    message: e.to_string(),
                }),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::api::crd::crds;

    #[test]
    fn yaml_reads_back_as_the_crds() {
        for layout in Layout::ALL {
            let text = to_yaml(layout, Features::PORTABLE).unwrap();
            assert!(text.starts_with("---\napiVersion: apiextensions.k8s.io/v1\n"));
            let read = crate::manifest::parse(&text, std::path::Path::new("crds.yaml")).unwrap();
            assert_eq!(read, crds(layout));
        }
    }

    #[test]
    fn files_cover_both_layouts_once() {
        let files = files().unwrap();
        let paths: BTreeSet<String> = files
            .iter()
            .map(|(p, _)| p.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            paths,
            BTreeSet::from([
                "browserconfigs.selenosis.io.yaml".to_string(),
                "browsers.selenosis.io.yaml".to_string(),
                "split-groups/browserconfigs.browserconfig.selenosis.io.yaml".to_string(),
                "split-groups/browsers.browser.selenosis.io.yaml".to_string(),
            ])
        );
        let default: String = files[..2].iter().map(|(_, t)| t.as_str()).collect();
        assert_eq!(
            default,
            to_yaml(Layout::Default, Features::PORTABLE).unwrap()
        );
    }
}
