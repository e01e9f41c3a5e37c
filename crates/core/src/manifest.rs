//! Kubernetes manifests as text: JSON or (multi-document) YAML, `kind: List`
//! flattened, empty documents skipped.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// Why a manifest file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: invalid JSON: {source}")]
    Json {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{path}: invalid YAML: {message}")]
    Yaml { path: PathBuf, message: String },
    #[error("{path}: document {index} is not an object")]
    NotAnObject { path: PathBuf, index: usize },
}

/// Parses manifest text; `origin` names it in errors.
pub fn parse(text: &str, origin: &Path) -> Result<Vec<Value>, ManifestError> {
    let documents: Vec<Value> = if text.trim_start().starts_with(['{', '[']) {
        let value: Value = serde_json::from_str(text).map_err(|source| ManifestError::Json {
            path: origin.to_path_buf(),
            source,
        })?;
        vec![value]
    } else {
        serde_saphyr::from_str_multiple::<Value, _>(text).map_err(|e| ManifestError::Yaml {
            path: origin.to_path_buf(),
            message: first_line(&e.to_string()),
        })?
    };
    let mut objects = Vec::new();
    for (index, document) in documents.into_iter().enumerate() {
        match document {
            Value::Null => {}
            Value::Object(_) if document.get("kind").and_then(Value::as_str) == Some("List") => {
                if let Some(Value::Array(items)) = document.get("items") {
                    objects.extend(items.iter().cloned());
                }
            }
            Value::Object(_) => objects.push(document),
            Value::Array(items) => objects.extend(items),
            _ => {
                return Err(ManifestError::NotAnObject {
                    path: origin.to_path_buf(),
                    index: index + 1,
                });
            }
        }
    }
    Ok(objects)
}

/// The parser's first line names the position and the problem; the rest is a source
/// snippet that does not fit a one-line error.
fn first_line(message: &str) -> String {
    let line = message
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("syntax error");
    line.strip_prefix("error: ").unwrap_or(line).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_multi_document_yaml_and_skips_empty_documents() {
        let text = "a: 1\n---\n---\nkind: List\nitems:\n- b: 2\n- c: 3\n";
        let objects = parse(text, Path::new("x.yaml")).unwrap();
        assert_eq!(objects.len(), 3);
        assert_eq!(objects[0]["a"], 1);
        assert_eq!(objects[2]["c"], 3);
    }

    #[test]
    fn reads_json() {
        let objects = parse("{\"kind\": \"Browser\"}", Path::new("x.json")).unwrap();
        assert_eq!(objects[0]["kind"], "Browser");
    }

    #[test]
    fn yaml_syntax_errors_name_the_file_and_line() {
        let err = parse("a: 1\nb: [unclosed\n", Path::new("bad.yaml")).unwrap_err();
        let text = err.to_string();
        assert!(text.starts_with("bad.yaml: invalid YAML"), "{text}");
        assert!(text.contains("line"), "{text}");
        assert!(!text.contains('\n'), "{text}");
    }
}
