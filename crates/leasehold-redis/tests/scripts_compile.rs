//! The Lua in `src/lua/` compiles under Lua 5.1 (Redis's), piece by piece and as each script the
//! backend sends (the pieces joined exactly as `src/scripts.rs` joins them), and no script reads
//! or writes a global beyond those Redis gives it: Redis refuses to create a global at run time,
//! and a misspelled or missing helper would only fail on the server, on the path that calls it.
//!
//! Needs `luac5.1` (Debian package `lua5.1`, which `scripts/test.sh` installs); without it the
//! tests fail, never skip.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The globals a Redis script may read: Redis's own objects and libraries, and Lua's base
/// functions that Redis loads.
const REDIS_GLOBALS: &[&str] = &[
    "redis", "KEYS", "ARGV", "cjson", "cmsgpack", "bit", "struct", "math", "string", "table",
    "tonumber", "tostring", "type", "pairs", "ipairs", "unpack", "error", "pcall", "xpcall",
    "next", "select", "assert", "rawget", "rawset", "rawequal",
];

/// `luac5.1 -p -l` of `source` (a file, or `-` for `stdin`): the bytecode listing, parsed but not
/// written. Panics with luac's message when it does not compile.
fn listing(what: &str, source: &str, stdin: Option<&str>) -> String {
    let mut child = Command::new("luac5.1")
        .args(["-p", "-l", source])
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot run luac5.1 ({e}): install Lua 5.1's compiler (Debian: lua5.1)")
        });
    if let Some(text) = stdin {
        let mut pipe = child.stdin.take().expect("luac5.1's stdin");
        pipe.write_all(text.as_bytes()).expect("writing to luac5.1");
    }
    let out = child.wait_with_output().expect("waiting for luac5.1");
    assert!(
        out.status.success(),
        "{what} does not compile under Lua 5.1: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    String::from_utf8(out.stdout).expect("luac5.1's listing is UTF-8")
}

/// Every `.lua` file under `dir`, sorted.
fn lua_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "lua") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

fn pieces() -> Vec<PathBuf> {
    let files = lua_files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lua"));
    assert!(
        files.len() > 20,
        "src/lua holds only {} pieces",
        files.len()
    );
    files
}

/// Every script sent to a server: the backend's, and the fence gate's (which the C library hands
/// out too).
fn scripts() -> Vec<(&'static str, &'static str)> {
    let mut all = leasehold_redis::script_texts().to_vec();
    all.push(("FENCE_GATE", leasehold_redis::fence_gate::SCRIPT));
    assert!(all.len() > 20, "only {} scripts", all.len());
    all
}

/// Each global the listing reads or writes, with its line: `(op, name, line)`.
fn globals(listing: &str) -> Vec<(&str, &str, usize)> {
    let mut found = Vec::new();
    for row in listing.lines() {
        let fields: Vec<&str> = row.split_whitespace().collect();
        // `<pc> [<line>] GETGLOBAL <a> <k> ; <name>`
        let Some(op) = fields
            .get(2)
            .filter(|op| **op == "GETGLOBAL" || **op == "SETGLOBAL")
        else {
            continue;
        };
        let line = fields[1]
            .trim_matches(|c| c == '[' || c == ']')
            .parse()
            .unwrap_or(0);
        let name = row.rsplit_once("; ").map_or("?", |(_, name)| name);
        found.push((*op, name, line));
    }
    found
}

#[test]
fn every_piece_compiles_on_its_own() {
    for path in pieces() {
        let shown = path.display().to_string();
        listing(&shown, &shown, None);
    }
}

#[test]
fn every_script_compiles_and_uses_only_redis_globals() {
    let allowed: BTreeSet<&str> = REDIS_GLOBALS.iter().copied().collect();
    let mut wrong = Vec::new();
    for (name, text) in scripts() {
        let listed = listing(&format!("script {name}"), "-", Some(text));
        for (op, global, line) in globals(&listed) {
            if op == "SETGLOBAL" || !allowed.contains(global) {
                let source = text.lines().nth(line.saturating_sub(1)).unwrap_or("");
                wrong.push(format!(
                    "{name} line {line}: {op} {global}   ({})",
                    source.trim()
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "scripts use globals Redis does not give them (a helper missing from the script, or a \
         `local` left out):\n{}",
        wrong.join("\n")
    );
}

/// A piece no script includes is stale: it is reviewed as if it ran.
#[test]
fn every_piece_is_in_a_script() {
    let scripts = scripts();
    for path in pieces() {
        let text = std::fs::read_to_string(&path).expect("a piece's text");
        assert!(
            scripts.iter().any(|(_, script)| script.contains(&text)),
            "{} is in no script",
            path.display()
        );
    }
}

/// The check itself sees what it must: a global written, a global read that Redis lacks.
#[test]
fn the_globals_check_sees_them() {
    let listed = listing(
        "a probe",
        "-",
        Some("local a = redis.call('GET', KEYS[1])\nb = a\nreturn helper(b)\n"),
    );
    let found = globals(&listed);
    assert!(found.contains(&("SETGLOBAL", "b", 2)), "{found:?}");
    assert!(found.contains(&("GETGLOBAL", "helper", 3)), "{found:?}");
    assert!(found.contains(&("GETGLOBAL", "redis", 1)), "{found:?}");
}
