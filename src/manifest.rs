//! Reading Kubernetes manifest files; what their text holds is
//! [`browser_controller_core::manifest::parse`]'s to say.

use std::path::Path;

use serde_json::Value;

pub use browser_controller_core::manifest::{ManifestError, parse};

/// Reads every object in a manifest file.
pub fn read_file(path: &Path) -> Result<Vec<Value>, ManifestError> {
    let text = std::fs::read_to_string(path).map_err(|source| ManifestError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse(&text, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_files_are_named() {
        let err = read_file(Path::new("/nonexistent/x.yaml")).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("cannot read /nonexistent/x.yaml")
        );
    }
}
