//! The manual holds together: README stays a front door (at most 500 lines; the reference is in
//! `docs/`), and every relative link in README and the manual's pages reaches a file that
//! exists and, when it names a `#section`, a heading of that file.
//!
//! Pages move and headings get renamed; a link left behind would still render, pointing
//! nowhere. Anchors are GitHub's: the heading lowercased, punctuation dropped, spaces as `-`,
//! a repeated heading suffixed `-1`, `-2`, ….

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// The front door's ceiling (issue 38).
const README_MAX_LINES: usize = 500;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// README, every page of `docs/` and the folders' own READMEs.
fn pages() -> Vec<PathBuf> {
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    pages.sort();
    for page in [
        "README.md",
        "benches/README.md",
        "grafana/README.md",
        "fuzz/README.md",
    ] {
        pages.push(root().join(page));
    }
    pages
}

/// The lines of `text` outside fenced code blocks.
fn prose(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut fenced = false;
    text.lines().enumerate().filter(move |(_, line)| {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            return false;
        }
        !fenced
    })
}

/// `line` without its inline code spans (a link shown as code is not a link).
fn without_code(line: &str) -> String {
    line.split('`').step_by(2).collect::<Vec<_>>().join(" ")
}

/// The targets of the inline links `[text](target)` in `line`.
fn links(line: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        match after.find(')') {
            Some(end) => {
                found.push(after[..end].to_string());
                rest = &after[end..];
            }
            None => break,
        }
    }
    found
}

/// GitHub's anchor for a heading's text.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a markdown file's headings.
fn anchors(text: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    for (_, line) in prose(text) {
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        let heading = heading.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let base = slug(heading);
        let mut anchor = base.clone();
        let mut n = 0;
        while seen.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        seen.insert(anchor);
    }
    seen
}

/// Every broken relative link of `page`, as `page:line: target: why`.
fn broken_links(page: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(page).unwrap();
    let name = page.strip_prefix(root()).unwrap().display().to_string();
    let mut broken = Vec::new();
    for (n, line) in prose(&text) {
        for target in links(&without_code(line)) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (target.as_str(), None),
            };
            let file = if path.is_empty() {
                page.to_path_buf()
            } else {
                page.parent().unwrap().join(path)
            };
            let at = format!("{name}:{}: {target}", n + 1);
            if !file.exists() {
                broken.push(format!("{at}: no such file"));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            if file.extension().is_none_or(|x| x != "md") {
                broken.push(format!("{at}: an anchor into a file that is not markdown"));
                continue;
            }
            let target_text = std::fs::read_to_string(&file).unwrap();
            if !anchors(&target_text).contains(anchor) {
                broken.push(format!("{at}: no heading with that anchor"));
            }
        }
    }
    broken
}

#[test]
fn readme_is_a_front_door() {
    let text = std::fs::read_to_string(root().join("README.md")).unwrap();
    let lines = text.lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines, over {README_MAX_LINES}: move reference material to docs/"
    );
}

#[test]
fn every_relative_link_reaches_its_file_and_heading() {
    let pages = pages();
    assert!(pages.len() >= 10, "only {} pages found", pages.len());
    let mut checked = 0;
    let mut broken = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        checked += prose(&text)
            .map(|(_, line)| links(&without_code(line)).len())
            .sum::<usize>();
        broken.extend(broken_links(page));
    }
    assert!(
        checked >= 50,
        "only {checked} links found: is the scan blind?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn anchors_are_githubs() {
    let text = "# LDP Gateway\n## A2A agents behind (`kind = \"a2a\"`)\n\
                ```\n# not a heading\n```\n### Errors\n## Errors\n#hashtag\n";
    let found = anchors(text);
    let want: HashSet<String> = [
        "ldp-gateway",
        "a2a-agents-behind-kind--a2a",
        "errors",
        "errors-1",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(found, want);
    assert_eq!(
        links("see [a](B.md#x) and [b](#y), not (c)"),
        ["B.md#x", "#y"]
    );
}
