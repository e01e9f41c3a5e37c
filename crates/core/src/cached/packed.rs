//! Cached texts packed (LZ4) against a dictionary of their kind: the first text packed for it.
//! The Browsers of a fleet, and their pods, differ in little more than names, uids,
//! timestamps and addresses, so packed against one of them a pod's 1.4 KB of text keeps under
//! 200 bytes; unpacking one for a reconcile takes a fraction of a microsecond. Over tens of
//! thousands of Browsers the texts were most of the operator's memory.

use std::fmt;
use std::string::FromUtf8Error;
use std::sync::OnceLock;

use lz4_flex::block::{
    DecompressError, compress_prepend_size_with_dict, decompress_size_prepended_with_dict,
};

/// The dictionary of one kind: the first text packed for it, kept for the process's life,
/// since every text is unpacked with the dictionary it was packed with.
pub struct Dictionary(OnceLock<Box<[u8]>>);

impl Dictionary {
    pub const fn new() -> Self {
        Self(OnceLock::new())
    }

    fn bytes(&self) -> &[u8] {
        self.0.get().map_or(&[], |d| d)
    }
}

/// A text packed against a [`Dictionary`].
#[derive(Clone)]
pub struct Packed(Box<[u8]>);

#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    #[error("cannot unpack a cached object: {0}")]
    Lz4(#[from] DecompressError),
    #[error("a cached object unpacks to invalid UTF-8: {0}")]
    Utf8(#[from] FromUtf8Error),
}

impl Packed {
    /// No text: unpacks to `{}` (and leaves the dictionary unset).
    pub fn empty() -> Self {
        Packed(Box::default())
    }

    pub fn new(text: &str, dictionary: &Dictionary) -> Self {
        let dictionary = dictionary.0.get_or_init(|| text.as_bytes().into());
        Packed(compress_prepend_size_with_dict(text.as_bytes(), dictionary).into_boxed_slice())
    }

    /// The text, from the dictionary it was packed with.
    pub fn unpack(&self, dictionary: &Dictionary) -> Result<String, UnpackError> {
        if self.0.is_empty() {
            return Ok("{}".into());
        }
        let bytes = decompress_size_prepended_with_dict(&self.0, dictionary.bytes())?;
        Ok(String::from_utf8(bytes)?)
    }
}

impl fmt::Debug for Packed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Packed({} bytes)", self.0.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, uid: &str, ip: &str, at: &str) -> String {
        serde_json::json!({
            "metadata": {"name": name, "namespace": "ci", "uid": uid, "resourceVersion": "4711",
                "creationTimestamp": at,
                "labels": {"app.kubernetes.io/managed-by": "browser-controller", "selenosis.io/browser": name,
                    "selenosis.io/browser.name": "chrome", "selenosis.io/browser.version": "139.0"},
                "ownerReferences": [{"apiVersion": "selenosis.io/v1", "kind": "Browser", "name": name,
                    "uid": uid, "controller": true, "blockOwnerDeletion": true}]},
            "spec": {"containers": [
                {"name": "browser", "ports": [{"name": "webdriver", "containerPort": 4444, "protocol": "TCP"}]},
                {"name": "seleniferous", "ports": [{"name": "seleniferous", "containerPort": 4445, "protocol": "TCP"}]}],
                "nodeName": "node-1"},
            "status": {"phase": "Running", "podIP": ip, "startTime": at,
                "containerStatuses": [
                    {"name": "browser", "state": {"running": {"startedAt": at}}, "image": "selenium/standalone-chrome:139.0", "restartCount": 0},
                    {"name": "seleniferous", "state": {"running": {"startedAt": at}}, "image": "alcounit/seleniferous:v2.0.8", "restartCount": 0}]},
        })
        .to_string()
    }

    #[test]
    fn a_text_unpacks_to_itself_with_its_dictionary() {
        let dictionary = Dictionary::new();
        let first = pod("s1", "0b7c2f4e-1a", "10.1.0.7", "2026-11-27T01:13:35Z");
        let second = pod("s2", "93d1e0aa-2b", "10.1.0.8", "2026-11-27T01:13:36Z");
        let (a, b) = (
            Packed::new(&first, &dictionary),
            Packed::new(&second, &dictionary),
        );
        assert_eq!(a.unpack(&dictionary).unwrap(), first);
        assert_eq!(b.unpack(&dictionary).unwrap(), second);
        assert_eq!(Packed::empty().unpack(&dictionary).unwrap(), "{}");
    }

    #[test]
    fn a_text_like_the_first_keeps_little_more_than_what_differs() {
        let dictionary = Dictionary::new();
        Packed::new(
            &pod("s1", "0b7c2f4e-1a", "10.1.0.7", "2026-11-27T01:13:35Z"),
            &dictionary,
        );
        let second = pod("s2", "93d1e0aa-2b", "10.1.0.8", "2026-11-27T01:13:36Z");
        let packed = Packed::new(&second, &dictionary);
        assert!(
            packed.0.len() * 5 < second.len(),
            "{} bytes of {}",
            packed.0.len(),
            second.len()
        );
    }

    #[test]
    fn an_empty_text_leaves_the_dictionary_to_the_next() {
        let dictionary = Dictionary::new();
        let _ = Packed::empty();
        let text = pod("s1", "0b7c2f4e-1a", "10.1.0.7", "2026-11-27T01:13:35Z");
        Packed::new(&text, &dictionary);
        assert_eq!(dictionary.bytes(), text.as_bytes());
    }
}
