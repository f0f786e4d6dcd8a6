//! `no-uring COMMAND [ARGS...]`: runs COMMAND with `io_uring_setup`,
//! `io_uring_enter` and `io_uring_register` failing with EPERM, as
//! Docker's and containerd's default seccomp profiles make them fail; every
//! other system call is allowed. The filter is inherited by every child and
//! thread, and cannot be lifted.
//!
//! `./scripts/test` runs the whole test suite under it, so that what users
//! in containers get (the engine's fallback) is tested on every run.

use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;

/// The io_uring system call numbers: the same on every architecture (they
/// were added after the tables were unified, in Linux 5.1).
const IO_URING_SETUP: u32 = 425;
const IO_URING_ENTER: u32 = 426;
const IO_URING_REGISTER: u32 = 427;

/// `AUDIT_ARCH_*` of the architecture this is built for: the filter
/// checks it, so that a system call of another ABI (x86's 32-bit one)
/// cannot get around the numbers above.
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E; // AUDIT_ARCH_X86_64
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7; // AUDIT_ARCH_AARCH64
#[cfg(target_arch = "riscv64")]
const AUDIT_ARCH: u32 = 0xC000_00F3; // AUDIT_ARCH_RISCV64

// Classic BPF opcodes (linux/filter.h, linux/seccomp.h).
const BPF_LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const BPF_JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const BPF_RET_K: u16 = 0x06; // BPF_RET | BPF_K
const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
const SECCOMP_RET_KILL_PROCESS: u32 = 0x8000_0000;
/// Offsets in `struct seccomp_data`.
const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;

fn stmt(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// The filter: another architecture is killed; io_uring's three calls get
/// EPERM; everything else is allowed.
fn filter() -> Vec<libc::sock_filter> {
    vec![
        stmt(BPF_LD_W_ABS, OFF_ARCH),
        jump(BPF_JEQ_K, AUDIT_ARCH, 1, 0),
        stmt(BPF_RET_K, SECCOMP_RET_KILL_PROCESS),
        stmt(BPF_LD_W_ABS, OFF_NR),
        jump(BPF_JEQ_K, IO_URING_SETUP, 3, 0),
        jump(BPF_JEQ_K, IO_URING_ENTER, 2, 0),
        jump(BPF_JEQ_K, IO_URING_REGISTER, 1, 0),
        stmt(BPF_RET_K, SECCOMP_RET_ALLOW),
        stmt(BPF_RET_K, SECCOMP_RET_ERRNO | libc::EPERM as u32),
    ]
}

fn install() -> std::io::Result<()> {
    let prog = filter();
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: PR_SET_NO_NEW_PRIVS takes integer arguments only; it is what
    // lets an unprivileged process install a filter.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fprog` points to `prog`, both alive across the call; the
    // kernel copies the program.
    let r = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            &fprog as *const libc::sock_fprog,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn main() {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    if args.is_empty() {
        eprintln!("usage: no-uring COMMAND [ARGS...]\nruns COMMAND with io_uring_setup/enter/register failing with EPERM (as in a Docker container)");
        std::process::exit(2);
    }
    if let Err(e) = install() {
        eprintln!("no-uring: could not install the seccomp filter: {e}");
        std::process::exit(126);
    }
    let cargs: Vec<CString> = match args
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<_, _>>()
    {
        Ok(v) => v,
        Err(_) => {
            eprintln!("no-uring: an argument contains a NUL byte");
            std::process::exit(2);
        }
    };
    let mut argv: Vec<*const libc::c_char> = cargs.iter().map(|c| c.as_ptr()).collect();
    argv.push(std::ptr::null());
    // SAFETY: argv is a NULL-terminated array of NUL-terminated strings
    // that outlive the call (which returns only on failure).
    unsafe { libc::execvp(argv[0], argv.as_ptr()) };
    eprintln!(
        "no-uring: could not run {}: {}",
        args[0].to_string_lossy(),
        std::io::Error::last_os_error()
    );
    std::process::exit(127);
}
