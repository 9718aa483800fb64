//! The source of a crate read as modules and the paths each writes, for the claims of
//! [`super`]: `syn` reads each file of the module tree from the crate's root file, test code
//! left out; a path is then resolved the way the compiler looks names up (child modules,
//! items, `use`d names, globs), re-exports followed.

use proc_macro2::{Spacing, TokenStream, TokenTree};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use syn::visit::Visit;

/// One module of a crate: a file, or an inline `mod x { … }` in one.
#[derive(Debug, Default)]
struct Module {
    /// Its path below the crate root (`[]`: the root).
    path: Vec<String>,
    parent: Option<usize>,
    children: BTreeMap<String, usize>,
    /// Items it defines (types, functions, constants, macros …).
    items: BTreeSet<String>,
    /// Names its `use`s bring in, each with the path as written.
    uses: BTreeMap<String, Vec<String>>,
    /// `use …::*` paths as written.
    globs: Vec<Vec<String>>,
    refs: Vec<Ref>,
}

/// A path written in a module's code.
#[derive(Debug, Clone)]
pub(super) struct Ref {
    segs: Vec<String>,
    file: PathBuf,
    line: usize,
}

impl Ref {
    /// Where it is written, and what, for messages.
    pub(super) fn at(&self) -> String {
        format!(
            "{}:{} `{}`",
            rel(&self.file).display(),
            self.line,
            self.segs.join("::")
        )
    }
}

/// One crate's modules, read from its root file.
#[derive(Debug)]
pub(super) struct Crate {
    /// How messages name it (`ldp-gateway (library)`, `crates/ldp-client`, …).
    pub(super) name: String,
    modules: Vec<Module>,
}

/// The workspace's root directory.
pub(super) fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `p` relative to the workspace root, for messages.
pub(super) fn rel(p: &Path) -> PathBuf {
    p.strip_prefix(root()).unwrap_or(p).to_path_buf()
}

/// Whether attributes put what they are on under test only.
fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        // `#[test]`, `#[tokio::test]`.
        if a.path().segments.last().is_some_and(|s| s.ident == "test") {
            return true;
        }
        if !a.path().is_ident("cfg") {
            return false;
        }
        let syn::Meta::List(list) = &a.meta else {
            return false;
        };
        let t = list.tokens.to_string();
        let words = || t.split(|c: char| !(c.is_alphanumeric() || c == '_'));
        t.trim() == "test" || (t.trim_start().starts_with("all") && words().any(|w| w == "test"))
    })
}

fn line_of(ident: &proc_macro2::Ident) -> usize {
    ident.span().start().line
}

/// What a leaf of a `use` tree brings into scope.
enum Leaf {
    /// A name (`use a::B`, `use a::B as C`).
    Name(String),
    /// Nothing by name (`use a::B as _`).
    Anonymous,
    /// Everything of a module (`use a::*`; its path ends at the module).
    Glob,
}

/// Every leaf of a `use` tree: what it brings in, the path as written, its line.
fn use_leaves(
    prefix: &mut Vec<String>,
    tree: &syn::UseTree,
    out: &mut Vec<(Leaf, Vec<String>, usize)>,
) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            use_leaves(prefix, &p.tree, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let name = n.ident.to_string();
            // `use a::{self}` names `a` itself.
            let (path, shown) = if name == "self" {
                let shown = prefix.last().cloned().map_or(Leaf::Anonymous, Leaf::Name);
                (prefix.clone(), shown)
            } else {
                let mut p = prefix.clone();
                p.push(name.clone());
                (p, Leaf::Name(name))
            };
            out.push((shown, path, line_of(&n.ident)));
        }
        syn::UseTree::Rename(r) => {
            let mut p = prefix.clone();
            let name = r.ident.to_string();
            if name != "self" {
                p.push(name);
            }
            let rename = r.rename.to_string();
            let leaf = if rename == "_" {
                Leaf::Anonymous
            } else {
                Leaf::Name(rename)
            };
            out.push((leaf, p, line_of(&r.ident)));
        }
        syn::UseTree::Glob(g) => {
            let line = g.star_token.spans[0].start().line;
            out.push((Leaf::Glob, prefix.clone(), line));
        }
        syn::UseTree::Group(g) => {
            for t in &g.items {
                use_leaves(prefix, t, out);
            }
        }
    }
}

/// Collects the paths of one item's code (not its `use`s or child modules, which the reader
/// takes itself).
struct Paths<'a> {
    file: &'a Path,
    out: Vec<Ref>,
}

impl Paths<'_> {
    fn push(&mut self, segs: Vec<String>, line: usize) {
        // `std::…`, a local, `Self::X`: decided when resolving; one segment is a local or
        // an item in scope, which only its `use` can bring from elsewhere.
        if segs.len() >= 2 || matches!(segs.first().map(String::as_str), Some("crate" | "super")) {
            self.out.push(Ref {
                segs,
                file: self.file.to_path_buf(),
                line,
            });
        }
    }

    /// Paths inside a macro call's tokens (`matches!(x, crate::a::B)`, `format!`'s
    /// arguments), read as `ident :: ident …` runs; `$crate` in a macro's own definition is
    /// the macro's crate at its call site, not a reference.
    fn tokens(&mut self, tokens: TokenStream) {
        let tts: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < tts.len() {
            match &tts[i] {
                TokenTree::Group(g) => {
                    self.tokens(g.stream());
                    i += 1;
                }
                TokenTree::Ident(first) => {
                    let after_sep = i >= 2 && is_sep(&tts[i - 2], &tts[i - 1]);
                    let after_dollar =
                        i >= 1 && matches!(&tts[i - 1], TokenTree::Punct(p) if p.as_char() == '$');
                    let mut segs = vec![first.to_string()];
                    let mut j = i + 1;
                    while j + 2 < tts.len() && is_sep(&tts[j], &tts[j + 1]) {
                        let TokenTree::Ident(next) = &tts[j + 2] else {
                            break;
                        };
                        segs.push(next.to_string());
                        j += 3;
                    }
                    if !after_sep && !after_dollar {
                        self.push(segs, first.span().start().line);
                    }
                    i = j.max(i + 1);
                }
                _ => i += 1,
            }
        }
    }
}

/// Whether two tokens are `::`.
fn is_sep(a: &TokenTree, b: &TokenTree) -> bool {
    matches!((a, b), (TokenTree::Punct(x), TokenTree::Punct(y))
        if x.as_char() == ':' && x.spacing() == Spacing::Joint && y.as_char() == ':')
}

impl<'ast> Visit<'ast> for Paths<'_> {
    fn visit_item(&mut self, i: &'ast syn::Item) {
        if !is_test(item_attrs(i)) {
            syn::visit::visit_item(self, i);
        }
    }
    fn visit_item_mod(&mut self, _: &'ast syn::ItemMod) {
        // A module inside a function body: not reached by the crate's module tree; rare.
    }
    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        // A `use` inside a function body: a reference like any.
        if u.leading_colon.is_some() {
            return;
        }
        let mut leaves = Vec::new();
        use_leaves(&mut Vec::new(), &u.tree, &mut leaves);
        for (_, segs, line) in leaves {
            self.out.push(Ref {
                segs,
                file: self.file.to_path_buf(),
                line,
            });
        }
    }
    fn visit_impl_item(&mut self, i: &'ast syn::ImplItem) {
        let attrs: &[syn::Attribute] = match i {
            syn::ImplItem::Const(c) => &c.attrs,
            syn::ImplItem::Fn(f) => &f.attrs,
            syn::ImplItem::Type(t) => &t.attrs,
            syn::ImplItem::Macro(m) => &m.attrs,
            _ => &[],
        };
        if !is_test(attrs) {
            syn::visit::visit_impl_item(self, i);
        }
    }
    fn visit_trait_item(&mut self, i: &'ast syn::TraitItem) {
        let attrs: &[syn::Attribute] = match i {
            syn::TraitItem::Const(c) => &c.attrs,
            syn::TraitItem::Fn(f) => &f.attrs,
            syn::TraitItem::Type(t) => &t.attrs,
            syn::TraitItem::Macro(m) => &m.attrs,
            _ => &[],
        };
        if !is_test(attrs) {
            syn::visit::visit_trait_item(self, i);
        }
    }
    fn visit_field(&mut self, f: &'ast syn::Field) {
        if !is_test(&f.attrs) {
            syn::visit::visit_field(self, f);
        }
    }
    fn visit_variant(&mut self, v: &'ast syn::Variant) {
        if !is_test(&v.attrs) {
            syn::visit::visit_variant(self, v);
        }
    }
    fn visit_stmt(&mut self, s: &'ast syn::Stmt) {
        let test = match s {
            syn::Stmt::Local(l) => is_test(&l.attrs),
            syn::Stmt::Expr(syn::Expr::Block(b), _) => is_test(&b.attrs),
            _ => false,
        };
        if !test {
            syn::visit::visit_stmt(self, s);
        }
    }
    fn visit_arm(&mut self, a: &'ast syn::Arm) {
        if !is_test(&a.attrs) {
            syn::visit::visit_arm(self, a);
        }
    }
    fn visit_attribute(&mut self, _: &'ast syn::Attribute) {
        // Doc comments and attributes name no import.
    }
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {
        // `pub(in crate::x)` says who may see, not what is used.
    }
    fn visit_path(&mut self, p: &'ast syn::Path) {
        if p.leading_colon.is_none() {
            if let Some(first) = p.segments.first() {
                let segs = p.segments.iter().map(|s| s.ident.to_string()).collect();
                self.push(segs, line_of(&first.ident));
            }
        }
        syn::visit::visit_path(self, p);
    }
    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.visit_path(&m.path);
        self.tokens(m.tokens.clone());
    }
}

fn item_attrs(i: &syn::Item) -> &[syn::Attribute] {
    match i {
        syn::Item::Const(x) => &x.attrs,
        syn::Item::Enum(x) => &x.attrs,
        syn::Item::ExternCrate(x) => &x.attrs,
        syn::Item::Fn(x) => &x.attrs,
        syn::Item::ForeignMod(x) => &x.attrs,
        syn::Item::Impl(x) => &x.attrs,
        syn::Item::Macro(x) => &x.attrs,
        syn::Item::Mod(x) => &x.attrs,
        syn::Item::Static(x) => &x.attrs,
        syn::Item::Struct(x) => &x.attrs,
        syn::Item::Trait(x) => &x.attrs,
        syn::Item::TraitAlias(x) => &x.attrs,
        syn::Item::Type(x) => &x.attrs,
        syn::Item::Union(x) => &x.attrs,
        syn::Item::Use(x) => &x.attrs,
        _ => &[],
    }
}

/// The name an item defines, if any.
fn item_name(i: &syn::Item) -> Option<String> {
    let ident = match i {
        syn::Item::Const(x) => &x.ident,
        syn::Item::Enum(x) => &x.ident,
        syn::Item::Fn(x) => &x.sig.ident,
        syn::Item::Macro(x) => x.ident.as_ref()?,
        syn::Item::Static(x) => &x.ident,
        syn::Item::Struct(x) => &x.ident,
        syn::Item::Trait(x) => &x.ident,
        syn::Item::TraitAlias(x) => &x.ident,
        syn::Item::Type(x) => &x.ident,
        syn::Item::Union(x) => &x.ident,
        _ => return None,
    };
    Some(ident.to_string())
}

impl Crate {
    /// The crate whose root file is `root_file`.
    pub(super) fn read(name: &str, root_file: &Path) -> Result<Crate, String> {
        let mut c = Crate {
            name: name.to_owned(),
            modules: Vec::new(),
        };
        let dir = root_file.parent().unwrap_or(Path::new(".")).to_path_buf();
        let items = parse(root_file)?;
        c.add(Vec::new(), None, root_file, &dir, &items)?;
        Ok(c)
    }

    /// Adds the module at `path` written as `items` in `file`, its child modules' files in
    /// `dir`; its index.
    fn add(
        &mut self,
        path: Vec<String>,
        parent: Option<usize>,
        file: &Path,
        dir: &Path,
        items: &[syn::Item],
    ) -> Result<usize, String> {
        let me = self.modules.len();
        self.modules.push(Module {
            path: path.clone(),
            parent,
            ..Module::default()
        });
        let mut paths = Paths {
            file,
            out: Vec::new(),
        };
        for item in items {
            if is_test(item_attrs(item)) {
                continue;
            }
            match item {
                syn::Item::Mod(m) => {
                    let name = m.ident.to_string();
                    let mut child_path = path.clone();
                    child_path.push(name.clone());
                    let child = if let Some((_, inline)) = &m.content {
                        self.add(child_path, Some(me), file, &dir.join(&name), inline)?
                    } else {
                        let child_file = module_file(file, dir, &name, &m.attrs)?;
                        let child_dir = match child_file.file_name().and_then(|f| f.to_str()) {
                            Some("mod.rs") => child_file.parent().map(Path::to_path_buf),
                            _ => Some(child_file.with_extension("")),
                        }
                        .unwrap_or_else(|| dir.join(&name));
                        let child_items = parse(&child_file)?;
                        self.add(child_path, Some(me), &child_file, &child_dir, &child_items)?
                    };
                    self.modules[me].children.insert(name, child);
                }
                syn::Item::Use(u) => {
                    if u.leading_colon.is_some() {
                        continue;
                    }
                    let mut leaves = Vec::new();
                    use_leaves(&mut Vec::new(), &u.tree, &mut leaves);
                    for (name, segs, line) in leaves {
                        paths.out.push(Ref {
                            segs: segs.clone(),
                            file: file.to_path_buf(),
                            line,
                        });
                        match name {
                            Leaf::Name(n) => {
                                self.modules[me].uses.insert(n, segs);
                            }
                            Leaf::Anonymous => {}
                            Leaf::Glob => self.modules[me].globs.push(segs),
                        }
                    }
                }
                other => {
                    if let Some(n) = item_name(other) {
                        self.modules[me].items.insert(n);
                    }
                    paths.visit_item(other);
                }
            }
        }
        self.modules[me].refs = paths.out;
        Ok(me)
    }

    fn root_index(&self) -> usize {
        0
    }

    /// Whether `name` is something module `m` has in scope of its own (a child, an item, a
    /// `use`d name, or one of a glob's).
    fn in_scope(&self, m: usize, name: &str, depth: u32) -> bool {
        let md = &self.modules[m];
        md.children.contains_key(name)
            || md.items.contains(name)
            || md.uses.contains_key(name)
            || (depth < 8
                && md.globs.iter().any(|g| {
                    self.resolve(m, g, depth + 1)
                        .and_then(|r| r.module)
                        .is_some_and(|t| t != m && self.in_scope(t, name, depth + 1))
                }))
    }

    /// Where `segs`, written in module `from`, leads in the crate: every module looked up on
    /// the way (re-exports followed), and the module it ends at when it names one. `None`:
    /// it leaves the crate (another crate, `std`, the prelude) or names a local.
    fn resolve(&self, from: usize, segs: &[String], depth: u32) -> Option<Resolved> {
        if depth > 16 || segs.is_empty() {
            return None;
        }
        let mut cur = from;
        let mut rest = segs;
        let first = segs[0].as_str();
        if first == "crate" {
            cur = self.root_index();
            rest = &segs[1..];
        } else if first != "super" && first != "self" && !self.in_scope(from, first, depth) {
            return None;
        }
        let mut looked = Vec::new();
        let mut k = 0;
        while k < rest.len() {
            let seg = rest[k].as_str();
            let md = &self.modules[cur];
            match seg {
                "super" => {
                    let Some(parent) = md.parent else {
                        return Some(Resolved {
                            looked,
                            module: None,
                        });
                    };
                    cur = parent;
                    k += 1;
                    continue;
                }
                "self" => {
                    k += 1;
                    continue;
                }
                _ => {}
            }
            if let Some(&child) = md.children.get(seg) {
                cur = child;
                looked.push(child);
                k += 1;
                continue;
            }
            if let Some(target) = md.uses.get(seg) {
                let mut full = target.clone();
                full.extend(rest[k + 1..].iter().cloned());
                return Some(self.then(looked, cur, &full, depth));
            }
            if md.items.contains(seg) {
                return Some(Resolved {
                    looked,
                    module: None,
                });
            }
            for g in &md.globs {
                let Some(t) = self.resolve(cur, g, depth + 1).and_then(|r| r.module) else {
                    continue;
                };
                if t != cur && self.in_scope(t, seg, depth + 1) {
                    let mut full = self.modules[t].path.clone();
                    full.insert(0, "crate".to_owned());
                    full.extend(rest[k..].iter().cloned());
                    return Some(self.then(looked, cur, &full, depth));
                }
            }
            // Not found (a name a macro makes, a variant of an item): it is `cur`'s.
            return Some(Resolved {
                looked,
                module: None,
            });
        }
        Some(Resolved {
            looked,
            module: Some(cur),
        })
    }

    /// What was `looked` up so far, then where `segs` (written in `cur`) leads: a re-export
    /// followed. One that leaves the crate ends the path there, in what was looked up.
    fn then(&self, mut looked: Vec<usize>, cur: usize, segs: &[String], depth: u32) -> Resolved {
        match self.resolve(cur, segs, depth + 1) {
            Some(mut r) => {
                looked.append(&mut r.looked);
                r.looked = looked;
                r
            }
            None => Resolved {
                looked,
                module: None,
            },
        }
    }

    /// The absolute path `segs`, written in module `from`, spells (its `use`d names put
    /// back), if it is one of the crate's.
    fn spelled(&self, from: usize, segs: &[String], depth: u32) -> Option<Vec<String>> {
        if depth > 16 || segs.is_empty() {
            return None;
        }
        let md = &self.modules[from];
        let first = segs[0].as_str();
        match first {
            "crate" => Some(segs[1..].to_vec()),
            "super" | "self" => {
                let mut cur = from;
                let mut k = 0;
                while k < segs.len() && matches!(segs[k].as_str(), "super" | "self") {
                    if segs[k] == "super" {
                        cur = self.modules[cur].parent?;
                    }
                    k += 1;
                }
                let mut p = self.modules[cur].path.clone();
                p.extend(segs[k..].iter().cloned());
                Some(p)
            }
            // A child module before a `use`d name: `routing.rs` has `mod score` and
            // `use score::score`.
            _ if md.children.contains_key(first) => {
                let mut p = md.path.clone();
                p.extend(segs.iter().cloned());
                Some(p)
            }
            _ if md.uses.contains_key(first) => {
                let mut full = md.uses[first].clone();
                full.extend(segs[1..].iter().cloned());
                self.spelled(from, &full, depth + 1)
            }
            _ if md.items.contains(first) => {
                let mut p = md.path.clone();
                p.extend(segs.iter().cloned());
                Some(p)
            }
            _ => None,
        }
    }

    /// The top-level names a reference can lead to: the root's modules and what the root
    /// `use`s under a name (the gateway's `ldp`).
    fn top_level(&self) -> BTreeSet<String> {
        let r = &self.modules[self.root_index()];
        r.children.keys().chain(r.uses.keys()).cloned().collect()
    }

    /// The index of the top-level module `m` is in (`None` for the root).
    fn top_of(&self, m: usize) -> Option<&str> {
        self.modules[m].path.first().map(String::as_str)
    }

    /// What each top-level module imports of the others, with the first reference behind
    /// each import.
    pub(super) fn top_imports(&self) -> BTreeMap<String, BTreeMap<String, Ref>> {
        let tops = self.top_level();
        let mut out: BTreeMap<String, BTreeMap<String, Ref>> =
            tops.iter().map(|t| (t.clone(), BTreeMap::new())).collect();
        for (i, m) in self.modules.iter().enumerate() {
            let Some(top) = self.top_of(i) else {
                continue;
            };
            for r in &m.refs {
                let Some(abs) = self.spelled(i, &r.segs, 0) else {
                    continue;
                };
                let Some(target) = abs.first() else {
                    continue;
                };
                if target != top && tops.contains(target) {
                    if let Some(imports) = out.get_mut(top) {
                        imports.entry(target.clone()).or_insert_with(|| r.clone());
                    }
                }
            }
        }
        out
    }

    /// Imports between the files of each folder below the root: folder (a module's path) →
    /// file → file it imports → the first reference behind it.
    pub(super) fn sibling_imports(&self) -> BTreeMap<Vec<String>, Graph> {
        let mut out: BTreeMap<Vec<String>, Graph> = BTreeMap::new();
        for (i, m) in self.modules.iter().enumerate() {
            for r in &m.refs {
                let Some(res) = self.resolve(i, &r.segs, 0) else {
                    continue;
                };
                for t in res.looked {
                    let to = &self.modules[t].path;
                    let common = m.path.iter().zip(to).take_while(|(a, b)| a == b).count();
                    if common == 0 || common >= m.path.len() || common >= to.len() {
                        // The root's level is claim 1's; an ancestor or a descendant is no
                        // sibling.
                        continue;
                    }
                    out.entry(m.path[..common].to_vec())
                        .or_default()
                        .entry(m.path[common].clone())
                        .or_default()
                        .entry(to[common].clone())
                        .or_insert_with(|| r.clone());
                }
            }
        }
        out
    }
}

/// Where a path leads: the modules looked up, and the module it names (if it names one).
struct Resolved {
    looked: Vec<usize>,
    module: Option<usize>,
}

/// Node → node it imports → the first reference behind the import.
pub(super) type Graph = BTreeMap<String, BTreeMap<String, Ref>>;

fn parse(file: &Path) -> Result<Vec<syn::Item>, String> {
    let text =
        std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", rel(file).display()))?;
    syn::parse_file(&text)
        .map(|f| f.items)
        .map_err(|e| format!("{}: {e}", rel(file).display()))
}

/// The file of `mod name;` declared in `file`, whose child modules live in `dir`.
fn module_file(
    file: &Path,
    dir: &Path,
    name: &str,
    attrs: &[syn::Attribute],
) -> Result<PathBuf, String> {
    for a in attrs.iter().filter(|a| a.path().is_ident("path")) {
        if let syn::Meta::NameValue(nv) = &a.meta {
            if let syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) = &nv.value
            {
                let base = file.parent().unwrap_or(Path::new("."));
                return Ok(base.join(s.value()));
            }
        }
    }
    let flat = dir.join(format!("{name}.rs"));
    if flat.is_file() {
        return Ok(flat);
    }
    let nested = dir.join(name).join("mod.rs");
    if nested.is_file() {
        return Ok(nested);
    }
    Err(format!(
        "{}: `mod {name};` has neither {} nor {}",
        rel(file).display(),
        rel(&flat).display(),
        rel(&nested).display()
    ))
}
