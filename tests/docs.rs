//! The documentation holds together: every page under `docs/` is linked from the front page
//! (README.md), and every relative link of the front page, the pages and the packages' READMEs
//! leads to a file that exists and, with a `#fragment`, to a heading of that file.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The text without fenced code blocks (links and headings inside them do not count).
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// A heading's anchor as GitHub makes it: lower case, punctuation but `-` and `_` dropped,
/// spaces as `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(file: &Path) -> HashSet<String> {
    let text = std::fs::read_to_string(file).unwrap();
    prose(&text)
        .lines()
        .filter_map(|line| {
            let hashes = line.chars().take_while(|c| *c == '#').count();
            (1..=6)
                .contains(&hashes)
                .then(|| line[hashes..].strip_prefix(' '))
                .flatten()
                .map(anchor)
        })
        .collect()
}

/// The targets of the Markdown links `[text](target)` in `text`.
fn links(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        if let Some(end) = rest.find(')') {
            let target = &rest[..end];
            if !target.contains(char::is_whitespace) {
                found.push(target.to_string());
            }
        }
    }
    found
}

fn pages() -> Vec<PathBuf> {
    let mut pages: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    pages.sort();
    pages
}

#[test]
fn every_page_is_linked_from_the_front_page() {
    let front = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let linked: HashSet<String> = links(&prose(&front)).into_iter().collect();
    for page in pages() {
        let name = format!("docs/{}", page.file_name().unwrap().to_string_lossy());
        assert!(
            linked.contains(&name),
            "README.md does not link {name}; the front page must reach every page"
        );
    }
}

#[test]
fn every_relative_link_leads_somewhere() {
    let mut files = vec![
        repo().join("README.md"),
        repo().join("bindings/python/README.md"),
        repo().join("bindings/node/README.md"),
    ];
    files.extend(pages());
    let mut broken = Vec::new();
    for file in &files {
        let text = prose(&std::fs::read_to_string(file).unwrap());
        for target in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, fragment) = target.split_once('#').unwrap_or((&target, ""));
            let dest = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(path)
            };
            if !dest.exists() {
                broken.push(format!("{}: {target}: no such file", file.display()));
                continue;
            }
            let is_markdown = dest.extension().is_some_and(|e| e == "md");
            if !fragment.is_empty() && is_markdown && !anchors(&dest).contains(fragment) {
                broken.push(format!("{}: {target}: no such heading", file.display()));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}
