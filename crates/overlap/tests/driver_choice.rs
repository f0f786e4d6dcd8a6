//! Which driver runs and why. `OVERLAP_DRIVER` is process-global, and a
//! seccomp filter cannot be removed, so those cases run in child processes:
//! the parent test starts this test binary again with `--exact <child>` and
//! the environment set, and checks that the child ran and passed.

use crate::common::*;
#[cfg(target_os = "linux")]
use futures::future::join_all;
use overlapped::{
    DriverChoice, DriverKind, Engine, Error, FallbackReason, File, DEFAULT_POOL_THREADS,
};

per_driver!(an_explicit_builder_choice_is_obeyed);

fn an_explicit_builder_choice_is_obeyed(d: Driver) {
    let e = d.builder().pool_threads(5).build().unwrap();
    let info = e.driver();
    if d.is_iocp() {
        assert_eq!(info.kind, DriverKind::Iocp);
        assert_eq!(info.fallback, None);
        assert!(
            info.detail.contains('5'),
            "the pool's thread limit is recorded: {}",
            info.detail
        );
    } else if d.is_uring() {
        assert_eq!(info.kind, DriverKind::Uring);
        assert_eq!(info.fallback, None);
        assert!(
            !info.detail.is_empty(),
            "the accepted setup flags are recorded"
        );
    } else {
        let want = if d.is_aio() {
            DriverKind::Aio
        } else {
            DriverKind::Pool
        };
        assert_eq!(info.kind, want);
        match &info.fallback {
            Some(r @ FallbackReason::Forced(by)) => {
                assert!(by.contains("builder"), "{by}");
                assert!(r.to_string().contains("forced"), "{r}");
            }
            other => panic!("expected Forced, got {other:?}"),
        }
        assert!(
            info.detail.contains('5'),
            "the thread limit is recorded: {}",
            info.detail
        );
        let d = Engine::builder()
            .driver(DriverChoice::Pool)
            .build()
            .unwrap();
        assert!(d
            .driver()
            .detail
            .contains(&DEFAULT_POOL_THREADS.to_string()));
    }
    assert_eq!(format!("{}", info.kind), info.kind.as_str());
}

// ------------------------------------------------------------ OVERLAP_DRIVER

#[test]
fn overlap_driver_aio() {
    run_child("child_env", &[("OVERLAP_DRIVER", "aio")], &[]);
}

#[test]
fn overlap_driver_pool() {
    run_child("child_env", &[("OVERLAP_DRIVER", "pool")], &[]);
}

#[test]
fn overlap_driver_uring() {
    run_child("child_env", &[("OVERLAP_DRIVER", "uring")], &[]);
}

#[test]
fn overlap_driver_bogus() {
    run_child("child_env", &[("OVERLAP_DRIVER", "bogus")], &[]);
}

#[cfg(windows)]
#[test]
fn overlap_driver_iocp() {
    run_child("child_env", &[("OVERLAP_DRIVER", "iocp")], &[]);
}

#[test]
fn overlap_driver_auto_and_unset() {
    run_child("child_env", &[("OVERLAP_DRIVER", "auto")], &[]);
    run_child("child_env", &[], &["OVERLAP_DRIVER"]);
}

#[test]
#[ignore = "run in a child process by the overlap_driver_* tests"]
fn child_env() {
    if !is_child("child_env") {
        return;
    }
    let var = std::env::var("OVERLAP_DRIVER").ok();
    eprintln!("child: OVERLAP_DRIVER={var:?}");
    // An explicit builder choice overrides the variable whatever it says.
    let uring = Engine::builder().driver(DriverChoice::Uring).build();
    let uring_reason = match &uring {
        Ok(e) => {
            assert_eq!(e.driver().kind, DriverKind::Uring);
            None
        }
        Err(Error::UringUnavailable { reason }) => {
            eprintln!("SKIPPED: io_uring unavailable: {reason} (uring expectations checked as unavailable)");
            Some(reason.clone())
        }
        Err(e) => panic!("explicit uring: {e}"),
    };
    let pool = Engine::builder()
        .driver(DriverChoice::Pool)
        .build()
        .unwrap();
    assert_eq!(pool.driver().kind, DriverKind::Pool);
    assert!(
        matches!(&pool.driver().fallback, Some(FallbackReason::Forced(by)) if by.contains("builder"))
    );

    let auto = Engine::new();
    match var.as_deref() {
        Some("pool") => {
            let e = auto.unwrap();
            assert_eq!(e.driver().kind, DriverKind::Pool);
            match &e.driver().fallback {
                Some(r @ FallbackReason::Forced(by)) => {
                    assert!(by.contains("OVERLAP_DRIVER=pool"), "{by}");
                    assert!(r.to_string().contains("OVERLAP_DRIVER=pool"), "{r}");
                    assert!(r.hint().contains("OVERLAP_DRIVER"), "{}", r.hint());
                }
                other => panic!("expected Forced by OVERLAP_DRIVER, got {other:?}"),
            }
            roundtrip(&e);
        }
        Some("uring") => match (auto, &uring_reason) {
            (Ok(e), None) => {
                assert_eq!(e.driver().kind, DriverKind::Uring);
                assert_eq!(e.driver().fallback, None);
                roundtrip(&e);
            }
            (Err(Error::UringUnavailable { reason }), Some(r)) => assert_eq!(&reason, r),
            (other, r) => panic!("OVERLAP_DRIVER=uring with io_uring {r:?}: {other:?}"),
        },
        Some("bogus") => {
            match auto {
                Err(e @ Error::InvalidInput(_)) => {
                    let msg = e.to_string();
                    assert!(msg.contains("bogus"), "{msg}");
                    assert!(
                        msg.contains("uring, aio, iocp, pool or auto"),
                        "the message says what is valid: {msg}"
                    );
                }
                other => panic!("OVERLAP_DRIVER=bogus: expected InvalidInput, got {other:?}"),
            }
            // ignore_env() disregards it.
            let e = Engine::builder().ignore_env().build().unwrap();
            assert_eq!(e.driver().kind == DriverKind::Uring, uring_reason.is_none());
        }
        #[cfg(windows)]
        None | Some("auto") | Some("") | Some("iocp") => {
            let e = auto.unwrap();
            assert_eq!(
                e.driver().kind,
                DriverKind::Iocp,
                "auto prefers completion ports"
            );
            assert_eq!(e.driver().fallback, None);
            roundtrip(&e);
        }
        #[cfg(target_os = "linux")]
        None | Some("auto") | Some("") => {
            let e = auto.unwrap();
            match &uring_reason {
                None => {
                    assert_eq!(e.driver().kind, DriverKind::Uring, "auto prefers io_uring");
                    assert_eq!(e.driver().fallback, None);
                }
                Some(r) => {
                    // Linux AIO beside the pool, else the pool alone.
                    let want = if aio_unavailable().is_none() {
                        DriverKind::Aio
                    } else {
                        DriverKind::Pool
                    };
                    assert_eq!(e.driver().kind, want);
                    assert_eq!(
                        e.driver().fallback.as_ref(),
                        Some(r),
                        "the reason is recorded"
                    );
                }
            }
            roundtrip(&e);
        }
        Some("aio") => match (auto, aio_unavailable()) {
            (Ok(e), None) => {
                assert_eq!(e.driver().kind, DriverKind::Aio);
                match &e.driver().fallback {
                    Some(FallbackReason::Forced(by)) => assert!(by.contains("OVERLAP_DRIVER=aio")),
                    other => panic!("expected Forced by OVERLAP_DRIVER, got {other:?}"),
                }
                roundtrip(&e);
            }
            (Err(Error::AioUnavailable { .. }), Some(_)) => {}
            (other, r) => panic!("OVERLAP_DRIVER=aio with AIO {r:?}: {other:?}"),
        },
        Some(other) => panic!("unexpected OVERLAP_DRIVER={other}"),
    }
    child_ok("child_env");
}

fn roundtrip(engine: &Engine) {
    let dir = tempdir();
    let path = dir.path().join("roundtrip");
    let f = File::create(engine, &path).wait().unwrap();
    let (res, _) = f.write_all_at(pattern(100, 0, 100_000), 0).wait();
    res.unwrap();
    let (res, buf) = f.read_exact_at(vec![0u8; 100_000], 0).wait();
    res.unwrap();
    assert_pattern(&buf, 100, 0);
}

// ------------------------------------------------------------ seccomp

#[cfg(target_os = "linux")]
#[test]
fn seccomp_eperm_falls_back_to_the_pool_with_the_reason() {
    run_child(
        "child_seccomp",
        &[("OVERLAP_TEST_SECCOMP_ERRNO", "EPERM")],
        &["OVERLAP_DRIVER"],
    );
}

#[cfg(target_os = "linux")]
#[test]
fn seccomp_eperm_with_forced_uring_is_an_error_with_the_fix() {
    run_child(
        "child_seccomp",
        &[
            ("OVERLAP_TEST_SECCOMP_ERRNO", "EPERM"),
            ("OVERLAP_DRIVER", "uring"),
        ],
        &[],
    );
}

#[cfg(target_os = "linux")]
#[test]
fn seccomp_eperm_and_io_setup_eagain_fall_back_to_the_plain_pool() {
    run_child(
        "child_seccomp",
        &[
            ("OVERLAP_TEST_SECCOMP_ERRNO", "EPERM"),
            ("OVERLAP_TEST_AIO_ERRNO", "EAGAIN"),
        ],
        &["OVERLAP_DRIVER"],
    );
}

#[cfg(target_os = "linux")]
#[test]
fn seccomp_enosys_and_enomem_are_told_apart() {
    run_child(
        "child_seccomp",
        &[("OVERLAP_TEST_SECCOMP_ERRNO", "ENOSYS")],
        &["OVERLAP_DRIVER"],
    );
    run_child(
        "child_seccomp",
        &[("OVERLAP_TEST_SECCOMP_ERRNO", "ENOMEM")],
        &["OVERLAP_DRIVER"],
    );
}

#[cfg(target_os = "linux")]
#[test]
#[ignore = "run in a child process by the seccomp_* tests"]
fn child_seccomp() {
    if !is_child("child_seccomp") {
        return;
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        eprintln!("SKIPPED: the seccomp filter test is written for x86_64 only");
        child_ok("child_seccomp");
    }
    #[cfg(target_arch = "x86_64")]
    seccomp_child_x86_64();
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn seccomp_child_x86_64() {
    let name = std::env::var("OVERLAP_TEST_SECCOMP_ERRNO").unwrap();
    let (errno, expected) = match name.as_str() {
        "EPERM" => (libc::EPERM, FallbackReason::PermissionDenied),
        "ENOSYS" => (libc::ENOSYS, FallbackReason::NotSupported),
        "ENOMEM" => (libc::ENOMEM, FallbackReason::MemoryLimit),
        other => panic!("unknown errno {other}"),
    };
    // OVERLAP_TEST_AIO_ERRNO=EAGAIN makes io_setup fail too, as it does
    // when fs.aio-max-nr is exhausted.
    let aio_blocked = std::env::var("OVERLAP_TEST_AIO_ERRNO").is_ok_and(|v| v == "EAGAIN");
    let mut calls = vec![(seccomp::NR_IO_URING_SETUP, errno)];
    if aio_blocked {
        calls.push((seccomp::NR_IO_SETUP, libc::EAGAIN));
    }
    if let Err(e) = seccomp::deny(&calls) {
        eprintln!("SKIPPED: cannot install a seccomp filter here: {e}");
        child_ok("child_seccomp");
        return;
    }
    // The filter really blocks io_uring_setup (from this thread and the
    // threads it starts, where the engine creates its ring).
    let got = std::thread::spawn(seccomp::raw_io_uring_setup)
        .join()
        .unwrap();
    assert_eq!(got, Some(errno), "io_uring_setup is blocked with {name}");

    let hint = expected.hint();
    match std::env::var("OVERLAP_DRIVER").as_deref() {
        Ok("uring") => match Engine::new() {
            Err(e @ Error::UringUnavailable { .. }) => {
                let msg = e.to_string();
                assert!(
                    matches!(&e, Error::UringUnavailable { reason } if *reason == expected),
                    "{e:?}"
                );
                assert!(msg.contains(hint), "the message tells the fix: {msg}");
                assert_eq!(e.kind(), std::io::ErrorKind::Unsupported);
                eprintln!("child: {msg}");
            }
            other => panic!("OVERLAP_DRIVER=uring under seccomp: {other:?}"),
        },
        Err(_) => {
            let e = Engine::new().expect("falls back");
            if aio_blocked {
                assert_eq!(e.driver().kind, DriverKind::Pool);
                let why = e.driver().aio_unavailable.as_deref().unwrap_or_default();
                assert!(
                    why.contains("io_setup") && why.contains("aio-max-nr"),
                    "the AIO failure is recorded: {why}"
                );
                let line = e.driver().to_string();
                assert!(
                    line.starts_with("pool (io_uring: ") && line.contains("AIO: io_setup"),
                    "{line}"
                );
                match Engine::builder().driver(DriverChoice::Aio).build() {
                    Err(err @ Error::AioUnavailable { .. }) => {
                        assert!(err.to_string().contains("aio-max-nr"), "{err}");
                        assert_eq!(err.kind(), std::io::ErrorKind::Unsupported);
                    }
                    other => panic!("forced aio with io_setup failing: {other:?}"),
                }
            } else if aio_unavailable().is_none() {
                assert_eq!(e.driver().kind, DriverKind::Aio);
                let line = e.driver().to_string();
                assert!(
                    line.starts_with("aio+pool (io_uring: io_uring_setup failed"),
                    "{line}"
                );
            } else {
                assert_eq!(e.driver().kind, DriverKind::Pool);
            }
            assert_eq!(
                e.driver().fallback.as_ref(),
                Some(&expected),
                "the reason is recorded"
            );
            eprintln!(
                "child: fallback reason: {}",
                e.driver().fallback.as_ref().unwrap()
            );
            roundtrip(&e);
            match Engine::builder().driver(DriverChoice::Uring).build() {
                Err(err @ Error::UringUnavailable { .. }) => {
                    let msg = err.to_string();
                    assert!(msg.contains(hint), "the message tells the fix: {msg}");
                    assert!(msg.contains("to fix"), "{msg}");
                    if errno == libc::EPERM {
                        assert!(msg.contains("seccomp"), "{msg}");
                    }
                    eprintln!("child: {msg}");
                }
                other => panic!("forced uring under seccomp: {other:?}"),
            }
        }
        Ok(other) => panic!("unexpected OVERLAP_DRIVER={other}"),
    }
    child_ok("child_seccomp");
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod seccomp {
    use libc::{sock_filter, sock_fprog};

    const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
    pub const NR_IO_URING_SETUP: u32 = 425;
    /// `io_setup` on x86_64.
    pub const NR_IO_SETUP: u32 = 206;
    // Offsets in struct seccomp_data.
    const OFF_NR: u32 = 0;
    const OFF_ARCH: u32 = 4;

    fn stmt(code: u32, k: u32) -> sock_filter {
        sock_filter {
            code: code as u16,
            jt: 0,
            jf: 0,
            k,
        }
    }
    fn jump(code: u32, k: u32, jt: u8, jf: u8) -> sock_filter {
        sock_filter {
            code: code as u16,
            jt,
            jf,
            k,
        }
    }

    /// Makes each system call `nr` fail with its `errno` in this thread and
    /// the threads it starts from now on.
    pub fn deny(calls: &[(u32, i32)]) -> std::io::Result<()> {
        let mut filter = vec![
            stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, OFF_ARCH),
            jump(
                libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K,
                AUDIT_ARCH_X86_64,
                1,
                0,
            ),
            // Another ABI: not ours to judge.
            stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW),
            stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, OFF_NR),
        ];
        for &(nr, errno) in calls {
            filter.push(jump(libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K, nr, 0, 1));
            filter.push(stmt(
                libc::BPF_RET | libc::BPF_K,
                libc::SECCOMP_RET_ERRNO | (errno as u32 & libc::SECCOMP_RET_DATA),
            ));
        }
        filter.push(stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW));
        let prog = sock_fprog {
            len: filter.len() as u16,
            filter: filter.as_ptr() as *mut sock_filter,
        };
        // SAFETY: PR_SET_NO_NEW_PRIVS takes integer arguments only.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `prog` points to `filter`, both alive for the call; the
        // kernel copies the program.
        let r = unsafe {
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER as libc::c_ulong,
                &prog as *const sock_fprog as libc::c_ulong,
                0,
                0,
            )
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Calls io_uring_setup directly; returns the errno if it failed.
    pub fn raw_io_uring_setup() -> Option<i32> {
        let mut params = [0u8; 120]; // struct io_uring_params
                                     // SAFETY: params is a writable, zeroed io_uring_params-sized buffer.
        let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, 1u32, params.as_mut_ptr()) };
        if fd >= 0 {
            // SAFETY: we own the descriptor the kernel just returned.
            unsafe { libc::close(fd as i32) };
            None
        } else {
            std::io::Error::last_os_error().raw_os_error()
        }
    }
}

// ------------------------------------------------------------ pool threads

#[cfg(target_os = "linux")]
#[test]
fn the_pool_driver_never_exceeds_its_thread_limit() {
    run_child("child_pool_threads", &[], &["OVERLAP_DRIVER"]);
}

#[cfg(target_os = "linux")]
fn pool_threads_alive() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm"))
                .is_ok_and(|c| c.starts_with("overlap-pool"))
        })
        .count()
}

#[cfg(target_os = "linux")]
#[test]
#[ignore = "run in a child process by the_pool_driver_never_exceeds_its_thread_limit"]
fn child_pool_threads() {
    if !is_child("child_pool_threads") {
        return;
    }
    assert_eq!(pool_threads_alive(), 0);
    let limit = 3;
    let engine = Engine::builder()
        .driver(DriverChoice::Pool)
        .pool_threads(limit)
        .cache_fast_path(false)
        .build()
        .unwrap();
    assert_eq!(pool_threads_alive(), 0, "threads start on demand");
    let dir = tempdir();
    let file = File::create(&engine, dir.path().join("threads"))
        .wait()
        .unwrap();
    let mut peak = 0;
    for round in 0..4u64 {
        let writes = (0..256u64).map(|i| {
            let off = (round * 256 + i) * 4096;
            file.write_at(pattern(101, off, 4096), off)
        });
        let fut = join_all(writes);
        let mut fut = Box::pin(fut);
        // Poll by hand so that the thread count can be sampled mid-flight.
        let results = loop {
            if let std::task::Poll::Ready(r) = poll_once(&mut fut) {
                break r;
            }
            peak = peak.max(pool_threads_alive());
            std::thread::yield_now();
        };
        for (res, _) in results {
            assert_eq!(res.unwrap(), 4096);
        }
        peak = peak.max(pool_threads_alive());
    }
    eprintln!("child: at most {peak} pool threads alive (limit {limit})");
    assert!(peak >= 1 && peak <= limit, "peak {peak}, limit {limit}");
    let (res, buf) = file.read_exact_at(vec![0u8; 1024 * 4096], 0).wait();
    res.unwrap();
    assert_pattern(&buf, 101, 0);
    drop(file);
    engine.shutdown();
    // Joined threads leave /proc a moment after join returns.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while pool_threads_alive() > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(pool_threads_alive(), 0, "shutdown stops the pool threads");
    child_ok("child_pool_threads");
}

/// The kernel's io_uring worker pool is bounded like everything else: a
/// limit set by the builder is in force, reported, and respected when the
/// kernel must hand writes that extend a direct file to its workers.
#[cfg(target_os = "linux")]
#[test]
fn max_kernel_workers_bounds_and_reports_iou_wrk_threads() {
    // In a child process: iou-wrk threads are counted process-wide, and the
    // other tests of this binary run engines of their own in parallel.
    run_child("child_max_kernel_workers", &[], &["OVERLAP_DRIVER"]);
}

#[cfg(target_os = "linux")]
#[test]
#[ignore = "run in a child process by max_kernel_workers_bounds_and_reports_iou_wrk_threads"]
fn child_max_kernel_workers() {
    if !is_child("child_max_kernel_workers") {
        return;
    }
    let Ok(engine) = overlapped::Engine::builder()
        .driver(overlapped::DriverChoice::Uring)
        .max_kernel_workers(2)
        .build()
    else {
        eprintln!("SKIPPED: io_uring unavailable");
        child_ok("child_max_kernel_workers");
        return;
    };
    let detail = &engine.driver().detail;
    assert!(
        detail.contains("at most 2 for file I/O"),
        "limit reported: {detail}"
    );
    assert!(overlapped::Engine::builder()
        .max_kernel_workers(0)
        .build()
        .is_err());
    // Growing O_DIRECT writes on ext4 go to kernel workers; never more than 2.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let file = overlapped::OpenOptions::new()
        .write(true)
        .create(true)
        .direct(true)
        .open(&engine, dir.path().join("grow"))
        .wait()
        .unwrap();
    let pool = overlapped::AlignedBufPool::for_file(&file, 64 << 10, 64).unwrap();
    let ops: Vec<_> = (0..256u64)
        .map(|i| file.write_at(pool.get(), i * (64 << 10)))
        .collect();
    let mut alive_max = 0;
    let results = futures::executor::block_on(async {
        let all = futures::future::join_all(ops);
        futures::pin_mut!(all);
        loop {
            alive_max = alive_max.max(overlapped::KernelWorkers::snapshot().alive());
            match futures::poll!(all.as_mut()) {
                std::task::Poll::Ready(r) => break r,
                std::task::Poll::Pending => {
                    std::thread::sleep(std::time::Duration::from_micros(200))
                }
            }
        }
    });
    for (res, _) in results {
        assert_eq!(res.unwrap(), 64 << 10);
    }
    eprintln!("iou-wrk threads alive at most: {alive_max}");
    // One extra for the openat of this test (unbounded class, also capped at 2).
    assert!(
        alive_max <= 4,
        "at most 2 + 2 kernel workers, saw {alive_max}"
    );
    child_ok("child_max_kernel_workers");
}

/// (submission, completion) entries of every io_uring the process holds
/// open, as the kernel reports them (`SqMask`/`CqMask` in
/// `/proc/self/fdinfo`).
#[cfg(target_os = "linux")]
fn open_ring_sizes() -> Vec<(u32, u32)> {
    let mask = |info: &str, key: &str| -> Option<u32> {
        let line = info.lines().find(|l| l.starts_with(key))?;
        let hex = line[key.len()..].trim().trim_start_matches("0x");
        u32::from_str_radix(hex, 16).ok().map(|m| m + 1)
    };
    let mut sizes = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        let is_ring = std::fs::read_link(entry.path())
            .is_ok_and(|l| l.to_string_lossy() == "anon_inode:[io_uring]");
        let info = std::fs::read_to_string(format!(
            "/proc/self/fdinfo/{}",
            entry.file_name().to_string_lossy()
        ));
        if let (true, Ok(info)) = (is_ring, info) {
            if let (Some(sq), Some(cq)) = (mask(&info, "SqMask:"), mask(&info, "CqMask:")) {
                sizes.push((sq, cq));
            }
        }
    }
    sizes
}

#[cfg(target_os = "linux")]
fn count_of(size: (u32, u32)) -> usize {
    open_ring_sizes().iter().filter(|s| **s == size).count()
}

/// Every kind of ring takes its size from the engine's builder: the
/// engine thread's and a port's (`ring_entries`, the completion queue
/// `max_inflight_ops`), a thread's own (`thread_ring_entries`, 16 times as
/// many completions) and a reactor ring (`reactor_ring_entries`), as the
/// kernel reports the rings it made. Sizes no other test asks for.
#[cfg(target_os = "linux")]
#[test]
fn ring_sizes_travel_from_the_builder_to_every_ring() {
    if let Some(why) = uring_unavailable() {
        eprintln!("SKIPPED: ring sizes: io_uring unavailable here: {why}");
        return;
    }
    let engine_ring = (8, 64);
    let before = count_of(engine_ring);
    let engine = Engine::builder()
        .driver(DriverChoice::Uring)
        .ignore_env()
        .ring_entries(8)
        .max_inflight_ops(64)
        .thread_ring_entries(32)
        .reactor_ring_entries(16)
        // Every read and open below through a ring, none answered from
        // the caches on the calling thread.
        .cache_fast_path(false)
        .build()
        .unwrap();
    assert!(
        count_of(engine_ring) > before,
        "the engine thread's ring: {:?}",
        open_ring_sizes()
    );

    let port = overlapped::Port::<Vec<u8>>::new(&engine);
    assert!(
        count_of(engine_ring) > before + 1,
        "a port's ring: {:?}",
        open_ring_sizes()
    );
    drop(port);

    let reactor = engine.reactor_ring().unwrap();
    assert!(
        count_of((16, 256)) >= 1,
        "a reactor ring: {:?}",
        open_ring_sizes()
    );
    drop(reactor);

    // A thread's own ring is made by the thread's first wait, and closed
    // at its exit: look while the thread waits to be let go.
    let dir = tempdir();
    let path = dir.path().join("f");
    std::fs::write(&path, b"ring").unwrap();
    let file = File::open(&engine, &path).wait().unwrap();
    let (made, look) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
    let t = std::thread::spawn(move || {
        let (read, _buf) = file.read_at(vec![0u8; 4], 0).wait();
        made.0.send(read.unwrap()).unwrap();
        look.1.recv().unwrap();
    });
    assert_eq!(made.1.recv().unwrap(), 4);
    assert!(
        count_of((32, 512)) >= 1,
        "a thread's own ring: {:?}",
        open_ring_sizes()
    );
    look.0.send(()).unwrap();
    t.join().unwrap();
}
