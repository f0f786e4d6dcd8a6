//! What tokio users run today, measured in the same harness as the engine:
//! `--driver spawn-blocking` (pread inside `tokio::task::spawn_blocking`,
//! the pattern behind `tokio::fs`) and `--driver tokio-fs`
//! (`tokio::fs::File`: seek, then `read_exact` through its own buffer).
//! Both run `--concurrency N` tokio tasks with one read or write each in
//! flight, on the same multi-thread runtime the engine's tokio requesters
//! use.

use std::io::SeekFrom;
use std::sync::Arc;

use anyhow::{Context, Result};
use indicatif::ProgressBar;
use overlapped::AlignedBuf;
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

use super::claims::{Claims, Offsets, PAGE};
use super::measure::{LatSink, Measured, Meter};
use super::run::fill_for_write;
use super::{Driver, Job, Target};

/// A multi-thread runtime as the engine's tokio requesters get: one worker
/// per CPU (the blocking pool grows on demand, up to tokio's 512).
pub(crate) fn runtime(workers: Option<usize>) -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(
            workers.unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get())),
        )
        .thread_name("bench-tokio")
        .enable_all()
        .build()
        .context("starting the tokio runtime")
}

/// Runs `job` with `--driver spawn-blocking` or `--driver tokio-fs`.
pub(crate) fn run(
    job: &Job,
    target: &Target,
    claims: &Arc<Claims>,
    offsets: Offsets,
    bar: ProgressBar,
) -> Result<Measured> {
    let rt = runtime(job.tokio_workers)?;
    let lat = LatSink::new(job.timed);
    // One handle, or one per task where a shared one would serialise them.
    let handles = if super::run::HANDLE_PER_THREAD && job.driver != Driver::TokioFs {
        job.concurrency
    } else {
        1
    };
    let std_files: Vec<Arc<std::fs::File>> = (0..handles)
        .map(|_| super::run::open_std(job, target).map(Arc::new))
        .collect::<Result<_>>()?;
    // Each tokio::fs::File has one position, shared with its clones
    // (try_clone shares the open file description): each task opens the
    // file itself, as a tokio user would, before the window. Clones would
    // seek and read on each other's position.
    let tokio_files = if job.driver == Driver::TokioFs {
        task_files(&rt, job, target)?
    } else {
        Vec::new()
    };
    let meter = Meter::start(claims, job, bar);
    let parts = rt.block_on(async {
        let mut tasks = Vec::with_capacity(job.concurrency);
        if job.driver == Driver::TokioFs {
            for f in tokio_files {
                tasks.push(tokio::spawn(tokio_fs_task(
                    f,
                    job.clone(),
                    claims.clone(),
                    offsets,
                    lat.clone(),
                )));
            }
        } else {
            for t in 0..job.concurrency {
                tasks.push(tokio::spawn(spawn_blocking_task(
                    std_files[t % std_files.len()].clone(),
                    job.clone(),
                    claims.clone(),
                    offsets,
                    lat.clone(),
                )));
            }
        }
        let mut parts = Vec::with_capacity(tasks.len());
        for t in tasks {
            parts.push(t.await);
        }
        parts
    });
    let w = meter.finish();
    drop(rt);
    let mut ops = 0;
    for p in parts {
        ops += p.context("a requester task panicked")??;
    }
    Ok(Measured::without_engine(ops, w, lat.merged()?, "tokio"))
}

/// The target opened once per task on `rt`, as `tokio::fs::File`s.
fn task_files(
    rt: &tokio::runtime::Runtime,
    job: &Job,
    target: &Target,
) -> Result<Vec<tokio::fs::File>> {
    rt.block_on(async {
        let mut v = Vec::with_capacity(job.concurrency);
        for _ in 0..job.concurrency {
            let f = tokio::fs::OpenOptions::new()
                .read(true)
                .write(job.rw.is_write())
                .open(&target.path)
                .await
                .with_context(|| format!("opening {} for a task", target.path.display()))?;
            v.push(f);
        }
        Ok::<_, anyhow::Error>(v)
    })
}

/// One task: each operation a `pread`/`pwrite` on tokio's blocking pool.
async fn spawn_blocking_task(
    file: Arc<std::fs::File>,
    job: Job,
    claims: Arc<Claims>,
    offsets: Offsets,
    lat: Arc<LatSink>,
) -> Result<u64> {
    let mut h = lat.local();
    let mut buf = AlignedBuf::new(job.bs, PAGE)?;
    fill_for_write(job.rw, &mut buf);
    let write = job.rw.is_write();
    while let Some(i) = claims.claim() {
        let off = offsets.at(i);
        let t = h.now();
        let file = file.clone();
        let (r, b) = tokio::task::spawn_blocking(move || {
            let r = if write {
                crate::sys::write_at(&file, &buf, off)
            } else {
                crate::sys::read_at(&file, &mut buf, off)
            };
            (r, buf)
        })
        .await
        .context("a spawn_blocking call panicked")?;
        h.done(t);
        claims.check(r.map_err(overlapped::Error::from), job.bs, off);
        buf = b;
    }
    Ok(h.finish())
}

/// One task with its own `tokio::fs::File`: seek, then `read_exact` (or
/// `write_all` and `flush`).
async fn tokio_fs_task(
    mut file: tokio::fs::File,
    job: Job,
    claims: Arc<Claims>,
    offsets: Offsets,
    lat: Arc<LatSink>,
) -> Result<u64> {
    let mut h = lat.local();
    let mut buf = vec![0u8; job.bs];
    if job.rw.is_write() {
        super::datafile::fill_pattern(&mut buf);
    }
    while let Some(i) = claims.claim() {
        let off = offsets.at(i);
        let t = h.now();
        let r = async {
            file.seek(SeekFrom::Start(off)).await?;
            if job.rw.is_write() {
                file.write_all(&buf).await?;
                file.flush().await?;
            } else {
                file.read_exact(&mut buf).await?;
            }
            Ok::<usize, std::io::Error>(job.bs)
        }
        .await;
        h.done(t);
        claims.check(r.map_err(overlapped::Error::from), job.bs, off);
    }
    Ok(h.finish())
}
