//! Markdown pages as the docs tests read them: headings and the anchors GitHub gives them.

/// GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens.
pub fn anchor(heading: &str) -> String {
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

/// The headings of a Markdown page, outside code blocks.
pub fn headings(page: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_code = false;
    for line in page.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
        } else if !in_code && line.starts_with('#') {
            out.push(line.trim_start_matches('#').trim().to_string());
        }
    }
    out
}
