//! The acknowledged-byte torture suite (`docs/acknowledged-bytes.md`,
//! section 6) for `overlapped_tokio::fs::File`: one line per scenario,
//! `torture: tokio-file DRIVER SCENARIO ok|FAIL: ...|SKIPPED: ...`, DRIVER
//! the process engine's (`OVERLAP_DRIVER`, or the engine's own choice).
//! Scenarios that end runtimes, shut the engine down or fork run in a child
//! process of their own.

use std::io::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use overlapped::DriverKind;
use overlapped_tokio::fs;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::util::{data, is_child, tempdir, wait_until};

fn driver() -> &'static str {
    match overlapped_tokio::engine().driver().kind {
        DriverKind::Uring => "uring",
        DriverKind::Aio => "aio",
        DriverKind::Pool => "pool",
        _ => "unknown-driver",
    }
}

/// Prints the cell's line; a failure also fails the test.
fn cell(scenario: &str, res: Result<(), String>) {
    let d = driver();
    match res {
        Ok(()) => println!("torture: tokio-file {d} {scenario} ok"),
        Err(e) if e.starts_with("SKIPPED: ") => println!("torture: tokio-file {d} {scenario} {e}"),
        Err(e) => {
            let one_line = e.replace('\n', " | ");
            println!("torture: tokio-file {d} {scenario} FAIL: {one_line}");
            panic!("{scenario}: {e}");
        }
    }
}

/// Runs the test `torture::name` in a child process: `Err` with why if it
/// failed or hung.
fn in_child(name: &str) -> Result<(), String> {
    let path = format!("torture::{name}");
    std::panic::catch_unwind(|| crate::util::in_child(&path, &[], Duration::from_secs(120)))
        .map(drop)
        .map_err(|p| {
            p.downcast_ref::<String>()
                .cloned()
                .unwrap_or_else(|| "the child failed".into())
        })
}

/// In the child: runs `body` and says so; in the parent: runs the child and
/// prints the cell.
fn child_cell(name: &str, scenario: &str, body: impl FnOnce()) {
    if is_child(&format!("torture::{name}")) {
        body();
        println!("CHILD-OK torture::{name}");
        return;
    }
    cell(scenario, in_child(name));
}

// ------------------------------------------------------------ drop-behind

/// A file dropped with a write in flight and 1 MiB behind it, the runtime
/// (multi-thread, current-thread) ended at once by a drop or by
/// `shutdown_timeout(0)`: every acknowledged byte is in the file, once.
#[test]
fn drop_behind() {
    child_cell("drop_behind", "drop-behind", || {
        let dir = tempdir();
        let (lost, runs) = crate::drop_file::losses(dir.path(), 3, false);
        assert_eq!(lost, 0, "acknowledged bytes lost in {lost} of {runs} runs");
    });
}

// ------------------------------------------------------------ shared-writers

/// Record `r` of task `t`: a header naming it and its length, then bytes of
/// its own.
fn record(t: usize, r: usize) -> Vec<u8> {
    let len = 100 + (t * 131 + r * 37) % 3000;
    let mut v = format!("[{t:02}:{r:03}:{len:05}:").into_bytes();
    v.extend(data(len, (t * 64 + r) as u8));
    v.push(b']');
    v
}

/// Parses the records of `got`: each exactly once, whole, nothing else.
fn check_records(got: &[u8], tasks: usize, per_task: usize) -> Result<(), String> {
    let mut seen = vec![false; tasks * per_task];
    let mut at = 0;
    while at < got.len() {
        // "[tt:rrr:lllll:"
        let head = got.get(at..at + 14).ok_or("a torn record at the end")?;
        let head = std::str::from_utf8(head).map_err(|_| format!("no header at {at}"))?;
        let p: Vec<usize> = head[1..13]
            .split(':')
            .map(|x| {
                x.parse()
                    .map_err(|_| format!("bad header {head:?} at {at}"))
            })
            .collect::<Result<_, _>>()?;
        let (t, r) = (p[0], p[1]);
        let want = record(t, r);
        if got.get(at..at + want.len()) != Some(&want[..]) {
            return Err(format!("record {t}:{r} at {at} torn or wrong"));
        }
        if std::mem::replace(&mut seen[t * per_task + r], true) {
            return Err(format!("record {t}:{r} written twice"));
        }
        at += want.len();
    }
    match seen.iter().position(|s| !s) {
        Some(i) => Err(format!("record {}:{} missing", i / per_task, i % per_task)),
        None => Ok(()),
    }
}

/// Eight tasks share one `File` as tokio users do (`Arc<Mutex<File>>`),
/// each writing 64 records and flushing now and then; then eight tasks
/// write blocks at their own offsets through one `Arc<File>`
/// (`write_all_at`) at once.
async fn shared_writers_check() -> Result<(), String> {
    let dir = tempdir();
    let p = dir.path().join("shared");
    let f = Arc::new(tokio::sync::Mutex::new(
        fs::File::create(&p).await.map_err(|e| e.to_string())?,
    ));
    let tasks: Vec<_> = (0..8)
        .map(|t| {
            let f = f.clone();
            tokio::spawn(async move {
                for r in 0..64 {
                    let mut g = f.lock().await;
                    g.write_all(&record(t, r)).await?;
                    if r % 8 == 7 {
                        g.flush().await?;
                    }
                }
                std::io::Result::Ok(())
            })
        })
        .collect();
    for t in tasks {
        t.await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
    }
    f.lock().await.flush().await.map_err(|e| e.to_string())?;
    drop(f);
    check_records(&std::fs::read(&p).unwrap(), 8, 64)?;

    const BS: usize = 16 << 10;
    let p2 = dir.path().join("positional");
    let f = Arc::new(fs::File::create(&p2).await.map_err(|e| e.to_string())?);
    let tasks: Vec<_> = (0..8)
        .map(|t| {
            let f = f.clone();
            tokio::spawn(async move {
                for r in 0..32 {
                    let i = r * 8 + t;
                    let (res, _) = f.write_all_at(data(BS, i as u8), (i * BS) as u64).await;
                    res?;
                }
                std::io::Result::Ok(())
            })
        })
        .collect();
    for t in tasks {
        t.await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
    }
    let want: Vec<u8> = (0..256).flat_map(|i| data(BS, i as u8)).collect();
    if std::fs::read(&p2).unwrap() != want {
        return Err("positional writes: the file is not every block once".into());
    }
    Ok(())
}

#[test]
fn shared_writers() {
    cell(
        "shared-writers",
        crate::util::multi_thread().block_on(shared_writers_check()),
    );
}

// ------------------------------------------------------------ close-racing-reads

/// A read in flight on a FIFO is cancelled (its future dropped), then the
/// file dropped: the caller's buffer, reused at once, never changes, even
/// once the pipe's data arrives (the engine reads into a buffer of its own).
async fn cancelled_read_leaves_the_buffer() -> Result<(), String> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = tempdir();
    let path = dir.path().join("fifo");
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    let mut keep = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&path)
        .unwrap();
    let mut f = fs::File::open(&path).await.map_err(|e| e.to_string())?;
    let mut buf = [0xEEu8; 64];
    let read = tokio::time::timeout(Duration::from_millis(50), f.read(&mut buf)).await;
    if read.is_ok() {
        return Err("a read of an empty pipe completed".into());
    }
    drop(f);
    // The buffer is the caller's again: nothing writes into it now.
    keep.write_all(&[1u8; 64]).unwrap();
    let engine = overlapped_tokio::engine();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let settled =
        crate::util::eventually(Duration::from_secs(10), || engine.in_flight().0 == 0).await;
    if buf != [0xEEu8; 64] {
        return Err("a cancelled read wrote into the caller's buffer".into());
    }
    if !settled {
        return Err(format!(
            "the cancelled read never completed: {:?}",
            engine.in_flight()
        ));
    }
    Ok(())
}

/// Tasks read a file into buffers they reuse as soon as each read reports
/// (positional reads with owned buffers, and `AsyncRead` through clones),
/// while the tasks are aborted and the file dropped mid-flight: every read
/// that reported has the right data, and a buffer poisoned after its read
/// does not change.
async fn reads_racing_the_drop() -> Result<(), String> {
    const LEN: usize = 8 << 20;
    let dir = tempdir();
    let p = dir.path().join("data");
    let want = Arc::new(data(LEN, 5));
    std::fs::write(&p, &*want).unwrap();
    let f = Arc::new(fs::File::open(&p).await.map_err(|e| e.to_string())?);
    let bad = Arc::new(Mutex::new(Vec::<String>::new()));
    let reads = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for t in 0..8usize {
        let (f, want, bad, reads) = (f.clone(), want.clone(), bad.clone(), reads.clone());
        let mut clone = f.try_clone().await.map_err(|e| e.to_string())?;
        tasks.push(tokio::spawn(async move {
            let mut buf = vec![0u8; 64 << 10];
            let mut own = vec![0u8; 48 << 10];
            for i in 0.. {
                let off = ((i * 8 + t) * 4099) % (LEN - buf.len());
                let (res, back) = f.read_at(buf, off as u64).await;
                buf = back;
                let n = res.unwrap_or(0);
                if buf[..n] != want[off..off + n] {
                    bad.lock()
                        .unwrap()
                        .push(format!("read_at {off}: wrong data"));
                }
                let m = clone.read(&mut own).await.unwrap_or(0);
                reads.fetch_add(1, Ordering::Relaxed);
                // Reused: poisoned, and looked at again after a yield.
                buf.fill(0xEE);
                own[..m].fill(0xEE);
                tokio::task::yield_now().await;
                if buf.iter().any(|&b| b != 0xEE) || own[..m].iter().any(|&b| b != 0xEE) {
                    bad.lock()
                        .unwrap()
                        .push("a buffer changed after its read".into());
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    for t in &tasks {
        t.abort();
    }
    drop(f);
    for t in tasks {
        let _ = t.await;
    }
    let bad = bad.lock().unwrap();
    if !bad.is_empty() {
        return Err(bad.join("; "));
    }
    if reads.load(Ordering::Relaxed) == 0 {
        return Err("no read reported before the drop".into());
    }
    Ok(())
}

#[test]
fn close_racing_reads() {
    let rt = crate::util::multi_thread();
    let res = rt
        .block_on(cancelled_read_leaves_the_buffer())
        .and_then(|()| rt.block_on(reads_racing_the_drop()));
    cell("close-racing-reads", res);
}

// ------------------------------------------------------------ shutdown-in-flight

/// Block `i` of the shutdown and fork scenarios.
const BLOCK: usize = 64 << 10;

/// The blocks acknowledged, and the writers (each ends with its error).
type Writers = (
    Arc<Mutex<Vec<usize>>>,
    Vec<tokio::task::JoinHandle<Option<std::io::Error>>>,
);

/// Tasks writing blocks through one `Arc<File>` until a write fails;
/// returns the blocks acknowledged so far and the tasks.
fn start_writers(rt: &tokio::runtime::Runtime, f: &Arc<fs::File>) -> Writers {
    let acked = Arc::new(Mutex::new(Vec::new()));
    let tasks = (0..8usize)
        .map(|t| {
            let (f, acked) = (f.clone(), acked.clone());
            rt.spawn(async move {
                for r in 0..4096usize {
                    let i = r * 8 + t;
                    let (res, _) = f
                        .write_all_at(data(BLOCK, i as u8), (i * BLOCK) as u64)
                        .await;
                    match res {
                        Ok(()) => acked.lock().unwrap().push(i),
                        Err(e) => return Some(e),
                    }
                }
                None
            })
        })
        .collect();
    (acked, tasks)
}

/// Whether every acknowledged block is in the file at `p`.
fn acked_in_file(p: &Path, acked: &[usize]) -> Result<(), String> {
    let got = std::fs::read(p).unwrap();
    for &i in acked {
        if got.get(i * BLOCK..(i + 1) * BLOCK) != Some(&data(BLOCK, i as u8)[..]) {
            return Err(format!("acknowledged block {i} is not in the file"));
        }
    }
    Ok(())
}

fn is_shutdown(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::NotConnected && e.to_string().contains("shut down")
}

/// The process engine shut down (`overlapped_tokio::engine().shutdown()`)
/// while eight tasks write: the writes in flight complete or fail with the
/// shutdown error, every acknowledged block is in the file, and later calls
/// fail at once with it.
#[test]
fn shutdown_in_flight() {
    child_cell("shutdown_in_flight", "shutdown-in-flight", || {
        let dir = tempdir();
        let p = dir.path().join("f");
        let rt = crate::util::multi_thread();
        let f = Arc::new(rt.block_on(fs::File::create(&p)).unwrap());
        let (acked, tasks) = start_writers(&rt, &f);
        std::thread::sleep(Duration::from_millis(100));
        overlapped_tokio::engine().shutdown();
        for t in tasks {
            let end = rt.block_on(t).unwrap();
            match end {
                Some(e) if is_shutdown(&e) => {}
                other => panic!("a writer ended with {other:?}, not the shutdown error"),
            }
        }
        assert!(
            !acked.lock().unwrap().is_empty(),
            "no write was acknowledged before"
        );
        acked_in_file(&p, &acked.lock().unwrap()).unwrap();
        let start = Instant::now();
        let later = rt.block_on(fs::read(&p));
        let (res, _) = rt.block_on(f.write_all_at(b"x".to_vec(), 0));
        assert!(matches!(&later, Err(e) if is_shutdown(e)), "{later:?}");
        assert!(matches!(&res, Err(e) if is_shutdown(e)), "{res:?}");
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "later calls waited"
        );
    });
}

// ------------------------------------------------------------ fork-in-flight

/// The process forks while eight tasks write: the child's call on the
/// parent's file fails at once with the forked error and its exit does not
/// hang; the parent's writes go on and every acknowledged block is there.
#[test]
fn fork_in_flight() {
    child_cell("fork_in_flight", "fork-in-flight", || {
        let dir = tempdir();
        let p = dir.path().join("f");
        let rt = crate::util::multi_thread();
        let f = Arc::new(rt.block_on(fs::File::create(&p)).unwrap());
        let (acked, tasks) = start_writers(&rt, &f);
        std::thread::sleep(Duration::from_millis(50));
        let child_file = f.clone();
        // SAFETY: the child uses only this thread's copy of the process: a
        // fresh thread and runtime, the parent's file (which must refuse at
        // once), and leaves with `_exit`.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let code = std::thread::spawn(move || forked_child(&child_file))
                .join()
                .unwrap_or(10);
            // SAFETY: ends the child at once.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        let ended = wait_until(Duration::from_secs(20), || {
            // SAFETY: waits for our own child.
            unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) == pid }
        });
        if !ended {
            // SAFETY: our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("the forked child hung");
        }
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the forked child: status {status:#x} (1: not the forked error, 2: it waited)"
        );
        for t in tasks {
            assert!(rt.block_on(t).unwrap().is_none(), "a parent's write failed");
        }
        acked_in_file(&p, &acked.lock().unwrap()).unwrap();
    });
}

/// In the forked child: a write to the parent's file must fail at once
/// with the forked error.
fn forked_child(f: &fs::File) -> i32 {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return 3;
    };
    let start = Instant::now();
    let (res, _) = rt.block_on(f.write_all_at(b"child".to_vec(), 0));
    match res {
        Err(e) if e.to_string().contains("fork") => {}
        other => {
            eprintln!("the forked child's write: {other:?}");
            return 1;
        }
    }
    if start.elapsed() > Duration::from_secs(2) {
        return 2;
    }
    0
}

// ------------------------------------------------------------ injected-failure

/// `scripts/small-fs`, with `args`: its stdout, or why it could not run.
fn small_fs(args: &[&str]) -> Result<String, String> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/small-fs");
    let out = std::process::Command::new(script)
        .args(args)
        .output()
        .map_err(|e| format!("SKIPPED: scripts/small-fs: {e}"))?;
    let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
    match out.status.code() {
        Some(0) => Ok(String::from_utf8_lossy(&out.stdout).trim().to_string()),
        Some(77) => Err(format!("SKIPPED: {err}")),
        _ => Err(format!("scripts/small-fs {args:?}: {err}")),
    }
}

/// Writes 256 KiB pieces through `File` until a write or flush fails
/// (ENOSPC on the small file system), frees the space and flushes again.
/// Returns the bytes acknowledged by `write_all`s that returned `Ok` and
/// the piece of the one that failed (part of which `write` may have
/// acknowledged before), the first error, and the file after the second
/// flush (with `tokio::fs` or `overlapped_tokio::fs`).
type Filled = (Vec<u8>, Vec<u8>, std::io::Error, Vec<u8>);

async fn fill_then_free(dir: &Path, tokio_fs: bool) -> Result<Filled, String> {
    let p = dir.join(if tokio_fs { "tokio" } else { "overlap" });
    let ballast = dir.join("ballast");
    // More than a write and the bytes behind it can hold (2 MiB each).
    std::fs::write(&ballast, vec![1u8; 6 << 20]).map_err(|e| e.to_string())?;
    let mut acked = Vec::new();
    let mut failed = Vec::new();
    macro_rules! go {
        ($fs:path) => {{
            use $fs as fs;
            let mut f = fs::File::create(&p).await.map_err(|e| e.to_string())?;
            let mut err = None;
            for i in 0..256usize {
                let piece = data(256 << 10, i as u8);
                match f.write_all(&piece).await {
                    Ok(()) => acked.extend_from_slice(&piece),
                    Err(e) => {
                        err = Some(e);
                        failed = piece;
                        break;
                    }
                }
            }
            let err = match err {
                Some(e) => e,
                None => f
                    .flush()
                    .await
                    .err()
                    .ok_or("the file system never filled up")?,
            };
            std::fs::remove_file(&ballast).map_err(|e| e.to_string())?;
            let again = f.flush().await;
            drop(f);
            if let Err(e) = again {
                return Err(format!("the flush after freeing space failed: {e}"));
            }
            err
        }};
    }
    let err = if tokio_fs {
        go!(tokio::fs)
    } else {
        go!(overlapped_tokio::fs)
    };
    let got = std::fs::read(&p).map_err(|e| e.to_string())?;
    std::fs::remove_file(&p).map_err(|e| e.to_string())?;
    Ok((acked, failed, err, got))
}

async fn injected_failure_check(mnt: &Path) -> Result<(), String> {
    let (acked, failed, err, got) = fill_then_free(mnt, false).await?;
    if err.raw_os_error() != Some(libc::ENOSPC) {
        return Err(format!("the error was {err:?}, not ENOSPC"));
    }
    // Every acknowledged byte, those behind the failure included, once:
    // the pieces whose `write_all` returned, then a part of the failed one
    // (what its `write`s acknowledged before the error), nothing else.
    let extra = got.len().saturating_sub(acked.len());
    if !got.starts_with(&acked) || extra > failed.len() || got[acked.len()..] != failed[..extra] {
        return Err(format!(
            "after freeing space and a flush: {} bytes in the file, {} acknowledged",
            got.len(),
            acked.len()
        ));
    }
    match fill_then_free(mnt, true).await {
        Ok((t_acked, _, t_err, t_got)) => println!(
            "injected-failure: tokio::fs, same steps: {t_err}; {} of {} acknowledged bytes in \
             the file after freeing space and flushing (overlapped_tokio::fs: {} of {})",
            t_got.len().min(t_acked.len()),
            t_acked.len(),
            got.len(),
            acked.len()
        ),
        Err(e) => println!("injected-failure: tokio::fs, same steps: {e}"),
    }
    Ok(())
}

/// ENOSPC part-way through write-behind on a small ext4: the error reaches
/// the caller (`write` or `flush`), every byte acknowledged before it is in
/// the file, and the bytes still behind are not dropped: after space is
/// freed, a flush writes them.
#[test]
fn injected_failure() {
    let dir = tempdir();
    let d = dir.path().to_str().unwrap().to_string();
    let res = small_fs(&["mount", &d, "16"]).and_then(|mnt| {
        let r = crate::util::multi_thread().block_on(injected_failure_check(Path::new(&mnt)));
        let _ = small_fs(&["umount", &d]);
        r
    });
    cell("injected-failure", res);
}
