//! The source tree's layout rules, read from `src/` with a Rust parser (`syn`): no import circles
//! between its files, nor between its top-level modules (`run`, `data`, `hf`, ...), and no
//! production code outside `src/fused` using the test oracle (`fused::reference`).
//!
//! A file depends on another when it names an item defined there: in a `use` declaration, in a
//! path written in its code (`crate::io::write_atomically(..)`), by calling an exported macro, or
//! by calling a method that the other file adds to a type (`impl NormScheme { fn info }` in
//! `norm/scheme_names.rs`; seen in the type's own file and through the type's name), followed
//! through the re-exports of `mod.rs` files and `lib.rs` to the file that defines the item. A module's own re-exports
//! (`pub use child::Item`) declare its interface and are not dependencies of its file, and what a
//! file takes from the `mod.rs` of a module enclosing it (`super::helper`) is its module's shared
//! scope, not counted; unit tests (`#[cfg(test)]`) are left out.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

use syn::visit::Visit;

/// A module as its path from the crate root (`["train", "resume"]`; `[]` is `lib.rs`).
type Module = Vec<String>;

/// The parsed files of a crate and the names each module's `use` declarations bring in.
struct Tree {
    files: BTreeMap<Module, syn::File>,
    /// `(module, name) -> absolute path` for every name a `use` binds in a module.
    bindings: BTreeMap<(Module, String), Vec<String>>,
    /// The names a glob `use` (`use crate::fused::*`) brings into a module: what the globbed
    /// module's own `use`s bind, and the items it defines.
    globbed: BTreeMap<(Module, String), Vec<String>>,
    /// The file that defines each `#[macro_export]` macro (called anywhere by its name alone).
    exported_macros: BTreeMap<String, Module>,
}

/// The methods a file adds to a type that another file defines (`impl NormScheme { fn info }` in
/// `norm/scheme_names.rs`), as `(the type's file, the type, method) -> the adding files`: a call
/// of one through the type (`NormScheme::defaults()`, or `Self::info()` and `self.info()` in an
/// `impl` of it) depends on the adding file, though no path names it.
fn extension_methods(tree: &Tree) -> BTreeMap<(Module, String, String), BTreeSet<Module>> {
    let mut extensions: BTreeMap<_, BTreeSet<Module>> = BTreeMap::new();
    for (module, file) in &tree.files {
        for item in file.items.iter().filter(|item| !item_test_only(item)) {
            let syn::Item::Impl(block) = item else { continue };
            let Some(ty) = impl_type(block) else { continue };
            let Some(home) = (block.trait_.is_none()).then(|| tree.home_of(module, &ty)).flatten() else { continue };
            if home == *module {
                continue;
            }
            for item in &block.items {
                if let syn::ImplItem::Fn(method) = item {
                    if !test_only(&method.attrs) {
                        let key = (home.clone(), ty.clone(), method.sig.ident.to_string());
                        extensions.entry(key).or_default().insert(module.clone());
                    }
                }
            }
        }
    }
    extensions
}

/// The name of the type an `impl` block is for (`NormScheme` in `impl NormScheme`).
fn impl_type(block: &syn::ItemImpl) -> Option<String> {
    let syn::Type::Path(ty) = &*block.self_ty else { return None };
    ty.path.segments.last().map(|segment| segment.ident.to_string())
}

/// Every `.rs` file under `dir`, as `(module, source)`.
fn sources(src: &Path, dir: &Path, found: &mut Vec<(Module, String)>) {
    for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(src, &path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let relative = path.strip_prefix(src).unwrap().with_extension("");
            let mut module: Module = relative.iter().map(|part| part.to_string_lossy().into_owned()).collect();
            if module.last().is_some_and(|last| last == "mod" || last == "lib") {
                module.pop();
            }
            let source = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            found.push((module, source));
        }
    }
}

/// Whether an item is compiled for unit tests only: `#[cfg(test)]` or `#[cfg(all(test, ...))]`.
fn test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| match &attr.meta {
        syn::Meta::List(list) if list.path.is_ident("cfg") => {
            let condition: String = list.tokens.to_string().split_whitespace().collect();
            condition == "test" || condition.starts_with("all(test,")
        }
        _ => false,
    })
}

/// The paths a use tree names, each with the name it binds (`None` for a glob).
fn use_paths(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<(Vec<String>, Option<String>)>) {
    match tree {
        syn::UseTree::Path(path) => {
            prefix.push(path.ident.to_string());
            use_paths(&path.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(name) => {
            let name = name.ident.to_string();
            // `use a::b::{self}` names `a::b`.
            let path =
                if name == "self" { prefix.clone() } else { prefix.iter().cloned().chain([name.clone()]).collect() };
            let bound = path.last().cloned();
            out.push((path, bound));
        }
        syn::UseTree::Rename(rename) => {
            let path = prefix.iter().cloned().chain([rename.ident.to_string()]).collect();
            out.push((path, Some(rename.rename.to_string())));
        }
        syn::UseTree::Glob(_) => out.push((prefix.clone(), None)),
        syn::UseTree::Group(group) => group.items.iter().for_each(|item| use_paths(item, prefix, out)),
    }
}

impl Tree {
    fn parse(sources: Vec<(Module, String)>) -> Self {
        let files: BTreeMap<Module, syn::File> = sources
            .into_iter()
            .map(|(module, source)| {
                let file = syn::parse_file(&source).unwrap_or_else(|e| panic!("{}: {e}", name(&module)));
                (module, file)
            })
            .collect();
        let exported_macros = files
            .iter()
            .flat_map(|(module, file)| file.items.iter().map(move |item| (module, item)))
            .filter_map(|(module, item)| match item {
                syn::Item::Macro(item) if item.attrs.iter().any(|attr| attr.path().is_ident("macro_export")) => {
                    Some((item.ident.as_ref()?.to_string(), module.clone()))
                }
                _ => None,
            })
            .collect();
        let mut tree = Tree { files, bindings: BTreeMap::new(), globbed: BTreeMap::new(), exported_macros };
        let mut bindings = BTreeMap::new();
        let mut globs = Vec::new();
        for (module, file) in &tree.files {
            for item in file.items.iter().filter(|item| !item_test_only(item)) {
                if let syn::Item::Use(item) = item {
                    let mut paths = Vec::new();
                    use_paths(&item.tree, &mut Vec::new(), &mut paths);
                    for (path, bound) in paths {
                        match (bound, tree.absolute(module, &path)) {
                            (Some(bound), Some(absolute)) => {
                                bindings.insert((module.clone(), bound), absolute);
                            }
                            (None, Some(absolute)) => globs.push((module.clone(), absolute)),
                            _ => {}
                        }
                    }
                }
            }
        }
        // One level of globs: the names the globbed module binds or defines.
        let mut globbed = BTreeMap::new();
        for (module, target) in globs {
            for ((at, name), path) in &bindings {
                if *at == target {
                    globbed.insert((module.clone(), name.clone()), path.clone());
                }
            }
            for name in tree.files.get(&target).map(defined_names).unwrap_or_default() {
                globbed.insert((module.clone(), name.clone()), target.iter().cloned().chain([name]).collect());
            }
        }
        tree.bindings = bindings;
        tree.globbed = globbed;
        tree
    }

    /// `path` as written in `module`, from the crate root; `None` for another crate's.
    fn absolute(&self, module: &Module, path: &[String]) -> Option<Vec<String>> {
        let first = path.first()?;
        // A path in code whose head a `use` of the module binds (`use crate::fused; fused::f()`),
        // or the bound name alone (`f()` after `pub use d::f`, a re-export the file also calls).
        if let Some(bound) = self.bindings.get(&(module.clone(), first.clone())) {
            return Some(bound.iter().chain(&path[1..]).cloned().collect());
        }
        // A name a glob brought in counts wherever it is used, one word or not.
        if let Some(bound) = self.globbed.get(&(module.clone(), first.clone())) {
            return Some(bound.iter().chain(&path[1..]).cloned().collect());
        }
        Some(match first.as_str() {
            "crate" => path[1..].to_vec(),
            "self" => module.iter().chain(&path[1..]).cloned().collect(),
            "super" => {
                let ups = path.iter().take_while(|s| *s == "super").count();
                module[..module.len().checked_sub(ups)?].iter().chain(&path[ups..]).cloned().collect()
            }
            // Edition 2018 paths: a child module of this one (`use config::X` in a mod.rs). A word
            // alone (`config`) is more likely a local variable than the module itself.
            child
                if path.len() > 1
                    && self
                        .files
                        .contains_key(&module.iter().cloned().chain([child.to_string()]).collect::<Module>()) =>
            {
                module.iter().chain(path).cloned().collect()
            }
            _ => return None,
        })
    }

    /// Whether `module` is a `mod.rs` (or `lib.rs`) with files below it.
    fn has_children(&self, module: &Module) -> bool {
        self.files.keys().any(|other| other.len() > module.len() && other.starts_with(module))
    }

    /// The file that defines the type `name` as `module` sees it (`Self` there being its own).
    fn home_of(&self, module: &Module, name: &str) -> Option<Module> {
        if name == "Self" || self.files.get(module).is_some_and(|file| defined_names(file).iter().any(|n| n == name)) {
            return Some(module.clone());
        }
        self.bindings.get(&(module.clone(), name.to_string())).and_then(|path| self.defining_module(path))
    }

    /// The file that defines what `path` (from the crate root) names, following re-exports.
    fn defining_module(&self, path: &[String]) -> Option<Module> {
        let mut path = path.to_vec();
        for _ in 0..32 {
            let mut module = path.clone();
            while !self.files.contains_key(&module) {
                module.pop()?;
            }
            let Some(next) = path.get(module.len()) else { return Some(module) };
            match self.bindings.get(&(module.clone(), next.clone())) {
                Some(target) => path = target.iter().chain(&path[module.len() + 1..]).cloned().collect(),
                None => return Some(module),
            }
        }
        None // A re-export loop: not this test's concern.
    }

    /// Which files each file depends on.
    fn dependencies(&self) -> BTreeMap<Module, BTreeSet<Module>> {
        let extensions = extension_methods(self);
        let mut graph = BTreeMap::new();
        for (module, file) in &self.files {
            let mut paths = PathsOf::default();
            for item in file.items.iter().filter(|item| !item_test_only(item)) {
                match item {
                    // A private `use` is a dependency, as is any in a file without child modules; a
                    // public one in a module's `mod.rs` declares the module's interface.
                    syn::Item::Use(item)
                        if matches!(item.vis, syn::Visibility::Inherited) || !self.has_children(module) =>
                    {
                        let mut found = Vec::new();
                        use_paths(&item.tree, &mut Vec::new(), &mut found);
                        paths.paths.extend(found.into_iter().map(|(path, _)| path));
                    }
                    syn::Item::Use(_) => {}
                    other => paths.visit_item(other),
                }
            }
            let macros = paths.macros.iter().filter_map(|name| self.exported_macros.get(name).cloned());
            let methods = paths
                .type_calls
                .iter()
                .filter_map(|(ty, method)| {
                    let name = ty.last()?.clone();
                    let home = match &ty[..] {
                        [name] => self.home_of(module, name),
                        _ => self.absolute(module, ty).and_then(|path| self.defining_module(&path)),
                    };
                    extensions.get(&(home?, name, method.clone()))
                })
                .flatten()
                .cloned();
            let depends: BTreeSet<Module> = paths
                .paths
                .iter()
                .filter_map(|path| self.absolute(module, path))
                .filter_map(|path| self.defining_module(&path))
                .chain(macros)
                .chain(methods)
                // A module's own `mod.rs` is the scope its files share (they see its private
                // items): a file using what an enclosing `mod.rs` defines is not counted.
                .filter(|to| !module.starts_with(to))
                .collect();
            graph.insert(module.clone(), depends);
        }
        graph
    }
}

/// The names of the items a file defines (functions, types, constants, statics, traits, macros).
fn defined_names(file: &syn::File) -> Vec<String> {
    file.items
        .iter()
        .filter(|item| !item_test_only(item))
        .filter_map(|item| match item {
            syn::Item::Fn(item) => Some(item.sig.ident.to_string()),
            syn::Item::Struct(item) => Some(item.ident.to_string()),
            syn::Item::Enum(item) => Some(item.ident.to_string()),
            syn::Item::Type(item) => Some(item.ident.to_string()),
            syn::Item::Const(item) => Some(item.ident.to_string()),
            syn::Item::Static(item) => Some(item.ident.to_string()),
            syn::Item::Trait(item) => Some(item.ident.to_string()),
            _ => None,
        })
        .collect()
}

fn item_test_only(item: &syn::Item) -> bool {
    match item {
        syn::Item::Mod(item) => test_only(&item.attrs),
        syn::Item::Fn(item) => test_only(&item.attrs),
        syn::Item::Use(item) => test_only(&item.attrs),
        syn::Item::Impl(item) => test_only(&item.attrs),
        _ => false,
    }
}

/// What a file's code names of other files.
#[derive(Default)]
struct PathsOf {
    /// Every path written in code (`crate::a::b`, `super::c`, `Self::d`), nested `use`s and the
    /// arguments of macros written like calls (`format!("{}", crate::a::f())`) included; paths
    /// inside inline modules as seen from the file's own module.
    paths: Vec<Vec<String>>,
    /// How many inline modules deep the visitor is.
    depth: usize,
    /// The macros called by their name alone or from the root (`errln!`, `crate::errln!`: where
    /// `#[macro_export]` puts them).
    macros: Vec<String>,
    /// The functions called through a type, as its path and the name (`([NormScheme], defaults)`),
    /// `Self::info()` and `self.info()` as calls through the type of the `impl` they are in.
    type_calls: Vec<(Vec<String>, String)>,
    /// The types of the `impl` blocks the visitor is in, innermost last.
    impl_types: Vec<String>,
}

impl PathsOf {
    /// Records `path` as written `self.depth` inline modules deep.
    fn push(&mut self, mut path: Vec<String>) {
        let depth = self.depth;
        let ups = path.iter().take_while(|s| *s == "super").count();
        if depth > 0 && ups > 0 {
            // `super` climbs the inline modules first: short of the file's module, the path
            // stays in this file.
            path = if ups < depth { vec!["self".into()] } else { path.split_off(depth) };
            if ups == depth {
                path.insert(0, "self".into());
            }
        }
        self.paths.push(path);
    }
}

impl<'ast> Visit<'ast> for PathsOf {
    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        if let [ty @ .., function] = &segments[..] {
            let ty = match ty {
                [only] if only == "Self" => vec![self.impl_types.last().unwrap_or(only).clone()],
                _ => ty.to_vec(),
            };
            if !ty.is_empty() {
                self.type_calls.push((ty, function.clone()));
            }
        }
        self.push(path.segments.iter().map(|s| s.ident.to_string()).collect());
        syn::visit::visit_path(self, path);
    }

    fn visit_expr_method_call(&mut self, call: &'ast syn::ExprMethodCall) {
        let on_self = matches!(&*call.receiver, syn::Expr::Path(path) if path.path.is_ident("self"));
        if let Some(ty) = self.impl_types.last().filter(|_| on_self) {
            self.type_calls.push((vec![ty.clone()], call.method.to_string()));
        }
        syn::visit::visit_expr_method_call(self, call);
    }

    fn visit_item_impl(&mut self, block: &'ast syn::ItemImpl) {
        if !test_only(&block.attrs) {
            self.impl_types.push(impl_type(block).unwrap_or_default());
            syn::visit::visit_item_impl(self, block);
            self.impl_types.pop();
        }
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        let mut found = Vec::new();
        use_paths(&item.tree, &mut Vec::new(), &mut found);
        found.into_iter().for_each(|(path, _)| self.push(path));
    }

    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        if !test_only(&item.attrs) {
            self.depth += 1;
            syn::visit::visit_item_mod(self, item);
            self.depth -= 1;
        }
    }

    fn visit_item_fn(&mut self, item: &'ast syn::ItemFn) {
        if !test_only(&item.attrs) {
            syn::visit::visit_item_fn(self, item);
        }
    }

    fn visit_impl_item_fn(&mut self, item: &'ast syn::ImplItemFn) {
        if !test_only(&item.attrs) {
            syn::visit::visit_impl_item_fn(self, item);
        }
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        use syn::punctuated::Punctuated;
        // `errln!` or `crate::errln!`: `#[macro_export]` puts a macro at the crate's root.
        let segments: Vec<String> = mac.path.segments.iter().map(|s| s.ident.to_string()).collect();
        if let [name] | [_, name] = &segments[..] {
            if segments.len() == 1 || segments[0] == "crate" {
                self.macros.push(name.clone());
            }
        }
        syn::visit::visit_macro(self, mac);
        let arguments = mac.parse_body_with(Punctuated::<syn::Expr, syn::Token![,]>::parse_terminated);
        for argument in arguments.iter().flatten() {
            self.visit_expr(argument);
        }
    }
}

/// A circle of dependencies through `from`, if there is one: the modules along it.
fn circle_through(graph: &BTreeMap<Module, BTreeSet<Module>>, from: &Module) -> Option<Vec<Module>> {
    fn search(
        graph: &BTreeMap<Module, BTreeSet<Module>>,
        start: &Module,
        at: &Module,
        path: &mut Vec<Module>,
        seen: &mut BTreeSet<Module>,
    ) -> bool {
        for next in graph.get(at).into_iter().flatten() {
            if next == start {
                return true;
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if search(graph, start, next, path, seen) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    let mut path = vec![from.clone()];
    search(graph, from, from, &mut path, &mut BTreeSet::new()).then_some(path)
}

fn name(module: &Module) -> String {
    if module.is_empty() {
        "lib".into()
    } else {
        module.join("/")
    }
}

/// Each circle of `graph` once, as `a -> b -> a`.
fn circles(graph: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<String> {
    let mut seen: BTreeSet<BTreeSet<Module>> = BTreeSet::new();
    graph
        .keys()
        .filter_map(|module| circle_through(graph, module))
        .filter(|circle| seen.insert(circle.iter().cloned().collect()))
        .map(|circle| circle.iter().map(name).chain([name(&circle[0])]).collect::<Vec<_>>().join(" -> "))
        .collect()
}

fn crate_tree() -> Tree {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = Vec::new();
    sources(&src, &src, &mut found);
    Tree::parse(found)
}

#[test]
fn no_file_of_the_library_depends_on_itself_through_others() {
    let found = circles(&crate_tree().dependencies());
    assert!(
        found.is_empty(),
        "dependency circles (move what both sides need into a leaf module):\n{}",
        found.join("\n")
    );
}

/// `graph` seen from the top: each file stands for the top-level module it belongs to (`train`
/// for `train/resume.rs`; a file at the crate root for itself), and what a module's files use of
/// each other drops out.
fn top_level(graph: &BTreeMap<Module, BTreeSet<Module>>) -> BTreeMap<Module, BTreeSet<Module>> {
    let top = |module: &Module| module.iter().take(1).cloned().collect::<Module>();
    let mut modules: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (from, to) in graph {
        let depends = modules.entry(top(from)).or_default();
        depends.extend(to.iter().map(top).filter(|to| *to != top(from)));
    }
    modules
}

#[test]
fn no_module_of_the_library_depends_on_itself_through_others() {
    let found = circles(&top_level(&crate_tree().dependencies()));
    assert!(
        found.is_empty(),
        "dependency circles between modules (a module's shared names belong in the lower one):\n{}",
        found.join("\n")
    );
}

/// The reader sees what the real tree is known to use, one edge of each kind it follows: a `use`
/// line, a path through a re-export, a macro by its name, a method added in another file.
#[test]
fn the_reader_sees_known_dependencies_of_the_real_tree() {
    let graph = crate_tree().dependencies();
    let module = |s: &str| s.split('/').map(String::from).collect::<Module>();
    for (from, to) in [
        ("norm/scheme_names", "norm/scheme"),
        ("train/config_file", "train/config"),
        ("train/config_file", "run"),
        ("cli/train_settings", "cli/console"),
        ("cli/lists", "norm/scheme_names"),
        ("train/sweep_directory", "train/config_file"),
        ("cli/train_settings", "train/config_file"),
    ] {
        assert!(
            graph[&module(from)].contains(&module(to)),
            "{from} -> {to} unseen; it sees {:?}",
            graph[&module(from)]
        );
    }
}

#[test]
fn only_the_fused_ops_use_the_reference_path() {
    let graph = crate_tree().dependencies();
    let oracle: Module = vec!["fused".into(), "reference".into()];
    // `fused/mod.rs` dispatches to the reference when a user asks for it
    // (`LAYERNORM_SCALING_OPS=reference`); nothing else runs it.
    let dispatcher: Module = vec!["fused".into()];
    let users: Vec<String> = graph
        .iter()
        .filter(|(module, depends)| depends.contains(&oracle) && **module != dispatcher)
        .map(|(module, _)| name(module))
        .collect();
    assert!(users.is_empty(), "production code using the test oracle: {users:?}");
    assert!(graph[&dispatcher].contains(&oracle), "the reader no longer sees the dispatcher's use of the oracle");
}

#[test]
fn the_reader_follows_re_exports_and_paths_in_code() {
    let module = |s: &str| s.split('/').filter(|p| !p.is_empty()).map(String::from).collect::<Module>();
    let tree = |files: &[(&str, &str)]| {
        Tree::parse(files.iter().map(|(path, source)| (module(path), source.to_string())).collect())
    };
    // `a/b.rs` names `crate::Thing`, which lib.rs re-exports from `c/d.rs` through `c/mod.rs`;
    // `c/d.rs` calls `crate::a::b::helper()` in its code, a comment and a test module aside.
    let circle = tree(&[
        ("", "pub mod a; pub mod c; pub use c::Thing;"),
        ("a", "pub mod b;"),
        ("a/b", "use crate::{Thing, /* x, */ a};\npub fn helper() {}"),
        ("c", "mod d;\npub use d::Thing;"),
        ("c/d", "pub struct Thing;\nfn f() { crate::a::b::helper() }\n#[cfg(test)]\nmod tests { use crate::a::b; }"),
    ]);
    let graph = circle.dependencies();
    // `crate::a` is `a/b`'s own module: its shared scope, not counted.
    assert_eq!(graph[&module("a/b")], BTreeSet::from([module("c/d")]));
    assert_eq!(graph[&module("c/d")], BTreeSet::from([module("a/b")]));
    assert_eq!(graph[&module("c")], BTreeSet::new(), "a re-export is not a dependency");
    let calling = tree(&[("", "pub mod c;"), ("c", "mod d; pub use d::g; fn f() { g() }"), ("c/d", "pub fn g() {}")]);
    assert_eq!(calling.dependencies()[&module("c")], BTreeSet::from([module("c/d")]), "a re-export called");
    assert_eq!(circles(&graph), vec!["a/b -> c/d -> a/b"]);
    // Without the call, and with the only other use in a test module, there is none.
    let open = tree(&[
        ("", "pub mod a; pub mod c; pub use c::Thing;"),
        ("a", "pub mod b;"),
        ("a/b", "use crate::Thing;\npub fn helper() {}"),
        ("c", "mod d;\npub use d::Thing;"),
        ("c/d", "pub struct Thing;\n#[cfg(test)]\nmod tests { use crate::a::b::helper; }"),
    ]);
    assert!(circles(&open.dependencies()).is_empty());
}

#[test]
fn the_reader_follows_bound_heads_macros_and_inline_modules() {
    let module = |s: &str| s.split('/').filter(|p| !p.is_empty()).map(String::from).collect::<Module>();
    let graph = |files: &[(&str, &str)]| {
        Tree::parse(files.iter().map(|(path, source)| (module(path), source.to_string())).collect()).dependencies()
    };
    let lib = ("", "pub mod a; pub mod b;");
    // A head bound by `use`, a path inside a macro's arguments, a `super` out of an inline module.
    for a in [
        "use crate::b; pub fn f() { b::g() }",
        "pub fn f() { let _ = format!(\"{}\", crate::b::g()); }",
        "mod inner { pub fn f() { super::super::b::g() } }",
    ] {
        let graph = graph(&[lib, ("a", a), ("b", "pub fn g() {}")]);
        assert_eq!(graph[&module("a")], BTreeSet::from([module("b")]), "{a}");
    }
    // An exported macro called by its name alone or from the crate's root, in code or in an item
    // position.
    for a in ["pub fn f() { say!(\"x\") }", "say!(\"x\");", "pub fn f() { crate::say!(\"x\") }"] {
        let graph = graph(&[lib, ("a", a), ("b", "#[macro_export]\nmacro_rules! say { ($e:expr) => { $e } }")]);
        assert_eq!(graph[&module("a")], BTreeSet::from([module("b")]), "{a}");
    }
    // A name a glob brings in, through the globbed module's re-export, to the file defining it.
    let globbed = graph(&[
        ("", "pub mod a; pub mod c;"),
        ("a", "use crate::c::*; pub fn f() { g() }"),
        ("c", "mod d; pub use d::g;"),
        ("c/d", "pub fn g() {}"),
    ]);
    assert_eq!(globbed[&module("a")], BTreeSet::from([module("c"), module("c/d")]));
    // A method that another file adds to a type, called in the type's file on a value or through
    // `Self`, depends on that file.
    let extended = ("b", "use crate::a::T; impl T { pub fn g(&self) {} }");
    for a in ["pub struct T; impl T { fn f(&self) { self.g() } }", "pub struct T; impl T { fn f() { Self::g() } }"] {
        let graph = graph(&[lib, ("a", a), extended]);
        assert_eq!(graph[&module("a")], BTreeSet::from([module("b")]), "{a}");
        assert_eq!(circles(&graph), vec!["a -> b -> a"]);
    }
    // Elsewhere, called through the type, it does too; a method of that name called on another
    // value (another type's, or another type's `self`) does not.
    let files = [("", "pub mod a; pub mod b; pub mod c;"), ("a", "pub struct T; fn f(x: u8) { x.g() }"), extended];
    for (c, depends) in [
        ("use crate::a::T; fn f() { T::g() }", true),
        ("fn f() { crate::a::T::g() }", true),
        ("fn f(x: u8) { x.g() }", false),
        ("struct U; impl U { fn g(&self) {} fn f(&self) { self.g() } }", false),
    ] {
        let graph = graph(&[files.as_slice(), &[("c", c)]].concat());
        assert_eq!(graph[&module("c")].contains(&module("b")), depends, "{c}");
        assert_eq!(graph[&module("a")], BTreeSet::new(), "a's x.g() is not T's");
    }
    // Test-only code in any form, a local variable named like a child module, and `super` that
    // stays inside the file are not dependencies.
    for a in [
        "mod b; #[cfg(all(test, feature = \"x\"))] fn t() { crate::c::h() }",
        "mod b; struct S; impl S { #[cfg(test)] fn t() { crate::c::h() } }",
        "mod b; fn f(b: u8) -> u8 { b }",
        "mod b; mod inner { pub fn f() { super::g() } } fn g() {}",
    ] {
        let graph = graph(&[("", "pub mod a; pub mod c;"), ("a", a), ("a/b", ""), ("c", "pub fn h() {}")]);
        assert_eq!(graph[&module("a")], BTreeSet::new(), "{a}");
    }
}
