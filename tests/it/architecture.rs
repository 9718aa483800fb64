//! What `docs/ARCHITECTURE.md` claims of the source's imports, checked against the source
//! itself, so the page cannot silently go false:
//!
//! 1. the top-level modules of each crate of the workspace (the gateway's library and binary,
//!    and `crates/*`) import each other without a cycle;
//! 2. no two files of one folder import each other, directly or around a circle;
//! 3. the "imports" column of the page's module table is exactly what each module of the
//!    gateway imports of the crate.
//!
//! The source is read at test time with `syn`, test code left out (items under `#[cfg(test)]`
//! and `#[test]`, and so the `tests.rs` files they declare). A reference is every `use` and
//! every path written `crate::…`, `super::…`, `self::…` or through a name a `use` brought in,
//! in code and inside macro calls; comments, doc links and attributes are not references.
//!
//! For claims 1 and 3 a reference counts for the top-level module it names (`crate::ldp::…` is
//! `ldp`, as the table reads). For claim 2 it counts for every module the name is looked up
//! in on its way to its item, re-exports followed: `super::Figures` in `routing/score.rs`,
//! re-exported by `routing.rs` from `routing/constraints.rs`, makes `score` import
//! `constraints`. A file imports what anything below it imports: `routing/decide/x.rs`
//! naming `super::super::score` makes `decide` import `score`.

mod source;

use source::{rel, root, Crate, Graph, Ref};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::OnceLock;

/// A circle of imports: every node of its strongly connected component, and one circle
/// through them in order (`a → b → … → a`) with the reference behind each step.
#[derive(Debug)]
struct Circle {
    members: Vec<String>,
    steps: Vec<(String, Ref)>,
}

impl Circle {
    /// `(a, b, c):` then each step on a line.
    fn tell(&self) -> String {
        let mut s = format!("({}):", self.members.join(", "));
        for (k, (from, r)) in self.steps.iter().enumerate() {
            let next = self.steps.get(k + 1).map_or(&self.steps[0].0, |n| &n.0);
            let _ = write!(s, "\n      {from} → {next}: {}", r.at());
        }
        s
    }
}

/// The strongly connected components of more than one node.
fn circles(g: &Graph) -> Vec<Circle> {
    let nodes: Vec<&String> = g.keys().collect();
    let mut found = Vec::new();
    let mut seen: BTreeSet<&String> = BTreeSet::new();
    for &start in &nodes {
        if seen.contains(start) {
            continue;
        }
        // The nodes that reach `start` and that `start` reaches: its component.
        let fwd = reach(g, start, false);
        let back = reach(g, start, true);
        let comp: BTreeSet<&String> = fwd.intersection(&back).copied().collect();
        seen.extend(comp.iter().copied());
        if comp.len() < 2 {
            continue;
        }
        // One circle for the message: the shortest through any member (breadth first).
        let shortest = comp
            .iter()
            .filter_map(|m| shortest_circle(g, m, &comp))
            .min_by_key(Vec::len);
        if let Some(steps) = shortest {
            found.push(Circle {
                members: comp.iter().map(|m| (*m).clone()).collect(),
                steps,
            });
        }
    }
    found
}

fn reach<'a>(g: &'a Graph, from: &'a String, backwards: bool) -> BTreeSet<&'a String> {
    let mut seen = BTreeSet::from([from]);
    let mut todo = vec![from];
    while let Some(n) = todo.pop() {
        let next: Vec<&String> = if backwards {
            g.iter()
                .filter(|(_, to)| to.contains_key(n))
                .map(|(k, _)| k)
                .collect()
        } else {
            g.get(n).map(|to| to.keys().collect()).unwrap_or_default()
        };
        for m in next {
            if g.contains_key(m) && seen.insert(m) {
                todo.push(m);
            }
        }
    }
    seen
}

fn shortest_circle(
    g: &Graph,
    start: &String,
    comp: &BTreeSet<&String>,
) -> Option<Vec<(String, Ref)>> {
    let mut prev: BTreeMap<&String, &String> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(n) = queue.pop_front() {
        for m in g.get(n)?.keys() {
            if !comp.contains(m) {
                continue;
            }
            if m == start {
                // Walk back from `n` to `start`.
                let mut path = vec![n];
                while let Some(&p) = path.last().and_then(|x| prev.get(x)) {
                    path.push(p);
                }
                path.reverse();
                path.push(start);
                return Some(
                    path.windows(2)
                        .map(|w| (w[0].clone(), g[w[0]][w[1]].clone()))
                        .collect(),
                );
            }
            if m != start && !prev.contains_key(m) {
                prev.insert(m, n);
                queue.push_back(m);
            }
        }
    }
    None
}

/// Every crate of the workspace: the gateway's library and binary, then `crates/*`.
fn workspace() -> &'static Result<Vec<Crate>, String> {
    static CRATES: OnceLock<Result<Vec<Crate>, String>> = OnceLock::new();
    CRATES.get_or_init(|| {
        let root = root();
        let mut crates = vec![
            Crate::read("ldp-gateway (library)", &root.join("src/lib.rs"))?,
            Crate::read("ldp-gateway (binary)", &root.join("src/main.rs"))?,
        ];
        let mut members: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
            .map_err(|e| format!("crates/: {e}"))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        members.sort();
        for m in members {
            let lib = m.join("src/lib.rs");
            if lib.is_file() {
                crates.push(Crate::read(&rel(&m).display().to_string(), &lib)?);
            }
        }
        Ok(crates)
    })
}

fn crates() -> &'static [Crate] {
    match workspace() {
        Ok(c) => c,
        Err(e) => panic!("the source could not be read as Rust: {e}"),
    }
}

/// Fails with every problem, under what the page claims.
fn report(claim: &str, problems: &[String]) {
    assert!(
        problems.is_empty(),
        "docs/ARCHITECTURE.md claims {claim}, and the source says otherwise:\n\n{}\n",
        problems.join("\n\n")
    );
}

fn module_cycles(crates: &[Crate]) -> Vec<String> {
    let mut problems = Vec::new();
    for c in crates {
        let g = c.top_imports();
        for circle in circles(&g) {
            problems.push(format!(
                "{}: its top-level modules import each other around a circle {}\n    \
                 Fix the code, not the page: move what the lower module needs of the higher one \
                 into the lower one (or into a module of its own both import), so imports flow \
                 one way along the request path.",
                c.name,
                circle.tell()
            ));
        }
    }
    problems
}

fn file_circles(crates: &[Crate]) -> Vec<String> {
    let mut problems = Vec::new();
    for c in crates {
        for (folder, g) in c.sibling_imports() {
            for circle in circles(&g) {
                problems.push(format!(
                    "{}: files of `{}` import each other around a circle {}\n    \
                     Fix the code, not the page: move the shared type to the file that owns it, \
                     or into a small file of its own that both import.",
                    c.name,
                    folder.join("::"),
                    circle.tell()
                ));
            }
        }
    }
    problems
}

/// One row of the page's module table.
#[derive(Debug)]
struct Row {
    /// Line in the page.
    line: usize,
    /// The module the row is about (`routing` for "`routing.rs`, `routing/`").
    module: String,
    /// What its imports cell lists; `None`: "the library" (the binary's row).
    imports: Option<BTreeSet<String>>,
}

const PAGE: &str = "docs/ARCHITECTURE.md";
const TABLE: &str = "## Modules of the gateway";

/// The backticked words of `s` outside parentheses, and what else is left there but commas
/// and spaces.
fn backticked(s: &str) -> (Vec<String>, String) {
    let mut outside = String::new();
    let mut depth = 0usize;
    for ch in s.chars() {
        match ch {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            _ if depth == 0 => outside.push(ch),
            _ => {}
        }
    }
    let mut words = Vec::new();
    let mut left = String::new();
    for (k, part) in outside.split('`').enumerate() {
        if k % 2 == 1 {
            words.push(part.to_owned());
        } else {
            left.push_str(part);
        }
    }
    let left = left.replace([',', ' '], "");
    (words, left)
}

/// The module table of the page, or what is wrong with its shape.
fn module_table(page: &str) -> Result<Vec<Row>, String> {
    let lines: Vec<&str> = page.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.starts_with(TABLE))
        .ok_or(format!("{PAGE} has no section starting `{TABLE}`"))?;
    let header = (start..lines.len())
        .find(|&i| lines[i].starts_with('|'))
        .ok_or(format!("{PAGE}: no table under `{TABLE}`"))?;
    let cells = |l: &str| -> Vec<String> {
        l.trim()
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim().to_owned())
            .collect()
    };
    let head = cells(lines[header]);
    if head.first().map(String::as_str) != Some("module")
        || head.last().map(String::as_str) != Some("imports")
    {
        return Err(format!(
            "{PAGE}:{}: the module table's first column must be `module` and its last \
             `imports` (found {head:?})",
            header + 1
        ));
    }
    let mut rows = Vec::new();
    for (i, l) in lines.iter().enumerate().skip(header + 2) {
        if !l.starts_with('|') {
            break;
        }
        let c = cells(l);
        let (Some(first), Some(last)) = (c.first(), c.last()) else {
            continue;
        };
        let (names, _) = backticked(first);
        let Some(name) = names.first() else {
            return Err(format!(
                "{PAGE}:{}: the module cell names no module in backticks",
                i + 1
            ));
        };
        let module = name
            .trim_end_matches('/')
            .trim_end_matches(".rs")
            .to_owned();
        let (words, left) = backticked(last);
        let imports = if last == "the library" {
            None
        } else if words.is_empty() && (left == "—" || last == "nothing of the crate") {
            Some(BTreeSet::new())
        } else if left.is_empty() && !words.is_empty() {
            Some(words.into_iter().collect())
        } else {
            return Err(format!(
                "{PAGE}:{}: row `{module}`: the imports cell `{last}` cannot be read: write the \
                 modules in backticks separated by commas (remarks in parentheses), `—` or \
                 `nothing of the crate` for none",
                i + 1
            ));
        };
        rows.push(Row {
            line: i + 1,
            module,
            imports,
        });
    }
    Ok(rows)
}

/// What is wrong between the page's module table and what the library imports.
fn table_problems(page: &str, lib: &Crate) -> Vec<String> {
    let rows = match module_table(page) {
        Ok(r) => r,
        Err(e) => return vec![e],
    };
    let actual = lib.top_imports();
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    for row in &rows {
        let at = format!("{PAGE}:{}, row `{}`", row.line, row.module);
        if !seen.insert(row.module.clone()) {
            problems.push(format!("{at}: a second row for the module: merge the two"));
            continue;
        }
        let Some(imports) = &row.imports else {
            // The binary (`main.rs`, `cli/`): a crate of its own on the library, which
            // claim 1 checks.
            if row.module != "main" {
                problems.push(format!(
                    "{at}: only the binary's row (`main.rs`, …) may say \"the library\""
                ));
            }
            continue;
        };
        let Some(real) = actual.get(&row.module) else {
            problems.push(format!(
                "{at}: src/lib.rs has no module `{}`: remove the row, or correct its name",
                row.module
            ));
            continue;
        };
        let real_names: BTreeSet<String> = real.keys().cloned().collect();
        let missing: Vec<_> = real_names.difference(imports).collect();
        let extra: Vec<_> = imports.difference(&real_names).collect();
        if missing.is_empty() && extra.is_empty() {
            continue;
        }
        let mut p = format!("{at}: the imports cell is not what the module imports.");
        for m in &missing {
            let _ = write!(
                p,
                "\n    imported but not listed: `{m}` (first at {}): add it to the cell, or \
                 drop the import",
                real[*m].at()
            );
        }
        for e in &extra {
            let _ = write!(
                p,
                "\n    listed but not imported: `{e}`: remove it from the cell (nothing under \
                 src/{}.rs or src/{}/ names `crate::{e}` outside test code)",
                row.module, row.module
            );
        }
        problems.push(p);
    }
    for m in actual.keys() {
        if !seen.contains(m) {
            problems.push(format!(
                "{PAGE}: the module table has no row for `{m}` (src/lib.rs): add one with what \
                 it is and what it imports ({})",
                fmt_set(actual[m].keys())
            ));
        }
    }
    problems
}

fn fmt_set<'a>(names: impl Iterator<Item = &'a String>) -> String {
    let v: Vec<String> = names.map(|n| format!("`{n}`")).collect();
    if v.is_empty() {
        "—".to_owned()
    } else {
        v.join(", ")
    }
}

#[test]
fn top_level_modules_import_each_other_without_a_cycle() {
    report(
        "(\"the graph has no cycle\") that no crate's top-level modules import each other \
         around a circle",
        &module_cycles(crates()),
    );
}

#[test]
fn no_two_files_of_a_folder_import_each_other() {
    report(
        "that \"no two files of a folder import each other, directly or around a circle\"",
        &file_circles(crates()),
    );
}

#[test]
fn the_module_tables_imports_column_is_what_each_module_imports() {
    let page = std::fs::read_to_string(root().join(PAGE)).unwrap();
    report(
        "in its module table that the imports column is \"what each module uses of the crate\"",
        &table_problems(&page, &crates()[0]),
    );
}

/// The checks above find what they look for: a throwaway crate with each fault.
#[test]
fn the_checks_fail_on_a_crate_that_breaks_each_claim() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let files = [
        (
            "lib.rs",
            "pub mod a;\npub mod b;\npub mod f;\npub use other as o;\n",
        ),
        // a → b through a macro's tokens, b → a through a `use`: a cycle of modules.
        (
            "a.rs",
            "pub fn x() -> bool { matches!(1, crate::b::ONE) }\n",
        ),
        (
            "b.rs",
            "use crate::a::x;\npub const ONE: i32 = 1;\n\
             #[cfg(test)]\nmod tests { use crate::f::*; }\n",
        ),
        // y → x through the parent's re-export, x → z, z → y: a circle of files; x → w
        // through w's re-export of another crate's item.
        (
            "f.rs",
            "mod w;\nmod x;\nmod y;\nmod z;\npub use x::Shared;\nuse z::Hidden;\n",
        ),
        ("f/w.rs", "pub use other::Item as Outside;\n"),
        (
            "f/x.rs",
            "pub struct Shared(super::z::Thing, super::w::Outside);\n",
        ),
        ("f/y.rs", "pub struct Other(super::Shared);\n"),
        (
            "f/z.rs",
            "pub struct Thing;\npub struct Hidden;\n\
             fn g() -> crate::f::y::Other { todo!() }\n",
        ),
    ];
    std::fs::create_dir_all(src.join("f")).unwrap();
    for (name, text) in files {
        std::fs::write(src.join(name), text).unwrap();
    }
    let c = Crate::read("throwaway", &src.join("lib.rs")).unwrap();

    let cycles = module_cycles(std::slice::from_ref(&c));
    assert_eq!(cycles.len(), 1, "{cycles:?}");
    assert!(cycles[0].contains("(a, b):"), "{}", cycles[0]);
    assert!(
        cycles[0].contains("a → b") && cycles[0].contains("b → a"),
        "{}",
        cycles[0]
    );
    assert!(
        cycles[0].contains("src/a.rs:1 `crate::b::ONE`"),
        "{}",
        cycles[0]
    );

    let circles = file_circles(std::slice::from_ref(&c));
    assert_eq!(circles.len(), 1, "{circles:?}");
    let said = "files of `f` import each other around a circle (x, y, z):";
    assert!(circles[0].contains(said), "{}", circles[0]);
    for step in ["x → z", "z → y", "y → x"] {
        assert!(circles[0].contains(step), "{step}: {}", circles[0]);
    }
    let f = &c.sibling_imports()[&vec!["f".to_owned()]];
    assert!(f["x"].contains_key("w"), "{f:?}");

    // Test code is no import: `b` imports only `a`.
    let imports = c.top_imports();
    assert_eq!(imports["b"].keys().collect::<Vec<_>>(), ["a"]);

    let page = format!(
        "# x\n\n{TABLE} (`src/`)\n\n| module | what it is | imports |\n|---|---|---|\n\
         | `a.rs` | one | `b` |\n\
         | `b.rs` | two | `a`, `f` (a remark, `o`) |\n\
         | `o` (a crate) | three | nothing of the crate |\n\
         | `gone.rs` | four | — |\n"
    );
    let problems = table_problems(&page, &c);
    let all = problems.join("\n");
    assert!(
        all.contains(":8, row `b`") && all.contains("listed but not imported: `f`"),
        "{all}"
    );
    assert!(
        all.contains("row `gone`: src/lib.rs has no module `gone`"),
        "{all}"
    );
    assert!(all.contains("no row for `f`"), "{all}");
    assert_eq!(problems.len(), 3, "{all}");
}
