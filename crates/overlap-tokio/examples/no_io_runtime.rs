//! overlapped_tokio::fs on tokio runtimes built without their I/O driver (no
//! `enable_io`), in a program that may be built with `panic = "abort"`:
//! tokio::fs works there, so overlapped_tokio::fs must, without a panic (which
//! such a program does not survive) and without printing anything.
//!
//! ```sh
//! cargo run -p overlapped-tokio --example no_io_runtime -- DIR
//! ```
//!
//! The test `lifecycle::a_runtime_without_io_under_panic_abort` builds it
//! with the workspace's `panic-abort` profile and runs it.

use overlapped_tokio::fs;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args_os()
        .nth(1)
        .ok_or("usage: no_io_runtime DIR")?;
    let path = std::path::Path::new(&dir).join("no-io");
    let rt = tokio::runtime::Builder::new_current_thread().build()?;
    rt.block_on(fs::write(&path, b"no io driver"))?;
    let got = rt.block_on(fs::read(&path))?;
    let len = rt.block_on(fs::metadata(&path))?.len();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()?;
    let p = path.clone();
    let again = rt.block_on(async move { tokio::spawn(fs::read(p)).await })??;
    rt.block_on(fs::remove_file(&path))?;
    assert_eq!(got, again);
    println!(
        "ok: {len} bytes written and read twice; panic strategy {}",
        if cfg!(panic = "abort") {
            "abort"
        } else {
            "unwind"
        }
    );
    Ok(())
}
