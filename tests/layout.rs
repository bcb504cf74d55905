//! The source tree's layout rules, read from `src/`: no import circles between its files, and
//! no production code outside `src/fused` importing the test oracle (`fused::reference`).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// A module as its path from the crate root (`["train", "resume"]`; `[]` is `lib.rs`).
type Module = Vec<String>;

/// Every `.rs` file under `dir`, with the module it is.
fn modules(src: &Path, dir: &Path, found: &mut BTreeMap<Module, PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            modules(src, &path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let relative = path.strip_prefix(src).unwrap().with_extension("");
            let mut module: Module = relative.iter().map(|part| part.to_string_lossy().into_owned()).collect();
            if module.last().is_some_and(|last| last == "mod" || last == "lib") {
                module.pop();
            }
            found.insert(module, path);
        }
    }
}

/// The file's code without its unit tests (`#[cfg(test)] mod tests { ... }`, last in a file).
fn production_code(source: &str) -> &str {
    source.find("#[cfg(test)]\nmod tests").map_or(source, |at| &source[..at])
}

/// The bodies of the file's `use` declarations (`crate::a::{b, c::d}`), joined across lines.
fn use_trees(code: &str) -> Vec<String> {
    let mut trees = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("use ") {
        let before = &rest[..at];
        let line_start = before.rfind('\n').map_or(0, |n| n + 1);
        let prefix = before[line_start..].trim();
        let is_declaration =
            prefix.is_empty() || prefix == "pub" || (prefix.starts_with("pub(") && prefix.ends_with(')'));
        let end = rest[at..].find(';').map_or(rest.len(), |n| at + n);
        if is_declaration {
            trees.push(rest[at + 4..end].split_whitespace().collect::<Vec<_>>().join(" "));
        }
        rest = &rest[(at + 4).min(end)..];
    }
    trees
}

/// The paths a use tree names, each as its segments: `a::{b, c::{d, e}}` gives `a::b`, `a::c::d`
/// and `a::c::e`.
fn expand(tree: &str) -> Vec<Vec<String>> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let path = tree.split(" as ").next().unwrap();
        return vec![path.split("::").map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect()];
    };
    let prefix: Vec<String> =
        tree[..open].split("::").map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect();
    let inner = &tree[open + 1..tree.rfind('}').unwrap()];
    let (mut items, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&inner[start..]);
    items
        .into_iter()
        .filter(|item| !item.trim().is_empty())
        .flat_map(expand)
        .map(|path| prefix.iter().cloned().chain(path).collect())
        .collect()
}

/// The module a path used in module `from`'s file names: the deepest module along
/// it; `None` for paths outside the crate.
fn target(from: &Module, path: &[String], known: &BTreeMap<Module, PathBuf>) -> Option<Module> {
    let mut segments: Vec<String> = match path.first().map(String::as_str) {
        Some("crate") => path[1..].to_vec(),
        Some("self") => from.iter().chain(&path[1..]).cloned().collect(),
        Some("super") => {
            // `super` in `a/b.rs` or in `a/b/mod.rs` (both the module `a::b`) is `a`.
            let ups = path.iter().take_while(|s| *s == "super").count();
            from[..from.len().checked_sub(ups)?].iter().chain(&path[ups..]).cloned().collect()
        }
        _ => return None,
    };
    while !known.contains_key(&segments) {
        segments.pop()?;
    }
    Some(segments)
}

/// Which module's file imports which others (`crate::`, `super::`, `self::` paths only).
fn import_graph() -> (BTreeMap<Module, BTreeSet<Module>>, BTreeMap<Module, PathBuf>) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut known = BTreeMap::new();
    modules(&src, &src, &mut known);
    let mut graph: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (module, file) in &known {
        let source = fs::read_to_string(file).unwrap();
        for tree in use_trees(production_code(&source)) {
            for path in expand(&tree) {
                if let Some(to) = target(module, &path, &known).filter(|to| to != module) {
                    graph.entry(module.clone()).or_default().insert(to);
                }
            }
        }
    }
    (graph, known)
}

/// A circle of imports through `from`, if there is one: the modules along it.
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

#[test]
fn no_file_of_the_library_imports_itself_through_others() {
    let (graph, _) = import_graph();
    let circles: Vec<String> = graph
        .keys()
        .filter_map(|module| circle_through(&graph, module))
        .map(|circle| circle.iter().map(name).chain([name(&circle[0])]).collect::<Vec<_>>().join(" -> "))
        .collect();
    assert!(circles.is_empty(), "import circles (move the shared items into a leaf module):\n{}", circles.join("\n"));
}

#[test]
fn only_the_fused_ops_import_the_reference_path() {
    let (graph, _) = import_graph();
    let oracle: Module = vec!["fused".into(), "reference".into()];
    let importers: Vec<String> = graph
        .iter()
        .filter(|(module, imports)| imports.contains(&oracle) && module.first().is_none_or(|top| top != "fused"))
        .map(|(module, _)| name(module))
        .collect();
    assert!(importers.is_empty(), "production code importing the test oracle: {importers:?}");
}

#[test]
fn the_import_reader_sees_circles_and_nested_trees() {
    // The reader itself, on a made-up tree: a circle it must find, and paths it must expand.
    assert_eq!(
        expand("super::{a::{B, c::D}, e as F}"),
        vec![vec!["super", "a", "B"], vec!["super", "a", "c", "D"], vec!["super", "e"]]
    );
    let trees = use_trees("use std::fs;\npub(crate) use crate::x::{\n    Y,\n    Z,\n};\n// a use of words\n");
    assert_eq!(trees, vec!["std::fs", "crate::x::{ Y, Z, }"]);
    let module = |s: &str| s.split('/').map(String::from).collect::<Module>();
    let graph: BTreeMap<Module, BTreeSet<Module>> = [
        (module("a/b"), BTreeSet::from([module("a/c")])),
        (module("a/c"), BTreeSet::from([module("d")])),
        (module("d"), BTreeSet::from([module("a/b")])),
    ]
    .into();
    let circle = circle_through(&graph, &module("a/b")).expect("a -> c -> d -> a is a circle");
    assert_eq!(circle.iter().map(name).collect::<Vec<_>>(), ["a/b", "a/c", "d"]);
    let open: BTreeMap<Module, BTreeSet<Module>> = [(module("a"), BTreeSet::from([module("b")]))].into();
    assert_eq!(circle_through(&open, &module("a")), None);
}
