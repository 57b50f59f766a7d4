//! Gives the shared library the SONAME `libleasehold.so.<major>` (cargo-c's and Debian's convention),
//! so programs linked against it record that name and keep working across minor and patch updates,
//! and the dynamic loader finds an installed `libleasehold.so.0` without the development symlink.
//!
//! A program linked against the build tree's `libleasehold.so` records the SONAME too, so the build
//! tree gets the link an installed library has (`libleasehold.so.0 -> libleasehold.so`, next to the
//! library in `target/<profile>/`): the C tests, the example Makefile and the benchmarks then run
//! against the build as they would against an install.

use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if !(os == "linux" || os == "android" || os.ends_with("bsd")) {
        return;
    }
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").expect("cargo sets the version");
    let soname = format!("libleasehold.so.{major}");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{soname}");
    if let Some(profile_dir) = profile_dir() {
        let link = profile_dir.join(&soname);
        if std::fs::read_link(&link).ok().as_deref() != Some(Path::new("libleasehold.so")) {
            let _ = std::fs::remove_file(&link);
            symlink("libleasehold.so", &link);
        }
    }
}

/// `target/<profile>` (or `target/<triple>/<profile>`): OUT_DIR is `<that>/build/<pkg>-<hash>/out`.
fn profile_dir() -> Option<PathBuf> {
    let out = PathBuf::from(std::env::var_os("OUT_DIR")?);
    let dir = out.ancestors().nth(3)?.to_path_buf();
    dir.is_dir().then_some(dir)
}

/// Best effort: a read-only or unusual target directory only loses the convenience.
#[cfg(unix)]
fn symlink(target: &str, link: &Path) {
    let _ = std::os::unix::fs::symlink(target, link);
}

#[cfg(not(unix))]
fn symlink(_target: &str, _link: &Path) {}
