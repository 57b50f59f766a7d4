//! One version everywhere a user or a package manager reads it, and a `rust-version` that is what the
//! locked dependencies really need.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: impl AsRef<Path>) -> String {
    let path = root().join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

const VERSION: &str = env!("CARGO_PKG_VERSION");

#[test]
fn the_changelog_s_top_entry_is_this_version() {
    let changelog = read("CHANGELOG.md");
    let top = changelog
        .lines()
        .find(|l| l.starts_with("## "))
        .expect("CHANGELOG.md has an entry");
    assert!(
        top.starts_with(&format!("## {VERSION} ")) || top == format!("## {VERSION}"),
        "CHANGELOG.md's top entry `{top}` is not {VERSION}"
    );
}

#[test]
fn the_php_package_and_the_c_header_name_this_version() {
    let library = read("bindings/php/src/Library.php");
    assert!(
        library.contains(&format!("public const VERSION = '{VERSION}';")),
        "bindings/php/src/Library.php's VERSION is not {VERSION}"
    );
    let mut parts = VERSION.split('.').map(|p| p.parse::<u32>().unwrap());
    let abi = parts.next().unwrap() * 1000 + parts.next().unwrap();
    assert!(
        library.contains(&format!("public const ABI_VERSION = {abi};")),
        "bindings/php/src/Library.php's ABI_VERSION is not {abi}"
    );
    assert!(
        read("include/leasehold.h").contains(&format!("#define LEASEHOLD_ABI_VERSION {abi}\n")),
        "include/leasehold.h's LEASEHOLD_ABI_VERSION is not {abi}"
    );
}

#[test]
fn every_crate_has_the_workspace_version_and_no_placeholder_metadata() {
    let metadata = cargo_metadata(true);
    for package in metadata["packages"].as_array().unwrap() {
        let name = package["name"].as_str().unwrap();
        assert_eq!(package["version"], VERSION, "{name}'s version");
        assert_eq!(package["license"], "MIT OR Apache-2.0", "{name}'s license");
        if let Some(url) = package["repository"].as_str() {
            assert!(
                !url.contains(".invalid"),
                "{name} has a placeholder repository: {url}"
            );
        }
    }
    for file in ["LICENSE-MIT", "LICENSE-APACHE"] {
        assert!(root().join(file).is_file(), "{file} is missing");
    }
}

#[test]
fn rust_version_is_what_the_locked_dependencies_need() {
    let metadata = cargo_metadata(false);
    let in_graph: std::collections::HashSet<&str> = metadata["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap())
        .collect();
    // "1.89" and "1.89.0" are the same version: compare three components.
    let parse = |v: &str| -> Vec<u32> {
        let mut parts: Vec<u32> = v.split('.').map(|p| p.parse().unwrap()).collect();
        parts.resize(3, 0);
        parts
    };
    let mut needed = (vec![0], String::new());
    for package in metadata["packages"].as_array().unwrap() {
        if !in_graph.contains(package["id"].as_str().unwrap()) {
            continue;
        }
        if let Some(rv) = package["rust_version"].as_str() {
            if package["source"].is_null() {
                continue; // our own crates: what is being checked
            }
            if parse(rv) > needed.0 {
                needed = (
                    parse(rv),
                    format!("{} {rv}", package["name"].as_str().unwrap_or("?")),
                );
            }
        }
    }
    let ours = env!("CARGO_PKG_RUST_VERSION");
    let needed_text = needed
        .0
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(".");
    assert_eq!(
        parse(ours),
        needed.0,
        "rust-version is {ours}, but the locked dependencies need {needed_text} ({})",
        needed.1
    );
}

fn cargo_metadata(no_deps: bool) -> serde_json::Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .args(["metadata", "--format-version", "1", "--locked"])
        .current_dir(root());
    if no_deps {
        command.arg("--no-deps");
    }
    let output = command.output().expect("run cargo metadata");
    assert!(
        output.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("cargo metadata prints JSON")
}
