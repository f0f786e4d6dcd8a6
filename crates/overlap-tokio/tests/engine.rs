//! The engine underneath: the driver the run asked for, and the operations
//! with an io_uring opcode really going through it.

use overlapped::DriverKind;
use overlapped_tokio::fs;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::util::{data, tempdir};

rt_tests!(
    the_driver_is_the_one_the_run_asked_for,
    file_io_goes_through_the_engine,
    path_operations_go_through_the_engine,
);

async fn the_driver_is_the_one_the_run_asked_for() {
    let info = overlapped_tokio::engine().driver();
    match std::env::var("OVERLAP_DRIVER").as_deref() {
        Ok("pool") => assert_eq!(info.kind, DriverKind::Pool),
        Ok("uring") => assert_eq!(info.kind, DriverKind::Uring),
        Ok("iocp") => assert_eq!(info.kind, DriverKind::Iocp),
        // Windows' default: the I/O completion port driver.
        _ if cfg!(windows) => assert_eq!(info.kind, DriverKind::Iocp, "{info:?}"),
        _ => {
            if let Some(reason) = &info.fallback {
                eprintln!(
                    "SKIPPED: io_uring unavailable, overlapped-tokio ran on the pool: {reason}"
                );
            }
        }
    }
}

async fn file_io_goes_through_the_engine() {
    let engine = overlapped_tokio::engine();
    let dir = tempdir();
    let p = dir.path().join("f");
    let want = data(1 << 20, 2);
    let before = engine.stats();
    let mut f = fs::File::create(&p).await.unwrap();
    f.write_all(&want).await.unwrap();
    f.sync_data().await.unwrap();
    drop(f);
    let mut f = fs::File::open(&p).await.unwrap();
    let mut got = Vec::new();
    f.read_to_end(&mut got).await.unwrap();
    assert!(got == want);
    let after = engine.stats();
    // Other tests share the engine: at least this test's bytes.
    assert!(after.bytes_written - before.bytes_written >= want.len() as u64);
    assert!(after.bytes_read - before.bytes_read >= want.len() as u64);
}

async fn path_operations_go_through_the_engine() {
    let engine = overlapped_tokio::engine();
    let dir = tempdir();
    let before = engine.stats().submitted;
    fs::create_dir(dir.path().join("d")).await.unwrap();
    fs::rename(dir.path().join("d"), dir.path().join("e"))
        .await
        .unwrap();
    assert!(fs::try_exists(dir.path().join("e")).await.unwrap());
    fs::remove_dir(dir.path().join("e")).await.unwrap();
    assert!(engine.stats().submitted - before >= 4);
}
