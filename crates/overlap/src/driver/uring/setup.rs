//! Setting up an io_uring: the setup flags this kernel accepts, the opcode
//! probe, the bound on the kernel's io-wq workers, and the fallback reason
//! when io_uring cannot be used. Every ring of the engine is made here (the
//! engine thread's, each thread's own, each reactor's and each port's).

use io_uring::{opcode, IoUring};

use super::ring::Ring;
use crate::cell::RingSize;
use crate::error::FallbackReason;
use crate::operation::Opcodes;

/// A ring of `size` for `issuers`, with the opcodes its kernel supports,
/// and the setup flags it got.
pub(crate) fn make_ring(
    size: RingSize,
    issuers: Issuers,
) -> Result<(Ring, &'static str), FallbackReason> {
    debug_assert!(
        size.is_valid(),
        "ring sizes are checked by EngineBuilder::build"
    );
    let (io, flags) = build_ring(size.sq, size.cq, issuers)?;
    let ops = probe_opcodes(&io)?;
    Ok((Ring::new(io, ops), flags))
}

/// The kernel's answer to `io_uring_setup`, mapped to a fallback reason.
pub(crate) fn reason_for(err: &std::io::Error) -> FallbackReason {
    match err.raw_os_error() {
        Some(libc::ENOSYS) => FallbackReason::NotSupported,
        Some(libc::EPERM) => match std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
            .ok()
            .and_then(|s| s.trim().parse::<u8>().ok())
        {
            Some(v) if v > 0 => FallbackReason::DisabledBySysctl(v),
            _ => FallbackReason::PermissionDenied,
        },
        Some(libc::ENOMEM) => FallbackReason::MemoryLimit,
        _ => FallbackReason::Other(err.to_string()),
    }
}

/// Who enters a ring, which decides its setup flags.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Issuers {
    /// Only the thread that creates the ring submits and waits on it:
    /// `SINGLE_ISSUER|DEFER_TASKRUN` where the kernel has them.
    One,
    /// Any thread submits and any thread waits (a completion port):
    /// `COOP_TASKRUN` at most.
    Many,
}

/// Builds a ring with the best setup flags this kernel accepts.
pub(crate) fn build_ring(
    entries: u32,
    cq_entries: u32,
    issuers: Issuers,
) -> Result<(IoUring, &'static str), FallbackReason> {
    debug_assert!(
        entries > 0 && cq_entries >= entries,
        "a ring has entries, and room for a completion of each"
    );
    type Setup = (&'static str, fn(&mut io_uring::Builder));
    let attempts: [Setup; 3] = [
        ("SINGLE_ISSUER|DEFER_TASKRUN", |b| {
            b.setup_single_issuer().setup_defer_taskrun();
        }),
        ("COOP_TASKRUN", |b| {
            b.setup_coop_taskrun();
        }),
        ("none", |_| {}),
    ];
    // OVERLAP_URING_SETUP=coop|none skips the first attempts (for measuring
    // what each setup flag is worth on a given kernel).
    let mut skip = match std::env::var("OVERLAP_URING_SETUP").as_deref() {
        Ok("coop") => 1,
        Ok("none") => 2,
        _ => 0,
    };
    if issuers == Issuers::Many {
        skip = skip.max(1);
    }
    let mut last = None;
    for (name, apply) in attempts.into_iter().skip(skip) {
        let mut b = IoUring::builder();
        b.setup_cqsize(cq_entries).setup_clamp();
        apply(&mut b);
        match b.build(entries) {
            // Timed waits (the ring watcher's, a port's `next_timeout`) pass
            // their timeout through `io_uring_enter`'s extended argument;
            // without it they would fail at every wait.
            Ok(ring) if !ring.params().is_feature_ext_arg() => {
                return Err(FallbackReason::MissingOpcode(
                    "IORING_FEAT_EXT_ARG (timed waits, Linux 5.11)",
                ))
            }
            Ok(ring) => return Ok((ring, name)),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => last = Some(e),
            Err(e) => return Err(reason_for(&e)),
        }
    }
    match last {
        Some(e) => Err(reason_for(&e)),
        None => Err(FallbackReason::Other("no io_uring setup attempted".into())),
    }
}

/// The opcodes of this kernel, and an error naming one the engine cannot do
/// without. (An opcode that is merely missing, like `IORING_OP_FTRUNCATE`
/// before Linux 6.9, makes that operation fall back to its blocking call.)
pub(crate) fn probe_opcodes(ring: &IoUring) -> Result<Opcodes, FallbackReason> {
    let mut probe = io_uring::Probe::new();
    if ring.submitter().register_probe(&mut probe).is_err() {
        return Err(FallbackReason::MissingOpcode(
            "IORING_REGISTER_PROBE (Linux 5.6)",
        ));
    }
    let needed: [(u8, &'static str); 3] = [
        (opcode::Read::CODE, "IORING_OP_READ"),
        (opcode::Write::CODE, "IORING_OP_WRITE"),
        (opcode::Nop::CODE, "IORING_OP_NOP"),
    ];
    for (code, name) in needed {
        if !probe.is_supported(code) {
            return Err(FallbackReason::MissingOpcode(name));
        }
    }
    let ops = Opcodes::from_probe(&probe);
    debug_assert!(
        needed.iter().all(|&(code, _)| ops.has(code)),
        "the opcodes kept are the opcodes probed"
    );
    Ok(ops)
}

/// Bounds the kernel's io-wq worker threads of the calling thread
/// (`IORING_REGISTER_IOWQ_MAX_WORKERS`, Linux 5.15: io-wq belongs to the
/// task, so this applies to every ring that thread submits on) and
/// describes the limits in force.
pub(crate) fn bound_kernel_workers(
    ring: &IoUring,
    max: Option<u32>,
) -> Result<String, FallbackReason> {
    debug_assert!(
        max.is_none_or(|n| (1..=4096).contains(&n)),
        "the bound on kernel workers is checked by EngineBuilder::build"
    );
    let submitter = ring.submitter();
    if let Some(n) = max {
        let mut limits = [n, n];
        if let Err(e) = submitter.register_iowq_max_workers(&mut limits) {
            return Err(FallbackReason::Other(format!(
                "could not bound the kernel's io_uring workers to {n}: {e}"
            )));
        }
    }
    // Zeros read the limits without changing them.
    let mut limits = [0u32, 0u32];
    match submitter.register_iowq_max_workers(&mut limits) {
        Ok(()) => {
            let origin = |n: u32, default: Option<(u64, &str)>| {
                if max == Some(n) {
                    "; EngineBuilder::max_kernel_workers".to_string()
                } else {
                    match default {
                        Some((d, what)) if d == u64::from(n) => format!("; {what}"),
                        _ => String::new(),
                    }
                }
            };
            Ok(format!(
                "kernel workers (io-wq) per submitting thread: at most {} for file I/O \
                 (bounded class{}), at most {} for work that may wait indefinitely \
                 (unbounded class{})",
                limits[0],
                origin(limits[0], bounded_default(ring)),
                limits[1],
                origin(limits[1], unbounded_default()),
            ))
        }
        Err(_) => Ok("kernel worker limits unknown (Linux < 5.15)".to_string()),
    }
}

/// The kernel's default limit of the bounded io-wq class:
/// min(SQ entries, 4 × online CPUs) (`io_init_wq_offload`, io_uring/tctx.c).
fn bounded_default(ring: &IoUring) -> Option<(u64, &'static str)> {
    // SAFETY: sysconf has no memory arguments.
    let cpus = u64::try_from(unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }).ok()?;
    let entries = u64::from(ring.params().sq_entries());
    debug_assert!(
        entries.is_power_of_two(),
        "the kernel rounds a ring's entries up to a power of two"
    );
    Some((
        entries.min(4 * cpus),
        "the kernel's default: min(ring entries, 4 × CPUs)",
    ))
}

/// The kernel's default limit of the unbounded io-wq class: the task's
/// RLIMIT_NPROC soft limit (`io_wq_create`, io_uring/io-wq.c; an unlimited
/// one reads back as 2^32 - 1).
fn unbounded_default() -> Option<(u64, &'static str)> {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the valid out-pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NPROC, &mut rl) } != 0 {
        return None;
    }
    let n = if rl.rlim_cur == libc::RLIM_INFINITY {
        u64::from(u32::MAX)
    } else {
        rl.rlim_cur
    };
    Some((n, "RLIMIT_NPROC, the kernel's default"))
}
