//! A program written only against overlap's public API, the same on Linux
//! and Windows: it writes 64 MiB with 32 operations in flight (a port and
//! futures), reads it back and compares every byte, lets a thread exit with
//! writes in flight, and drops write futures mid-flight, then checks that no
//! write was lost: what a database's or a log writer's I/O path does.
//!
//! `cargo run --release --example in_flight [DIR]` (DIR: where the 64 MiB
//! file goes, default the system's temporary directory). It prints each
//! step and the engine's statistics, and exits 1 on the first wrong byte.
//! `scripts/test-windows` runs it under Wine.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::pin;
use std::process::ExitCode;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use overlapped::{join_all, Engine, File, OpenOptions, Port};

const TOTAL: u64 = 64 << 20;
const CHUNK: u64 = 256 << 10;
const IN_FLIGHT: u64 = 32;

/// The byte at `pos` of the file a run with `seed` writes.
fn byte(seed: u64, pos: u64) -> u8 {
    (pos.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8 ^ seed as u8
}

fn chunk(seed: u64, offset: u64, len: u64) -> Vec<u8> {
    (offset..offset + len).map(|p| byte(seed, p)).collect()
}

type Check = Result<(), String>;

fn open_rw(engine: &Engine, path: &Path) -> Result<File, String> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(engine, path)
        .wait()
        .map_err(|e| format!("open {}: {e}", path.display()))
}

/// 64 MiB through a port, never more than 32 writes in flight.
fn write_through_port(engine: &Engine, file: &File) -> Check {
    let port: Port<Vec<u8>> = Port::new(engine);
    let (mut next, mut done, chunks) = (0, 0, TOTAL / CHUNK);
    while done < chunks {
        while next < chunks && next - done < IN_FLIGHT {
            let off = next * CHUNK;
            port.write_at(file, chunk(1, off, CHUNK), off, next)
                .map_err(|(e, _)| format!("submit write {next}: {e}"))?;
            next += 1;
        }
        let c = port.next().ok_or("the port lost a write")?;
        let n = c.result.map_err(|e| format!("write {}: {e}", c.key))?;
        if n as u64 != CHUNK {
            return Err(format!("write {} took {n} of {CHUNK} bytes", c.key));
        }
        done += 1;
    }
    Ok(())
}

/// Reads the file back with 32 futures at a time and compares every byte.
fn read_back(file: &File, seed: u64, len: u64) -> Check {
    let mut off = 0;
    while off < len {
        let reads: Vec<_> = (0..IN_FLIGHT)
            .map(|i| off + i * CHUNK)
            .filter(|&o| o < len)
            .map(|o| file.read_exact_at(vec![0u8; CHUNK.min(len - o) as usize], o))
            .collect();
        let n = reads.len() as u64;
        for (i, (res, buf)) in overlapped::block_on(join_all(reads))
            .into_iter()
            .enumerate()
        {
            let o = off + i as u64 * CHUNK;
            res.map_err(|e| format!("read at {o}: {e}"))?;
            if let Some(bad) = (0..buf.len()).find(|&k| buf[k] != byte(seed, o + k as u64)) {
                return Err(format!(
                    "byte {} differs after reading it back",
                    o + bad as u64
                ));
            }
        }
        off += n * CHUNK;
    }
    Ok(())
}

/// A waker that does nothing: the futures it polls are dropped unfinished.
struct Ignore;

impl Wake for Ignore {
    fn wake(self: Arc<Self>) {}
}

/// Polls a future once (it submits its operation).
fn poll_once<F: Future + Unpin>(fut: &mut F) -> Poll<F::Output> {
    let waker = Waker::from(Arc::new(Ignore));
    pin!(fut).poll(&mut Context::from_waker(&waker))
}

/// A thread submits 32 writes, polls each once, drops them and exits:
/// every write still lands (the engine owns each buffer until its end).
fn writes_outlive_their_thread(engine: &Engine, path: &Path) -> Check {
    let file = open_rw(engine, path)?;
    let f = file.clone();
    std::thread::spawn(move || {
        for i in 0..IN_FLIGHT {
            let mut op = f.write_at(chunk(2, i * CHUNK, CHUNK), i * CHUNK);
            let _ = poll_once(&mut op);
        }
    })
    .join()
    .map_err(|_| "the submitting thread panicked")?;
    // Close waits for the operations in flight, then closes; the bytes
    // are read back through a new handle.
    file.close().wait().map_err(|e| format!("close: {e}"))?;
    let again = open_rw_keep(engine, path)?;
    read_back(&again, 2, IN_FLIGHT * CHUNK)
}

fn open_rw_keep(engine: &Engine, path: &Path) -> Result<File, String> {
    File::open(engine, path)
        .wait()
        .map_err(|e| format!("open {}: {e}", path.display()))
}

/// Futures dropped mid-flight, on this thread: their writes land too.
fn dropped_futures_still_write(engine: &Engine, path: &Path) -> Check {
    let file = open_rw(engine, path)?;
    for i in 0..IN_FLIGHT {
        let mut op = file.write_at(chunk(3, i * CHUNK, CHUNK), i * CHUNK);
        let _ = poll_once(&mut op);
        drop(op);
    }
    file.close().wait().map_err(|e| format!("close: {e}"))?;
    read_back(&open_rw_keep(engine, path)?, 3, IN_FLIGHT * CHUNK)
}

fn run(dir: &Path) -> Check {
    let engine = Engine::new().map_err(|e| format!("engine: {e}"))?;
    println!("in_flight: engine: {}", engine.driver());
    let path = dir.join(format!("overlap-in-flight-{}.bin", std::process::id()));
    let file = open_rw(&engine, &path)?;
    write_through_port(&engine, &file)?;
    file.sync_all().wait().map_err(|e| format!("sync: {e}"))?;
    read_back(&file, 1, TOTAL)?;
    println!("in_flight: 64 MiB written with {IN_FLIGHT} in flight and read back identical");
    drop(file);
    writes_outlive_their_thread(&engine, &path)?;
    println!("in_flight: {IN_FLIGHT} writes from a thread that exited all landed");
    dropped_futures_still_write(&engine, &path)?;
    println!("in_flight: {IN_FLIGHT} write futures dropped mid-flight all landed");
    let _ = std::fs::remove_file(&path);
    let s = engine.stats();
    println!(
        "in_flight: completed {} (inline {}, asynchronous {}), errors {}, written {} B, read {} B",
        s.completed, s.completed_inline, s.completed_async, s.errors, s.bytes_written, s.bytes_read
    );
    engine.shutdown();
    Ok(())
}

fn main() -> ExitCode {
    let dir = std::env::args_os()
        .nth(1)
        .map_or_else(std::env::temp_dir, PathBuf::from);
    match run(&dir) {
        Ok(()) => {
            println!("in_flight: ok");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("in_flight: FAIL: {e}");
            ExitCode::FAILURE
        }
    }
}
