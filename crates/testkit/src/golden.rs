//! Golden files: the testdata tree, and comparing an output with its golden file (or
//! rewriting it under `UPDATE_GOLDEN=1`).

use std::path::{Path, PathBuf};

pub fn testdata() -> PathBuf {
    crate::repo().join("testdata")
}

/// Stems of the files with `suffix` in `dir`, sorted.
pub fn stems(dir: &Path, suffix: &str) -> Vec<String> {
    let mut stems: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter_map(|name| name.strip_suffix(suffix).map(str::to_owned))
        .collect();
    stems.sort();
    stems
}

/// The first line where `actual` and `expected` differ, 1-based, with both sides.
pub fn first_difference<'a>(
    actual: &'a str,
    expected: &'a str,
) -> Option<(usize, &'a str, &'a str)> {
    let (mut actual_lines, mut expected_lines) = (actual.lines(), expected.lines());
    for number in 1.. {
        match (actual_lines.next(), expected_lines.next()) {
            (None, None) => break,
            (a, e) if a == e => {}
            (a, e) => {
                return Some((
                    number,
                    a.unwrap_or("<end of output>"),
                    e.unwrap_or("<end of file>"),
                ));
            }
        }
    }
    // Same lines: only the final newline can differ.
    (actual != expected).then_some((actual.lines().count() + 1, "<newline at end>", "<none>"))
}

/// Compares `actual` with the golden file at `path`, or rewrites it under UPDATE_GOLDEN=1;
/// `regenerate` is the command that does that.
pub fn check(path: &Path, actual: &str, regenerate: &str) {
    if std::env::var("UPDATE_GOLDEN").is_ok_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, actual).unwrap();
        println!("updated {}", path.display());
        return;
    }
    let expected = std::fs::read_to_string(path).unwrap_or_else(|e| {
        panic!(
            "cannot read golden file {}: {e}\ncreate it with: {regenerate}",
            path.display()
        )
    });
    if let Some((line, got, want)) = first_difference(actual, &expected) {
        panic!(
            "rendered output differs from {} at line {line}:\n  golden:   {want}\n  rendered: {got}\n\
             if the change is intended, regenerate with: {regenerate} (and review the diff)",
            path.display()
        );
    }
}
