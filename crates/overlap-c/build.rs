//! Gives the shared library the soname it is installed under
//! (scripts/install-liboverlap): programs linked with `-loverlap` then ask
//! for `liboverlap.so.0`, whatever the file was called when built. Linux
//! only: a Windows DLL has no soname (tests/windows.sh installs
//! `overlap_c.dll` as `overlap.dll` with its import library).
fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,liboverlap.so.0");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
