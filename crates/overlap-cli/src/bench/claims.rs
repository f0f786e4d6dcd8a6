//! Which operation comes next and where: requesters claim operation
//! numbers from a shared counter, each number maps to an offset, and a
//! result is checked against what was asked.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use anyhow::{bail, Result};

/// Buffers are aligned to at least this.
pub(crate) const PAGE: usize = 4096;

/// Hands out operation numbers to the requesters until the count (or the
/// time) is used up, and keeps the first error.
pub(crate) struct Claims {
    pub(crate) next: AtomicU64,
    pub(crate) total: u64,
    pub(crate) stop: AtomicBool,
    pub(crate) errors: AtomicU64,
    pub(crate) first_error: Mutex<Option<String>>,
}

impl Claims {
    pub(crate) fn new(total: u64) -> Claims {
        Claims {
            next: AtomicU64::new(0),
            total,
            stop: AtomicBool::new(false),
            errors: AtomicU64::new(0),
            first_error: Mutex::new(None),
        }
    }

    #[inline]
    pub(crate) fn claim(&self) -> Option<u64> {
        if self.stop.load(Ordering::Relaxed) {
            return None;
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        (i < self.total).then_some(i)
    }

    pub(crate) fn claimed(&self) -> u64 {
        self.next.load(Ordering::Relaxed).min(self.total)
    }

    pub(crate) fn fail(&self, msg: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        self.stop.store(true, Ordering::Relaxed);
        let mut e = self.first_error.lock().unwrap_or_else(|p| p.into_inner());
        if e.is_none() {
            *e = Some(msg);
        }
    }

    /// Checks one operation's result.
    #[inline]
    pub(crate) fn check(&self, res: overlapped::Result<usize>, bs: usize, offset: u64) {
        match res {
            Ok(n) if n == bs => {}
            Ok(n) => self.fail(format!(
                "short transfer at offset {offset}: {n} of {bs} bytes"
            )),
            Err(e) => self.fail(format!("operation at offset {offset} failed: {e}")),
        }
    }

    pub(crate) fn result(&self) -> Result<()> {
        let n = self.errors.load(Ordering::Relaxed);
        if n > 0 {
            let first = self
                .first_error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone()
                .unwrap_or_default();
            bail!("{n} operation(s) failed; first: {first}");
        }
        Ok(())
    }
}

/// Holds threads until the measured window opens.
#[derive(Default)]
pub(crate) struct Gate {
    open: Mutex<bool>,
    cv: std::sync::Condvar,
}

impl Gate {
    pub(crate) fn wait(&self) {
        let mut g = self.open.lock().unwrap_or_else(|p| p.into_inner());
        while !*g {
            g = self.cv.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }
    pub(crate) fn open(&self) {
        *self.open.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.cv.notify_all();
    }
}

/// Operation number → file offset.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Offsets {
    pub(crate) random: bool,
    pub(crate) blocks: u64,
    pub(crate) bs: u64,
    pub(crate) seed: u64,
}

impl Offsets {
    #[inline]
    pub(crate) fn at(&self, i: u64) -> u64 {
        let block = if self.random {
            splitmix64(self.seed ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15)) % self.blocks
        } else {
            i % self.blocks
        };
        block * self.bs
    }
}

#[inline]
fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn offsets_stay_in_the_file_and_aligned() {
        for random in [false, true] {
            let o = Offsets {
                random,
                blocks: 37,
                bs: 4096,
                seed: 9,
            };
            for i in 0..10_000 {
                let off = o.at(i);
                assert_eq!(off % 4096, 0);
                assert!(off < 37 * 4096);
            }
        }
        let o = Offsets {
            random: true,
            blocks: 1 << 20,
            bs: 512,
            seed: 1,
        };
        let distinct: HashSet<u64> = (0..1000).map(|i| o.at(i)).collect();
        assert!(distinct.len() > 990, "random offsets should rarely repeat");
    }
}
