//! What the commands need from the operating system, in one place: free
//! space and the file system's name, the page cache (drop, residency,
//! dirty pages), positioned reads and writes of a `std::fs::File`, direct
//! I/O, preallocation, CPU time, the open-files limit, interruption and
//! stopping a child. `unix.rs` is Linux's, `windows.rs` Windows'; the rest
//! of the crate calls these functions and never the systems' own.

#[cfg(not(windows))]
mod unix;
#[cfg(not(windows))]
pub(crate) use unix::*;

#[cfg(windows)]
mod windows;
#[cfg(windows)]
pub(crate) use windows::*;

/// Share of the pages of `pages` (one flag per page of the file, from
/// [`residency`]) covering the `chunk`-byte ranges at `offsets` that are
/// cached.
pub(crate) fn cached_share(pages: &[bool], offsets: &[u64], chunk: u64) -> f64 {
    if pages.is_empty() || offsets.is_empty() {
        return 0.0;
    }
    let page = page_size().max(1);
    let per_chunk = (chunk / page).max(1) as usize;
    let mut hit = 0usize;
    let mut all = 0usize;
    for &off in offsets {
        let first = (off / page) as usize;
        for p in pages.iter().skip(first).take(per_chunk) {
            all += 1;
            hit += usize::from(*p);
        }
    }
    if all == 0 {
        0.0
    } else {
        hit as f64 / all as f64
    }
}

/// Share of all the pages of `pages` that are cached.
pub(crate) fn whole_share(pages: &[bool]) -> f64 {
    if pages.is_empty() {
        return 0.0;
    }
    pages.iter().filter(|p| **p).count() as f64 / pages.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The calls the commands build on answer for a real file next to the
    /// test binary: free space, the file system's name, positioned writes
    /// and reads, dropping the cache (the data stays).
    #[test]
    fn the_system_answers_for_a_real_file() {
        let exe = std::env::current_exe().unwrap();
        let dir = exe.parent().unwrap();
        assert!(free_bytes(dir).unwrap() > 0);
        let kind = fs_kind(dir);
        assert!(!kind.is_empty() && kind != "unknown", "{kind}");
        let path = dir.join(format!("overlap-sys-unit-{}", std::process::id()));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        write_all_at(&f, b"0123456789", 4096).unwrap();
        f.sync_all().unwrap();
        drop_cache(&f).unwrap();
        let mut buf = [0u8; 10];
        assert_eq!(read_at(&f, &mut buf, 4096).unwrap(), 10);
        assert_eq!(&buf, b"0123456789");
        assert!(page_size() >= 4096 && page_size().is_power_of_two());
        match allocate(&f, 1 << 20) {
            Ok(()) => {
                assert_eq!(f.metadata().unwrap().len(), 1 << 20);
                // A longer file is never cut.
                allocate(&f, 4096).unwrap();
                assert_eq!(f.metadata().unwrap().len(), 1 << 20);
            }
            Err(e) if e.raw_os_error().is_some_and(allocation_unsupported) => {
                println!("SKIPPED: allocation: {kind} cannot preallocate here ({e})");
            }
            Err(e) => panic!("{e}"),
        }
        let (cpu, _) = cpu_and_switches();
        assert!(cpu > 0.0);
        drop(f);
        std::fs::remove_file(&path).unwrap();
    }
}
