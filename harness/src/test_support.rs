//! Helpers of the crate's unit tests.

/// Runs `f` to completion: on madsim's runtime under `--cfg madsim` (where a Tokio runtime
/// cannot be built), on a current-thread Tokio runtime otherwise.
pub(crate) fn block_on<F: std::future::Future>(f: F) -> F::Output {
    #[cfg(madsim)]
    {
        madsim::runtime::Runtime::new().block_on(f)
    }
    #[cfg(not(madsim))]
    {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a current-thread runtime")
            .block_on(f)
    }
}

/// The code of the module at `path` (a `.rs` file, or a directory and every `.rs` file
/// under it) as an import check reads it: comment lines left out, and its unit tests
/// ([`without_unit_tests`]; files named `tests.rs` or under a `tests/` directory) too, since
/// a test may build its input from a higher layer (a scenario file) without the module
/// depending on it. With `crate_root` (the crate's `src`), a `super::` chain that climbs
/// from a file to the crate root reads as `crate::` (`super::scenario` in `copier.rs`).
fn module_code(path: &std::path::Path, crate_root: Option<&std::path::Path>) -> String {
    let mut files = Vec::new();
    let mut stack = vec![path.to_path_buf()];
    while let Some(p) = stack.pop() {
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n == "tests") {
                continue;
            }
            let entries = std::fs::read_dir(&p).unwrap_or_else(|e| panic!("{p:?}: {e}"));
            stack.extend(entries.map(|e| e.expect("a directory entry").path()));
        } else if p.extension().is_some_and(|x| x == "rs")
            && p.file_name().is_some_and(|n| n != "tests.rs")
        {
            files.push(p);
        }
    }
    files.sort();
    let mut code = String::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{file:?}: {e}"));
        // The module's depth below the crate root: `a.rs` and `a/mod.rs` are 1, `a/b.rs` 2.
        let to_root = crate_root.map(|root| {
            let rel = file
                .strip_prefix(root)
                .expect("a file under the crate root");
            let mod_rs = file.file_name().is_some_and(|n| n == "mod.rs");
            "super::".repeat(rel.components().count() - usize::from(mod_rs))
        });
        let lines = without_unit_tests(&text);
        for line in lines.iter().filter(|l| !l.trim_start().starts_with("//")) {
            match &to_root {
                Some(chain) if !chain.is_empty() => code.push_str(&line.replace(chain, "crate::")),
                _ => code.push_str(line),
            }
            code.push('\n');
        }
    }
    code
}

/// The lines of `text` without its unit-test modules: a `#[cfg(...test...)]` line and the
/// `mod tests;` after it, or the `mod tests { ... }` after it through its closing brace
/// (braces counted; the rest of the file is read on).
fn without_unit_tests(text: &str) -> Vec<&str> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let attr = lines[i].trim_start();
        let next = lines.get(i + 1).map_or("", |l| l.trim_start());
        if !(attr.starts_with("#[cfg(") && attr.contains("test") && next.starts_with("mod tests")) {
            out.push(lines[i]);
            i += 1;
            continue;
        }
        i += 1;
        if next.trim_end().ends_with(';') {
            i += 1;
            continue;
        }
        let mut depth = 0i64;
        while i < lines.len() {
            for ch in lines[i].chars() {
                depth += match ch {
                    '{' => 1,
                    '}' => -1,
                    _ => 0,
                };
            }
            i += 1;
            if depth <= 0 {
                break;
            }
        }
    }
    out
}

/// Whether `code` imports module `m` through `prefix` (`"super::"` for siblings,
/// `"crate::"` for the crate's top-level modules): a path `prefix m` not followed by more
/// of an identifier, or `m` inside a group `use prefix{...}` (groups nest:
/// `use super::{a::{B}, c}`).
fn imports(code: &str, prefix: &str, m: &str) -> bool {
    let grouped = code.split(&format!("use {prefix}{{")).skip(1).any(|rest| {
        let mut depth = 1;
        let end = rest.find(|ch| {
            depth += match ch {
                '{' => 1,
                '}' => -1,
                _ => 0,
            };
            depth == 0
        });
        let group = &rest[..end.unwrap_or(rest.len())];
        group.split([',', ' ', '\n', ':', '{', '}']).any(|w| w == m)
    });
    grouped
        || code.match_indices(&format!("{prefix}{m}")).any(|(i, _)| {
            let next = code[i + prefix.len() + m.len()..].chars().next();
            !next.is_some_and(|c| c.is_alphanumeric() || c == '_')
        })
}

/// The first import circle among `modules` (name, code as [`module_code`] reads it), each
/// import found by [`imports`] through `prefix`, as the names along it with the first
/// repeated at the end; `None` when the imports form no circle (a module's paths to itself
/// do not count). A depth-first walk.
pub(crate) fn import_circle(modules: &[(String, String)], prefix: &str) -> Option<Vec<String>> {
    let edges: Vec<Vec<usize>> = (modules.iter())
        .enumerate()
        .map(|(i, (_, code))| {
            (modules.iter().enumerate())
                .filter(|&(j, (m, _))| j != i && imports(code, prefix, m))
                .map(|(j, _)| j)
                .collect()
        })
        .collect();
    // 0 unvisited, 1 on the path, 2 done.
    fn walk(v: usize, edges: &[Vec<usize>], mark: &mut [u8], path: &mut Vec<usize>) -> bool {
        mark[v] = 1;
        path.push(v);
        for &w in &edges[v] {
            if mark[w] == 1 {
                path.push(w);
                return true;
            }
            if mark[w] == 0 && walk(w, edges, mark, path) {
                return true;
            }
        }
        path.pop();
        mark[v] = 2;
        false
    }
    let mut mark = vec![0u8; modules.len()];
    for v in 0..modules.len() {
        let mut path = Vec::new();
        if mark[v] == 0 && walk(v, &edges, &mut mark, &mut path) {
            let start = path
                .iter()
                .position(|&i| Some(&i) == path.last())
                .unwrap_or(0);
            return Some(
                path[start..]
                    .iter()
                    .map(|&i| modules[i].0.clone())
                    .collect(),
            );
        }
    }
    None
}

/// The modules directly under `dir`: each `.rs` file but `skip`'s, and each directory
/// (a module's `x.rs` and its `x/` directory are one module), named by stem, with
/// [`module_code`]'s code; `crate_root` when `dir` is the crate's `src`.
pub(crate) fn modules_in(
    dir: &std::path::Path,
    skip: &[&str],
    crate_root: bool,
) -> Vec<(String, String)> {
    let root = crate_root.then_some(dir);
    let mut by_name: std::collections::BTreeMap<String, String> = Default::default();
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{dir:?}: {e}")) {
        let path = entry.expect("a directory entry").path();
        let Some(name) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        let module = path.is_dir() || path.extension().is_some_and(|x| x == "rs");
        if module && !skip.contains(&name) {
            by_name
                .entry(name.to_string())
                .or_default()
                .push_str(&module_code(&path, root));
        }
    }
    by_name.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module(name: &str, code: &str) -> (String, String) {
        (name.to_string(), code.to_string())
    }

    #[test]
    fn unit_tests_are_left_out_and_the_code_after_them_is_read() {
        let text = "use crate::a;\n#[cfg(test)]\nmod tests;\nuse crate::b;\n\
                    #[cfg(all(test, not(madsim)))]\nmod tests {\n    fn f() {\n        \
                    use crate::z;\n    }\n}\nuse crate::c;\n";
        assert_eq!(
            without_unit_tests(text),
            ["use crate::a;", "use crate::b;", "use crate::c;"]
        );
    }

    /// (Native only: `tempfile` is the real tier's dependency.)
    #[cfg(not(madsim))]
    #[test]
    fn a_super_chain_to_the_crate_root_is_a_crate_path() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let write = |path: &str, code: &str| {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
            std::fs::write(path, code).expect("write");
        };
        write("a.rs", "use super::b::X;\n");
        write("b/mod.rs", "mod c;\n");
        write("b/c.rs", "use super::super::a::Y;\nuse super::d::Z;\n");
        let modules = modules_in(dir.path(), &[], true);
        assert_eq!(
            import_circle(&modules, "crate::"),
            Some(vec!["a".into(), "b".into(), "a".into()])
        );
        // Read as siblings (no crate root), `super::` stays `super::`.
        let siblings = modules_in(dir.path(), &[], false);
        assert_eq!(import_circle(&siblings, "crate::"), None);
    }

    #[test]
    fn a_circle_through_paths_or_nested_groups_is_found_and_named() {
        let straight = [
            module("a", "use crate::b::X;\n"),
            module("b", "use crate::{c::{Y, Z}, d};\n"),
            module("c", "fn f() { crate::a::g() }\n"),
            module("d", ""),
        ];
        assert_eq!(
            import_circle(&straight, "crate::"),
            Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
        );
        // `crate::ab` is not `crate::a`; a layered graph has no circle.
        let layered = [
            module("a", "use crate::b::X;\nuse crate::ab::Y;\n"),
            module("ab", "use crate::b::Z;\n"),
            module("b", ""),
        ];
        assert_eq!(import_circle(&layered, "crate::"), None);
    }
}
