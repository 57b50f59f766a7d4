//! The committed headers are exactly what cbindgen makes from the source. A difference fails the test;
//! `LEASEHOLD_UPDATE_HEADER=1 cargo test -p leasehold-ffi --test header` rewrites them instead.

use std::path::{Path, PathBuf};

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn workspace_dir() -> PathBuf {
    crate_dir().join("../..")
}

/// `php`: the variant for PHP's `FFI::cdef`, which rejects every preprocessor line.
fn generate(php: bool) -> String {
    let mut config =
        cbindgen::Config::from_file(crate_dir().join("cbindgen.toml")).expect("read cbindgen.toml");
    if php {
        config.include_guard = None;
        config.pragma_once = false;
        config.cpp_compat = false;
        config.no_includes = true;
        config.sys_includes.clear();
        config.includes.clear();
        // A constant is a #define, which FFI::cdef rejects; PHP keeps the ABI version in Library.
        config
            .export
            .exclude
            .push("LEASEHOLD_ABI_VERSION".to_owned());
        config.header = Some(
            "/*\n * leasehold_ffi.h: the C ABI of Leasehold for PHP's FFI::cdef(), generated from the same\n * \
             source as include/leasehold.h but without preprocessor lines (FFI::cdef rejects them).\n * \
             C programs include leasehold.h instead; its top comment states the rules every function\n * \
             follows (ownership, NULL, threads, fork()).\n */"
                .to_owned(),
        );
    }
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_config(config)
        .with_crate(crate_dir())
        .generate()
        .expect("cbindgen generates the header")
        .write(&mut out);
    String::from_utf8(out).expect("the header is UTF-8")
}

fn check(path: &Path, generated: &str) {
    let update = std::env::var_os("LEASEHOLD_UPDATE_HEADER").is_some_and(|v| v == "1");
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    if committed == generated {
        return;
    }
    if update {
        std::fs::write(path, generated).expect("write the header");
        eprintln!("rewrote {}", path.display());
        return;
    }
    let first_difference = committed
        .lines()
        .zip(generated.lines())
        .position(|(a, b)| a != b)
        .unwrap_or_else(|| committed.lines().count().min(generated.lines().count()));
    panic!(
        "{} differs from what cbindgen generates (first at line {}); run \
         LEASEHOLD_UPDATE_HEADER=1 cargo test -p leasehold-ffi --test header and commit the result",
        path.display(),
        first_difference + 1
    );
}

#[test]
fn c_header_matches_the_source() {
    check(
        &workspace_dir().join("include/leasehold.h"),
        &generate(false),
    );
}

#[test]
fn php_header_matches_the_source_and_has_no_preprocessor_lines() {
    let generated = generate(true);
    assert!(
        !generated.lines().any(|l| l.trim_start().starts_with('#')),
        "FFI::cdef rejects preprocessor lines"
    );
    check(&workspace_dir().join("include/leasehold_ffi.h"), &generated);
}
