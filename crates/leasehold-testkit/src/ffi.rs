//! The C library (libleasehold.so) built for this test run, and the C programs of tests/c built
//! against it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

pub fn workspace_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace directory")
}

/// The directory of the cdylib of leasehold-ffi, built for this test run. That package has no rlib
/// (it would collide with the facade's `libleasehold.rlib`), so `cargo test` does not build the
/// cdylib by itself: the first call asks cargo to, in the same profile and target directory as
/// this test binary.
pub fn library_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().expect("test binary path");
        let deps = exe.parent().expect("deps directory");
        let profile_dir = deps.parent().expect("profile directory").to_path_buf();
        let target_dir = profile_dir.parent().expect("target directory");
        let mut build = Command::new(env!("CARGO"));
        build
            .args(["build", "-p", "leasehold-ffi", "--target-dir"])
            .arg(target_dir)
            .current_dir(workspace_dir());
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            build.arg("--release");
        }
        let status = build.status().expect("run cargo build -p leasehold-ffi");
        assert!(status.success(), "cargo build -p leasehold-ffi failed");
        let so = profile_dir.join("libleasehold.so");
        assert!(so.exists(), "{} was not built", so.display());
        profile_dir
    })
}

/// libleasehold.so itself (what PHP's `LEASEHOLD_LIBRARY` names).
pub fn library() -> PathBuf {
    library_dir().join("libleasehold.so")
}

/// Where the C programs are built (ignored by git).
pub fn build_dir() -> PathBuf {
    let dir = workspace_dir().join("tests/c/build");
    std::fs::create_dir_all(&dir).expect("create tests/c/build");
    dir
}

/// Compiles tests/c/<name>.c with strict flags against the library, once per test process (tests
/// running in parallel share the binary instead of overwriting it while another runs it); panics
/// with the compiler output.
pub fn compile(name: &str) -> PathBuf {
    static BUILT: Mutex<BTreeMap<String, PathBuf>> = Mutex::new(BTreeMap::new());
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(path) = built.get(name) {
        return path.clone();
    }
    let path = compile_now(name);
    built.insert(name.to_owned(), path.clone());
    path
}

fn compile_now(name: &str) -> PathBuf {
    let root = workspace_dir();
    let out = build_dir().join(name);
    let lib = library_dir();
    let output = Command::new("cc")
        .args([
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            "-g",
            "-O0",
        ])
        .arg("-I")
        .arg(root.join("include"))
        .arg(root.join("tests/c").join(format!("{name}.c")))
        .arg("-o")
        .arg(&out)
        .arg(lib.join("libleasehold.so"))
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-lpthread")
        .output()
        .expect("run cc (a C compiler must be installed)");
    assert!(
        output.status.success(),
        "cc failed for tests/c/{name}.c:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    out
}
