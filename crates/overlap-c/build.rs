//! Gives the shared library the soname it is installed under
//! (scripts/install-liboverlap): programs linked with `-loverlap` then ask
//! for `liboverlap.so.0`, whatever the file was called when built.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,liboverlap.so.0");
    println!("cargo:rerun-if-changed=build.rs");
}
