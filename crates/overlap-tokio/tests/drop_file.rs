//! A `File` dropped without `flush`, with a write in flight and bytes
//! behind it, then its runtime ended at once (dropped, `shutdown_timeout`,
//! the end of `#[tokio::main]`): every byte `write_all` acknowledged reaches
//! the file, as with `tokio::fs` (measured beside it in the same program).
//!
//! In child processes: the runtimes' threads and the process's end are the
//! scenario.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::AsyncWriteExt;

use crate::util::{data, in_child, is_child, tempdir, wait_until};

/// The first write (1 MiB, in flight at once), then 1 MiB in 8 KiB pieces,
/// which go behind it while it is in flight.
const FIRST: usize = 1 << 20;
const TOTAL: usize = 2 << 20;

/// Writes [`TOTAL`] bytes through `overlapped_tokio::fs` or `tokio::fs` (as
/// `tokio_fs` says) and drops the file without `flush`; returns the bytes.
async fn write_and_drop(path: &Path, seed: u8, tokio_fs: bool) -> Vec<u8> {
    let want = data(TOTAL, seed);
    macro_rules! go {
        ($fs:path) => {{
            use $fs as fs;
            let mut f = fs::File::create(path).await.unwrap();
            f.write_all(&want[..FIRST]).await.unwrap();
            for piece in want[FIRST..].chunks(8192) {
                f.write_all(piece).await.unwrap();
            }
            drop(f);
        }};
    }
    if tokio_fs {
        go!(tokio::fs)
    } else {
        go!(overlapped_tokio::fs)
    }
    want
}

/// How a runtime ends right after the file is dropped.
#[derive(Clone, Copy, Debug)]
enum End {
    Drop,
    ShutdownTimeout,
}

/// Runs one write-and-drop on a new runtime ended as `end`; returns whether
/// every byte reached the file (at once after a drop, which waits for the
/// blocking pool; within 20 s after `shutdown_timeout(0)`, the process
/// living on).
fn one_run(path: &Path, seed: u8, multi: bool, end: End, tokio_fs: bool) -> bool {
    let rt = if multi {
        crate::util::multi_thread()
    } else {
        crate::util::current_thread()
    };
    let want = rt.block_on(write_and_drop(path, seed, tokio_fs));
    let complete = || std::fs::read(path).is_ok_and(|got| got == want);
    match end {
        End::Drop => {
            drop(rt);
            complete()
        }
        End::ShutdownTimeout => {
            rt.shutdown_timeout(Duration::ZERO);
            wait_until(Duration::from_secs(20), complete)
        }
    }
}

/// The runs that lost bytes, of `runs` per runtime flavour and end.
pub(crate) fn losses(dir: &Path, runs: usize, tokio_fs: bool) -> (usize, usize) {
    let mut lost = 0;
    let mut total = 0;
    for i in 0..runs {
        for multi in [true, false] {
            for end in [End::Drop, End::ShutdownTimeout] {
                let p = dir.join(format!("f{i}-{multi}-{end:?}-{tokio_fs}"));
                total += 1;
                if !one_run(&p, i as u8, multi, end, tokio_fs) {
                    lost += 1;
                    eprintln!(
                        "lost bytes: run {i}, multi-thread {multi}, {end:?}, tokio::fs {tokio_fs}"
                    );
                }
            }
        }
    }
    (lost, total)
}

#[test]
fn a_dropped_files_bytes_survive_the_runtimes_end() {
    const NAME: &str = "drop_file::a_dropped_files_bytes_survive_the_runtimes_end";
    if !is_child(NAME) {
        let err = in_child(NAME, &[], Duration::from_secs(240));
        for l in err
            .lines()
            .filter(|l| l.starts_with("drop then runtime end"))
        {
            println!("{l}");
        }
        return;
    }
    crate::util::child_test(NAME, &[], Duration::from_secs(240), || {
        let dir = tempdir();
        let (theirs, n) = losses(dir.path(), 5, true);
        let (ours, _) = losses(dir.path(), 5, false);
        eprintln!(
            "drop then runtime end: tokio::fs lost bytes in {theirs} of {n} runs, \
                 overlapped_tokio::fs in {ours} of {n}"
        );
        assert_eq!(ours, 0, "overlapped_tokio::fs lost acknowledged bytes");
    });
}

const RETURN_TEST: &str = "drop_file::returning_from_tokio_main_keeps_a_dropped_files_bytes";
const PATH_VAR: &str = "OVERLAP_TOKIO_TEST_DROP_PATH";
const FS_VAR: &str = "OVERLAP_TOKIO_TEST_DROP_FS";

/// In the child: a `#[tokio::main]` that writes, drops the file and
/// returns, then the process exits at once, as a program's `main` does.
#[tokio::main]
async fn a_main(path: PathBuf, tokio_fs: bool) {
    write_and_drop(&path, 7, tokio_fs).await;
}

/// `main` returning ends the process; what `#[tokio::main]` does before
/// (dropping the runtime, which waits for the blocking pool) is all that
/// can save bytes still behind. Measured for `tokio::fs` in the same
/// program; `overlapped_tokio::fs` must lose none.
#[test]
fn returning_from_tokio_main_keeps_a_dropped_files_bytes() {
    if is_child(RETURN_TEST) {
        let path = PathBuf::from(std::env::var(PATH_VAR).unwrap());
        a_main(path, std::env::var(FS_VAR).as_deref() == Ok("tokio"));
        println!("CHILD-OK {RETURN_TEST}");
        std::process::exit(0);
    }
    let dir = tempdir();
    let want = data(TOTAL, 7);
    let mut lost = [0usize; 2];
    const RUNS: usize = 6;
    for i in 0..RUNS {
        for (k, which) in ["tokio", "overlap"].into_iter().enumerate() {
            let p = dir.path().join(format!("main-{which}-{i}"));
            let ps = p.to_str().unwrap();
            in_child(
                RETURN_TEST,
                &[(PATH_VAR, ps), (FS_VAR, which)],
                Duration::from_secs(60),
            );
            if std::fs::read(&p).map_or(true, |got| got != want) {
                lost[k] += 1;
            }
        }
    }
    println!(
        "return from #[tokio::main] after a drop: tokio::fs lost bytes in {} of {RUNS} runs, \
         overlapped_tokio::fs in {} of {RUNS}",
        lost[0], lost[1]
    );
    assert_eq!(lost[1], 0, "overlapped_tokio::fs lost acknowledged bytes");
}

const HELD_TEST: &str = "drop_file::a_file_held_by_a_task_at_mains_return_keeps_its_bytes";

/// In the child: a `#[tokio::main]` whose spawned task writes and still
/// holds the file (a write in flight, bytes behind it) when `main` returns;
/// the runtime's end drops the task on a worker, after the blocking pool
/// has begun its shutdown, and the process exits at once.
#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn held_main(path: PathBuf) {
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let want = data(TOTAL, 11);
        let mut f = overlapped_tokio::fs::File::create(&path).await.unwrap();
        f.write_all(&want[..FIRST]).await.unwrap();
        for piece in want[FIRST..].chunks(8192) {
            f.write_all(piece).await.unwrap();
        }
        let _ = tx.send(());
        std::future::pending::<()>().await;
        drop(f);
    });
    rx.await.unwrap();
}

/// A file still held by a task when `main` returns is dropped with the
/// task in the runtime's shutdown, where tokio's blocking pool takes no
/// new task: the rest of its write must still reach the file before the
/// process ends.
#[test]
fn a_file_held_by_a_task_at_mains_return_keeps_its_bytes() {
    if is_child(HELD_TEST) {
        held_main(PathBuf::from(std::env::var(PATH_VAR).unwrap()));
        println!("CHILD-OK {HELD_TEST}");
        std::process::exit(0);
    }
    let dir = tempdir();
    let want = data(TOTAL, 11);
    for i in 0..8 {
        let p = dir.path().join(format!("held-{i}"));
        in_child(
            HELD_TEST,
            &[(PATH_VAR, p.to_str().unwrap())],
            Duration::from_secs(60),
        );
        let got = std::fs::read(&p).unwrap();
        assert!(
            got == want,
            "run {i}: {} of {TOTAL} bytes reached the file",
            got.len()
        );
    }
}
