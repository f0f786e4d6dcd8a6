//! What the probe needs from the system: its files' cleanup, the file
//! system's type and free space, page-cache residency and eviction, and a
//! quiet snapshot of the kernel's io_uring workers.

use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use indicatif::ProgressBar;
use overlapped::KernelWorkers;

use super::CHUNK;

// ---------------------------------------------------------------------------
// Cleanup: the probe's files go away on success, error, panic and Ctrl-C.
// ---------------------------------------------------------------------------

/// Owns the probe's files: removes them when dropped, and on SIGINT, SIGTERM
/// or SIGHUP (see [`crate::cleanup::install`]).
pub(super) struct Cleanup;

impl Cleanup {
    pub(super) fn install() -> Cleanup {
        crate::cleanup::install("probe", None);
        Cleanup
    }

    /// Creates `path` with `create`, recorded for removal. The registry's
    /// lock is held meanwhile, so that an interruption either sees the file
    /// registered or stops its creation.
    pub(super) fn create<T>(&self, path: &Path, create: impl FnOnce() -> Result<T>) -> Result<T> {
        let mut list = crate::cleanup::registry();
        list.push(path.to_path_buf());
        create()
    }

    /// Removes `path` now and forgets it.
    pub(super) fn remove(&self, path: &Path) -> Result<()> {
        let mut list = crate::cleanup::registry();
        let removed =
            std::fs::remove_file(path).with_context(|| format!("removing {}", path.display()));
        list.retain(|p| p != path);
        removed
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        crate::cleanup::remove_all();
    }
}

// ---------------------------------------------------------------------------
// The file system: free space, type, page-cache residency.
// ---------------------------------------------------------------------------

/// The file system holding the probe's directory.
pub(super) struct FsInfo {
    /// Bytes free to an unprivileged user.
    pub(super) available: u64,
    /// Its type (`ext4`, ...).
    pub(super) kind: String,
}

/// The file system holding `dir`: its type and free space.
pub(super) fn fs_info(dir: &Path) -> Result<FsInfo> {
    let available = crate::sys::free_bytes(dir)
        .with_context(|| format!("the free space of {}", dir.display()))?;
    let kind = crate::sys::fs_kind(dir);
    Ok(FsInfo { available, kind })
}

/// Which pages of the first `len` bytes of `file` are in the page cache;
/// `None` when the system will not tell.
pub(super) fn residency(file: &std::fs::File, len: u64) -> Option<Vec<bool>> {
    crate::sys::residency(file, len)
}

/// Share of the pages covering `offsets` (64 KiB each) that are cached.
pub(super) fn cached_share(pages: &[bool], offsets: &[u64]) -> f64 {
    crate::sys::cached_share(pages, offsets, CHUNK)
}

pub(super) use crate::sys::whole_share;

/// Pages of the 64 KiB ranges at `offsets` of `file` that are dirty or
/// under writeback in the page cache (written, not yet on the device):
/// a direct read of them must wait until the kernel has written them
/// back. `None` when the system cannot tell (no `cachestat` before Linux
/// 6.5; Windows).
pub(super) fn unwritten_pages(file: &std::fs::File, offsets: &[u64]) -> Option<u64> {
    crate::sys::unwritten_pages(file, offsets, CHUNK)
}

/// Drops `file` from the page cache: on Linux its dirty pages are written
/// first (fdatasync); on Windows the handle without buffering that
/// [`crate::sys::drop_cache`] opens has them written (a read-only handle
/// cannot `FlushFileBuffers`).
pub(super) fn evict(file: &std::fs::File) -> Result<()> {
    #[cfg(not(windows))]
    file.sync_data().context("fdatasync before eviction")?;
    crate::sys::drop_cache(file).with_context(|| {
        format!(
            "{} to evict the file from the page cache",
            crate::sys::DROP_CACHE_NAME
        )
    })
}

/// Reads the whole file once (buffered) so that it is in the page cache.
pub(super) fn warm(path: &Path, pb: &ProgressBar) -> Result<()> {
    let mut f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f
            .read(&mut buf)
            .context("reading the file into the page cache")?;
        if n == 0 {
            return Ok(());
        }
        pb.inc(n as u64);
    }
}

pub(super) use crate::sys::advise_random;

/// Kernel-worker snapshot taken once workers have gone quiet (none used CPU
/// for 5 ms; at most 250 ms of waiting), so that the tail of the previous
/// step (opening a file, fallocate, fsync: io_uring always hands those to
/// workers) is not charged to the next mode.
pub(super) fn quiet_workers() -> KernelWorkers {
    let deadline = Instant::now() + Duration::from_millis(250);
    let mut prev = KernelWorkers::snapshot();
    loop {
        std::thread::sleep(Duration::from_millis(5));
        let now = KernelWorkers::snapshot();
        if now.active_since(&prev) == 0 || Instant::now() >= deadline {
            return now;
        }
        prev = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Linux's: Windows does not tell which pages are cached.
    #[test]
    #[cfg(not(windows))]
    fn page_residency_is_measured() {
        // Next to the test binary, inside cargo's target directory: neither a
        // tmpfs (which cannot evict) nor the source tree.
        struct Remove(std::path::PathBuf);
        impl Drop for Remove {
            fn drop(&mut self) {
                let _ = std::fs::remove_file(&self.0);
            }
        }
        let exe = std::env::current_exe().unwrap();
        let path = exe
            .parent()
            .unwrap()
            .join(format!("overlap-probe-unit-{}", std::process::id()));
        let _remove = Remove(path.clone());
        std::fs::write(&path, vec![1u8; 4 * CHUNK as usize]).unwrap();
        let f = std::fs::File::open(&path).unwrap();
        let pages = residency(&f, 4 * CHUNK).expect("mincore");
        // Just written: in the page cache.
        assert!(whole_share(&pages) > 0.99, "{}", whole_share(&pages));
        assert!(cached_share(&pages, &[0, 2 * CHUNK]) > 0.99);
        evict(&f).unwrap();
        assert_eq!(unwritten_pages(&f, &[0, 2 * CHUNK]).unwrap_or(0), 0);
        let after = residency(&f, 4 * CHUNK).expect("mincore");
        assert!(whole_share(&after) < whole_share(&pages));
        assert!(cached_share(&after, &[0, 2 * CHUNK]) < 0.99);
    }

    /// A file just written has dirty pages, and the explanation of an
    /// O_DIRECT read mode that met them says that they had to be written
    /// back first; once synced, none is counted.
    #[test]
    fn dirty_pages_of_a_file_just_written_are_counted_and_explained() {
        use crate::probe::modes::Measurement;
        use crate::probe::plan::{Api, Mode, ReadKind};
        use crate::probe::verdict::{explain, Facts, Verdict};
        let exe = std::env::current_exe().unwrap();
        let path = exe
            .parent()
            .unwrap()
            .join(format!("overlap-probe-dirty-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        // A new inode: ext4 writes a file truncated and rewritten back at close.
        std::fs::write(&path, vec![3u8; 4 * CHUNK as usize]).unwrap();
        let f = std::fs::File::open(&path).unwrap();
        let offsets = [0, CHUNK, 3 * CHUNK];
        let Some(dirty) = unwritten_pages(&f, &offsets) else {
            println!(
                "SKIPPED: the system does not tell which pages are dirty (cachestat(2) needs \
                 Linux 6.5; Windows has no such call)"
            );
            let _ = std::fs::remove_file(&path);
            return;
        };
        assert!(dirty > 0, "a file just written has no dirty page");
        let facts = Facts {
            driver: overlapped::DriverKind::Uring,
            fs: "ext4".into(),
            grow_workers: None,
            windows: false,
        };
        let m = Measurement {
            requests: 3,
            queue: Duration::from_millis(1),
            complete: Duration::from_millis(20),
            kernel_workers: 2,
            dirty_before: Some(dirty),
            ..Measurement::default()
        };
        let mode = Mode::Read(Api::Async, ReadKind::Direct);
        let e = explain(mode, Verdict::KernelWorkers, &m, &facts);
        assert!(
            e.contains(&format!("{dirty} of the requested pages were dirty"))
                && e.contains("written them back"),
            "{e}"
        );
        f.sync_all().unwrap();
        assert_eq!(unwritten_pages(&f, &offsets), Some(0));
        let clean = Measurement {
            dirty_before: Some(0),
            ..m
        };
        let e = explain(mode, Verdict::KernelWorkers, &clean, &facts);
        assert!(
            !e.contains("were dirty") && e.contains("none of the requested pages was dirty"),
            "{e}"
        );
        let _ = std::fs::remove_file(&path);
    }
}
