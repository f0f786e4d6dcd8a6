//! The shared-ring design on Linux (see `main.rs`).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "an example: a failure ends it, with its message"
)]

use std::collections::VecDeque;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use io_uring::{opcode, types, IoUring};
use overlapped::AlignedBuf;

fn cpu_s() -> f64 {
    // SAFETY: getrusage writes into the local struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a local rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

struct Shared {
    ring: IoUring,
    sq_lock: Mutex<()>,
    cq_lock: Mutex<()>,
    done: Mutex<VecDeque<(u64, i32)>>,
    cv: Condvar,
}

pub fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .ok_or("usage: design_b FILE [depth] [reads] [coop]")?;
    let depth: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(32);
    let reads: u64 = args
        .next()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(200_000);
    let coop = args.next().as_deref() == Some("coop");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path)?;
    let blocks = file.metadata()?.len() / 4096;
    let mut b = IoUring::builder();
    if coop {
        b.setup_coop_taskrun();
    }
    let shared = Arc::new(Shared {
        ring: b.build(256)?,
        sq_lock: Mutex::new(()),
        cq_lock: Mutex::new(()),
        done: Mutex::new(VecDeque::new()),
        cv: Condvar::new(),
    });
    let mut bufs: Vec<AlignedBuf> = (0..depth)
        .map(|_| AlignedBuf::new(4096, 4096))
        .collect::<Result<_, _>>()?;
    let reaper = {
        let s = shared.clone();
        std::thread::spawn(move || loop {
            let _ = s.ring.submitter().submit_and_wait(1);
            let _g = s.cq_lock.lock().unwrap();
            // SAFETY: only this thread reads the completion queue (cq_lock).
            let cq = unsafe { s.ring.completion_shared() };
            let mut got = Vec::new();
            for cqe in cq {
                got.push((cqe.user_data(), cqe.result()));
            }
            if got.iter().any(|&(k, _)| k == u64::MAX) {
                return;
            }
            if !got.is_empty() {
                s.done.lock().unwrap().extend(got);
                s.cv.notify_one();
            }
        })
    };
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next_off = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % blocks) * 4096
    };
    let fd = file.as_raw_fd();
    let submit = |slot: usize, buf: &mut AlignedBuf, off: u64| {
        let sqe = opcode::Read::new(types::Fd(fd), buf.as_mut_ptr(), 4096)
            .offset(off)
            .build()
            .user_data(slot as u64);
        let _g = shared.sq_lock.lock().unwrap();
        // SAFETY: the buffer outlives the read: slots are reused only after
        // their completion, and all reads complete before `bufs` is dropped.
        unsafe { shared.ring.submission_shared().push(&sqe).unwrap() };
        shared.ring.submit().unwrap();
    };
    let (t0, c0) = (Instant::now(), cpu_s());
    let mut submitted = 0u64;
    for (slot, buf) in bufs.iter_mut().enumerate() {
        submit(slot, buf, next_off());
        submitted += 1;
    }
    let mut completed = 0u64;
    while completed < submitted {
        let batch: Vec<(u64, i32)> = {
            let mut d = shared.done.lock().unwrap();
            while d.is_empty() {
                d = shared.cv.wait(d).unwrap();
            }
            d.drain(..).collect()
        };
        for (slot, res) in batch {
            assert_eq!(res, 4096, "read failed: {res}");
            completed += 1;
            if submitted < reads {
                submit(slot as usize, &mut bufs[slot as usize], next_off());
                submitted += 1;
            }
        }
    }
    let (secs, cpu) = (t0.elapsed().as_secs_f64(), cpu_s() - c0);
    {
        let _g = shared.sq_lock.lock().unwrap();
        let nop = opcode::Nop::new().build().user_data(u64::MAX);
        // SAFETY: a NOP references no memory.
        unsafe { shared.ring.submission_shared().push(&nop).unwrap() };
        shared.ring.submit().unwrap();
    }
    reaper.join().map_err(|_| "reaper panicked")?;
    println!(
        "design B (callers submit, reaper thread{}) depth {depth}: {:.0} IOPS, cpu_us_per_op {:.2}",
        if coop { ", COOP_TASKRUN" } else { "" },
        completed as f64 / secs,
        cpu * 1e6 / completed as f64
    );
    Ok(())
}
