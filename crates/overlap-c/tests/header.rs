//! The checked-in `include/overlap.h` is the one cbindgen generates from
//! the source now. Run with `OVERLAP_BLESS_HEADER=1` to write it.

use std::path::Path;

#[test]
fn checked_in_header_matches_the_generated_one() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let bindings = cbindgen::Builder::new()
        .with_src(dir.join("src/lib.rs"))
        .with_config(config)
        .generate()
        .expect("cbindgen could not generate the header");
    let mut generated = Vec::new();
    bindings.write(&mut generated);
    let generated = String::from_utf8(generated).expect("UTF-8 header");
    let path = dir.join("include/overlap.h");
    if std::env::var_os("OVERLAP_BLESS_HEADER").is_some() {
        std::fs::write(&path, &generated).expect("write include/overlap.h");
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "crates/overlap-c/include/overlap.h is not the header the source generates; \
         regenerate it with `OVERLAP_BLESS_HEADER=1 cargo test -p overlapped-c --test header` \
         and commit it"
    );
}
