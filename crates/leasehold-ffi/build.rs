//! Gives the shared library the SONAME `libleasehold.so.<major>` (cargo-c's and Debian's convention),
//! so programs linked against it record that name and keep working across minor and patch updates,
//! and the dynamic loader finds an installed `libleasehold.so.0` without the development symlink.

fn main() {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if os == "linux" || os == "android" || os.ends_with("bsd") {
        let major = std::env::var("CARGO_PKG_VERSION_MAJOR").expect("cargo sets the version");
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libleasehold.so.{major}");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
