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
