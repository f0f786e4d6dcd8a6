//! The futex word that threads blocked in
//! [`Journal::wait_blocking`](super::Journal::wait_blocking) sleep on, and
//! how a moved watermark wakes them: in a tree, each woken sleeper waking
//! the next ones, instead of all by the flusher.
//!
//! Why a tree: with one `FUTEX_WAKE` for all, the flusher spent about
//! 200 µs per group commit in that system call when 64 committers slept
//! (on this project's 2-vCPU machine, where every wake-up of a thread on
//! the other vCPU is an interrupt between vCPUs), and could neither
//! collect nor write the next batch meanwhile. Now the flusher wakes
//! [`FANOUT`] sleepers and goes on; each of them, once it runs, wakes
//! [`FANOUT`] more before it looks at its own record. BENCHMARKS.md
//! ("Group commit: the woken committers wake each other") has the
//! measurements, and those of the designs that lost: a waker thread of its
//! own, waking only the sleepers a commit covers (each in a tree of its own
//! futex words), a flusher that spins for up to 200 µs instead of sleeping
//! (when its writes went through the engine thread; polling on its own
//! ring while many committers wait later won: `Options::spin_committers`),
//! and two batch writes in flight.
//!
//! Why no sleeper is forgotten: a sleeper sleeps only if the word still
//! holds the value it read before its last check (`FUTEX_WAIT` compares
//! atomically), so the sleepers queued when the word is bumped are exactly
//! the *stale* ones, and the kernel queues them ahead of every sleeper
//! that comes later (futex waiters of the same priority are woken in the
//! order they slept). Each wake-up therefore reaches a stale sleeper while
//! any is left, and every stale sleeper that is woken passes
//! [`FANOUT`] wake-ups on, which is more than enough to reach them all; a
//! wake-up that reaches a later sleeper is spurious (it checks, sleeps
//! again and passes nothing on). Two nets catch what that argument does
//! not cover (real-time sleepers are queued by priority, not order): the
//! flusher wakes every sleeper of a level before it goes idle once that
//! level's watermark has reached everything appended ([`Bell::sweep`]), and
//! no sleep lasts longer than [`MAX_SLEEP`] before the sleeper checks
//! again.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

/// How many sleepers a ring wakes, and each woken stale sleeper wakes in
/// turn. Chosen by measurement (2 to 16 were tried; 3 to 8 were within
/// the noise of each other, 4 is in the middle).
pub(super) const FANOUT: i32 = 4;

/// The longest a sleeper sleeps before it checks again on its own, so that
/// a wake-up the tree failed to pass (see the module docs) costs at most
/// this much latency, never a hang.
pub(super) const MAX_SLEEP: Duration = Duration::from_millis(10);

/// A futex word bumped each time its watermark moves.
pub(super) struct Bell {
    word: AtomicU32,
    /// Threads between announcing their sleep and waking from it.
    sleepers: AtomicUsize,
    /// The word's value at the last [`sweep`](Self::sweep).
    swept: AtomicU32,
    /// [`MAX_SLEEP`], except in tests.
    max_sleep: Duration,
}

impl Default for Bell {
    fn default() -> Self {
        Self::with_max_sleep(MAX_SLEEP)
    }
}

impl Bell {
    fn with_max_sleep(max_sleep: Duration) -> Self {
        Bell {
            word: AtomicU32::new(0),
            sleepers: AtomicUsize::new(0),
            swept: AtomicU32::new(0),
            max_sleep,
        }
    }

    /// The word's value now: read it before the last check of the
    /// condition, then pass it to [`sleep`](Self::sleep).
    pub(super) fn seen(&self) -> u32 {
        self.word.load(SeqCst)
    }

    /// Sleeps unless the word has moved from `seen`, for at most
    /// [`MAX_SLEEP`]; when woken by a ring, passes the wake-up on. The
    /// caller checks its condition again afterwards (a wake-up may be
    /// spurious). Returns whether the thread was woken by a wake-up (as
    /// opposed to the word having moved already, or the time limit).
    pub(super) fn sleep(&self, seen: u32) -> bool {
        self.sleepers.fetch_add(1, SeqCst);
        let woken = wait(&self.word, seen, self.max_sleep);
        // Pass the wake-up on only if it was a ring's (the word moved since
        // we slept): a sleeper that came after the ring and was woken by
        // one of its last passes is spurious and ends that branch.
        if woken && self.word.load(SeqCst) != seen && self.sleepers.load(SeqCst) > 1 {
            self.wake(FANOUT);
        }
        let before = self.sleepers.fetch_sub(1, SeqCst);
        debug_assert!(before > 0, "a sleeper leaving was counted when it came");
        woken
    }

    /// Bumps the word and wakes the first [`FANOUT`] sleepers, who pass it
    /// on; returns how many sleepers there were.
    ///
    /// With at most [`FANOUT`] sleepers this wakes every one blocked on an
    /// older value itself (a sleeper counted but not yet blocked finds the
    /// word moved), so it marks the word swept: the next
    /// [`sweep`](Self::sweep) then wakes nobody, in particular not a lone
    /// committer that already appended again and sleeps for its new record.
    pub(super) fn ring(&self) -> u64 {
        let w = self.word.fetch_add(1, SeqCst).wrapping_add(1);
        let n = self.sleepers.load(SeqCst);
        if n > 0 {
            self.wake(FANOUT);
        }
        if n <= FANOUT as usize {
            self.swept.store(w, SeqCst);
        }
        n as u64
    }

    /// Bumps the word and wakes every sleeper at once (failure, close).
    pub(super) fn ring_all(&self) {
        self.word.fetch_add(1, SeqCst);
        self.wake(i32::MAX);
    }

    /// Wakes every sleeper if the word moved since the last sweep and
    /// someone sleeps: the flusher calls this before it goes idle, when
    /// every sleeper of a past ring should be awake already.
    pub(super) fn sweep(&self) {
        let w = self.word.load(SeqCst);
        if self.sleepers.load(SeqCst) > 0 && self.swept.swap(w, SeqCst) != w {
            self.wake(i32::MAX);
        }
    }

    fn wake(&self, n: i32) {
        debug_assert!(n > 0);
        wake(&self.word, n);
    }
}

/// Sleeps while `word` holds `seen`, for at most `limit`: whether a
/// wake-up ended the sleep (not the word having moved already, nor the
/// time limit). `FUTEX_WAIT` compares and sleeps atomically.
#[cfg(target_os = "linux")]
fn wait(word: &AtomicU32, seen: u32, limit: Duration) -> bool {
    let limit = libc::timespec {
        tv_sec: limit.as_secs() as libc::time_t,
        tv_nsec: limit.subsec_nanos() as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT reads the aligned u32 the atomic owns (it lives
    // as long as the caller's borrow, which outlives the call) and the
    // timespec on this stack frame; it writes no memory.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            seen,
            &limit as *const libc::timespec,
        )
    };
    r == 0
}

/// Wakes up to `n` threads sleeping on `word` (`FUTEX_WAKE`).
#[cfg(target_os = "linux")]
fn wake(word: &AtomicU32, n: i32) {
    // SAFETY: FUTEX_WAKE only uses the address of the atomic as a key; no
    // memory is read or written through it.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            n,
        );
    }
}

/// Windows' form of [`wait`]: `WaitOnAddress`, which compares and sleeps
/// atomically as `FUTEX_WAIT` does. It returns `TRUE` when woken, when the
/// word differed already, and also "for other reasons" (Microsoft's
/// documentation; Wine's wakes every sleeper on addresses that share its
/// hash, such as the other level's word beside this one), `FALSE` on the
/// time limit. So a wake-up counts only if the word moved: looked at
/// before (a sleep that found it moved is not a wake-up) and after (a
/// return with the word unchanged is no ring's). Windows does not document the order in which
/// `WakeByAddressSingle` picks its sleepers; the sweep and the time limit
/// (module docs) do not depend on it.
#[cfg(windows)]
fn wait(word: &AtomicU32, seen: u32, limit: Duration) -> bool {
    use windows_sys::Win32::System::Threading::WaitOnAddress;
    if word.load(SeqCst) != seen {
        return false;
    }
    // Rounded up, so that a sub-millisecond limit is not a poll.
    let ms = limit
        .as_nanos()
        .div_ceil(1_000_000)
        .min(u128::from(u32::MAX - 1)) as u32;
    debug_assert!(
        ms > 0 || limit.is_zero(),
        "a limit is never rounded down to a poll"
    );
    // SAFETY: WaitOnAddress reads the aligned u32 the atomic owns (it lives
    // as long as the caller's borrow, which outlives the call) and `seen`
    // on this stack frame, both of the size given; it writes no memory.
    let ok = unsafe {
        WaitOnAddress(
            word.as_ptr().cast_const().cast(),
            (&seen as *const u32).cast(),
            std::mem::size_of::<u32>(),
            ms,
        )
    };
    ok != 0 && word.load(SeqCst) != seen
}

/// Windows' form of [`wake`]: `WakeByAddressSingle` `n` times, or
/// `WakeByAddressAll` for everyone.
#[cfg(windows)]
fn wake(word: &AtomicU32, n: i32) {
    use windows_sys::Win32::System::Threading::{WakeByAddressAll, WakeByAddressSingle};
    debug_assert!(n > 0, "a wake-up wakes someone");
    let addr = word.as_ptr().cast_const().cast();
    if n == i32::MAX {
        // SAFETY: only the address is used, as a key.
        unsafe { WakeByAddressAll(addr) };
        return;
    }
    for _ in 0..n {
        // SAFETY: as above.
        unsafe { WakeByAddressSingle(addr) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    use std::time::Instant;

    /// Long enough that a sleeper the tree or the sweep forgot shows as a
    /// test that takes this long.
    const FOREVER: Duration = Duration::from_secs(10);

    /// Starts `n` threads that each sleep on the bell until `done` is set,
    /// counting the wake-ups that reached them; returns once all sleep.
    fn sleepers(
        bell: &Arc<Bell>,
        done: &Arc<AtomicBool>,
        n: usize,
    ) -> Vec<std::thread::JoinHandle<u64>> {
        let hs: Vec<_> = (0..n)
            .map(|_| {
                let (bell, done) = (bell.clone(), done.clone());
                std::thread::spawn(move || {
                    let mut wakeups = 0;
                    loop {
                        let seen = bell.seen();
                        if done.load(SeqCst) {
                            return wakeups;
                        }
                        wakeups += bell.sleep(seen) as u64;
                    }
                })
            })
            .collect();
        while bell.sleepers.load(SeqCst) < n {
            std::thread::sleep(Duration::from_millis(1));
        }
        // Announced is not yet asleep in the kernel: give them time.
        std::thread::sleep(Duration::from_millis(20));
        hs
    }

    /// One ring reaches every sleeper: the flusher wakes `FANOUT`, and the
    /// woken pass it on (without the passing on, all but `FANOUT` of them
    /// would sleep until `FOREVER`).
    #[test]
    fn one_ring_wakes_every_sleeper_through_the_tree() {
        for n in [1, FANOUT as usize, FANOUT as usize + 1, 40] {
            let bell = Arc::new(Bell::with_max_sleep(FOREVER));
            let done = Arc::new(AtomicBool::new(false));
            let hs = sleepers(&bell, &done, n);
            let t = Instant::now();
            done.store(true, SeqCst);
            assert_eq!(bell.ring(), n as u64);
            let woken: u64 = hs.into_iter().map(|h| h.join().unwrap()).sum();
            let took = t.elapsed();
            assert!(
                took < FOREVER / 10,
                "{n} sleepers took {took:?}: the tree lost a branch"
            );
            assert_eq!(woken, n as u64, "each sleeper was woken by the ring's tree");
        }
    }

    /// A sleeper that nothing wakes checks again after the time limit.
    #[test]
    fn the_time_limit_wakes_a_sleeper_no_ring_reaches() {
        let bell = Bell::with_max_sleep(Duration::from_millis(20));
        let t = Instant::now();
        assert!(!bell.sleep(bell.seen()), "no wake-up reached it");
        assert!(t.elapsed() >= Duration::from_millis(20));
    }

    /// After a ring that woke its few sleepers itself, the sweep wakes
    /// nobody: a sleeper that slept again since (on the new value) is not
    /// woken in vain.
    #[test]
    fn the_sweep_leaves_alone_who_slept_after_a_direct_ring() {
        let bell = Arc::new(Bell::with_max_sleep(FOREVER));
        let done = Arc::new(AtomicBool::new(false));
        let hs = sleepers(&bell, &done, 1);
        assert_eq!(bell.ring(), 1);
        // Woken, it checks, and sleeps again on the new value.
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(bell.sleepers.load(SeqCst), 1);
        bell.sweep();
        std::thread::sleep(Duration::from_millis(20));
        done.store(true, SeqCst);
        bell.ring();
        let woken: u64 = hs.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(woken, 2, "one wake-up per ring, none from the sweep");
    }

    /// The sweep wakes every sleeper of a ring whose tree failed, and does
    /// nothing when no ring came since the last sweep.
    #[test]
    fn the_sweep_wakes_all_once_per_ring() {
        let bell = Arc::new(Bell::with_max_sleep(FOREVER));
        let done = Arc::new(AtomicBool::new(false));
        let hs = sleepers(&bell, &done, 3);
        bell.sweep();
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(
            bell.sleepers.load(SeqCst),
            3,
            "no ring: the sweep woke nobody"
        );
        done.store(true, SeqCst);
        // A bump whose wake-ups all went astray, then the sweep.
        bell.word.fetch_add(1, SeqCst);
        let t = Instant::now();
        bell.sweep();
        let woken: u64 = hs.into_iter().map(|h| h.join().unwrap()).sum();
        assert!(t.elapsed() < FOREVER / 10, "the sweep woke them");
        assert_eq!(woken, 3);
    }
}
