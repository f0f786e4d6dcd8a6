//! The data files a run reads and writes: created in `--dir` (and removed at
//! the end) or given with `--file`: a regular file or, as fio's
//! `--filename` allows, a block device (its size from the device; written
//! only with `--allow-write`, as any given file).

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};

use anyhow::{bail, Context, Result};

use crate::cleanup::registry;
use crate::size::fmt_bytes;

use super::{Job, Target};

/// The fio child running now (0: none), killed on interruption.
static FIO_CHILD: AtomicI32 = AtomicI32::new(0);

/// Records the running fio process (None when it has ended).
pub(crate) fn set_fio_child(pid: Option<u32>) {
    FIO_CHILD.store(pid.map_or(0, |p| p as i32), Ordering::SeqCst);
}

/// On SIGINT, SIGTERM or SIGHUP: stop fio, remove the data files, exit with
/// 128 + the signal (see [`crate::cleanup::install`]).
fn install_signal_cleanup() {
    crate::cleanup::install("bench", Some(kill_fio_child));
}

fn kill_fio_child() {
    let child = FIO_CHILD.load(Ordering::SeqCst);
    if let Ok(pid) = u32::try_from(child) {
        if pid > 0 {
            crate::sys::kill(pid);
        }
    }
}

/// Creates `path` (truncating it if `truncate`, else failing if it exists),
/// registered for removal.
fn create_registered(path: &Path, truncate: bool) -> Result<File> {
    let mut files = registry();
    let mut o = OpenOptions::new();
    o.write(true);
    if truncate {
        o.create(true).truncate(true);
    } else {
        o.create_new(true);
    }
    let f = o
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    if !files.iter().any(|p| p == path) {
        files.push(path.to_path_buf());
    }
    Ok(f)
}

/// The files of one invocation.
pub(crate) struct DataFiles {
    dir: PathBuf,
    given: Option<PathBuf>,
    size_given: bool,
    size: u64,
    /// The read file, created on first use and reused by every read result.
    read_file: Option<PathBuf>,
}

impl DataFiles {
    pub(crate) fn new(dir: PathBuf, given: Option<PathBuf>, size_given: bool, size: u64) -> Self {
        install_signal_cleanup();
        DataFiles {
            dir,
            given,
            size_given,
            size,
            read_file: None,
        }
    }

    fn scratch_path(&self, what: &str) -> PathBuf {
        self.dir
            .join(format!("overlap-bench-{}-{what}.dat", std::process::id()))
    }

    /// Makes the file ready for `job` (fresh for write jobs, the page cache
    /// warmed or dropped for buffered reads) and says where it is.
    pub(crate) fn target_for(&mut self, job: &Job) -> Result<Target> {
        let target = if job.rw.is_write() {
            self.write_target(job)?
        } else {
            self.read_target(job)?
        };
        if target.size < job.bs as u64 {
            bail!(
                "{} holds {} bytes, less than one block of {} bytes",
                target.path.display(),
                target.size,
                job.bs
            );
        }
        Ok(target)
    }

    fn read_target(&mut self, job: &Job) -> Result<Target> {
        let path = match (&self.given, &self.read_file) {
            (Some(p), _) | (None, Some(p)) => p.clone(),
            (None, None) => {
                self.check_dir(self.size)?;
                let p = self.scratch_path("read");
                fill(&p, self.size)?;
                self.read_file = Some(p.clone());
                p
            }
        };
        // Checked before opening: open() on a FIFO blocks until a writer
        // comes, i.e. forever.
        given_size(&path)?;
        let f = File::open(&path).with_context(|| format!("opening {}", path.display()))?;
        let len = size_of(&f, &path)?;
        let size = if self.size_given {
            self.size.min(len)
        } else {
            len
        };
        if !job.direct {
            if job.warm {
                warm(&f, size)
                    .with_context(|| format!("reading {} into the page cache", path.display()))?;
            } else {
                drop_cache(&f);
            }
        }
        Ok(Target { path, size })
    }

    fn write_target(&mut self, job: &Job) -> Result<Target> {
        if let Some(p) = &self.given {
            // --allow-write was checked when planning: overwrite in place.
            let device = given_size(p)?.1;
            let f = OpenOptions::new()
                .write(true)
                .open(p)
                .with_context(|| format!("opening {} for writing", p.display()))?;
            let len = size_of(&f, p)?;
            // A device cannot grow: never past its end.
            let size = match (self.size_given, device) {
                (true, true) => self.size.min(len),
                (true, false) => self.size,
                (false, _) => len,
            };
            if job.prealloc && !device {
                allocate(&f, size)?;
            }
            return Ok(Target {
                path: p.clone(),
                size,
            });
        }
        let p = self.scratch_path("write");
        if !registry().contains(&p) {
            self.check_dir(self.size)?;
        }
        let f = create_registered(&p, true)?;
        if job.prealloc {
            allocate(&f, self.size)?;
        }
        f.sync_all()?;
        Ok(Target {
            path: p,
            size: self.size,
        })
    }

    /// Refuses a missing directory, or one without room for `need` bytes
    /// (plus 5%), before anything is written.
    fn check_dir(&self, need: u64) -> Result<()> {
        let d = &self.dir;
        if !d.is_dir() {
            bail!("--dir {}: no such directory", d.display());
        }
        if let Ok(avail) = crate::sys::free_bytes(d) {
            let want = need + need / 20;
            if avail < want {
                bail!(
                    "--dir {} has {} free; the data file needs {} (use a smaller --size or another --dir)",
                    d.display(),
                    fmt_bytes(avail),
                    fmt_bytes(want)
                );
            }
        }
        Ok(())
    }

    /// Removes the files this run created.
    pub(crate) fn cleanup(&mut self) -> Result<()> {
        let mut first_err = None;
        let created = std::mem::take(&mut *registry());
        for p in created {
            if let Err(e) = std::fs::remove_file(&p) {
                if e.kind() != std::io::ErrorKind::NotFound && first_err.is_none() {
                    first_err = Some(anyhow::anyhow!("removing {}: {e}", p.display()));
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

impl Drop for DataFiles {
    fn drop(&mut self) {
        let _ = self.cleanup();
    }
}

/// Checks, without opening it, that a given `--file` is a regular file or
/// a block device; returns its size as `stat` says (0 for a device: see
/// [`size_of`]) and whether it is a device.
fn given_size(path: &Path) -> Result<(u64, bool)> {
    let meta = std::fs::metadata(path).with_context(|| format!("--file {}", path.display()))?;
    let t = meta.file_type();
    if t.is_file() {
        return Ok((meta.len(), false));
    }
    if crate::sys::is_block_device(&t) {
        return Ok((0, true));
    }
    let what = if let Some(kind) = crate::sys::special_kind(&t) {
        kind
    } else if t.is_dir() {
        "a directory (use --dir for a scratch file in it)"
    } else {
        "not a regular file"
    };
    bail!(
        "--file {} is {what}: bench reads a regular file or a block device",
        path.display()
    )
}

/// The size of an open regular file or block device (`BLKGETSIZE64`).
fn size_of(f: &File, path: &Path) -> Result<u64> {
    let meta = f.metadata()?;
    if !crate::sys::is_block_device(&meta.file_type()) {
        return Ok(meta.len());
    }
    crate::sys::device_size(f)
        .with_context(|| format!("the size of block device {}", path.display()))
}

/// Writes `size` bytes of non-zero data and makes them durable.
fn fill(path: &Path, size: u64) -> Result<()> {
    eprintln!(
        "creating data file {} ({})",
        path.display(),
        fmt_bytes(size)
    );
    let mut f = create_registered(path, false)?;
    // Chunks are windows of one precomputed pattern.
    const CHUNK: usize = 1 << 20;
    let mut pattern = vec![0u8; CHUNK + 251];
    fill_pattern(&mut pattern);
    let mut done = 0u64;
    while done < size {
        let n = (size - done).min(CHUNK as u64) as usize;
        let start = (done % 251) as usize;
        f.write_all(&pattern[start..start + n])
            .with_context(|| format!("writing {}", path.display()))?;
        done += n as u64;
    }
    f.sync_all()
        .with_context(|| format!("fsync {}", path.display()))?;
    Ok(())
}

/// Byte k of `buf` becomes k % 251 + 1: never zero, and no 4 KiB block
/// equals its neighbour (251 is prime), so neither compression nor
/// zero-detection can make I/O cheaper than real.
pub(crate) fn fill_pattern(buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (i % 251 + 1) as u8;
    }
}

fn allocate(f: &File, size: u64) -> Result<()> {
    crate::sys::allocate(f, size)
        .with_context(|| format!("{} (--prealloc)", crate::sys::ALLOCATE_NAME))
}

/// Reads the first `size` bytes so that they sit in the page cache.
fn warm(f: &File, size: u64) -> Result<()> {
    let mut r = f.take(size);
    let mut buf = vec![0u8; 1 << 20];
    while r.read(&mut buf)? > 0 {}
    Ok(())
}

/// Drops the file's clean cached pages (fio's invalidate=1).
fn drop_cache(f: &File) {
    let _ = crate::sys::drop_cache(f);
}
