//! Typed errors. Every failure the engine can report is a variant here, so
//! callers can match on what went wrong instead of parsing strings.

use std::fmt;
use std::io;

/// The result type of every fallible overlap operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Which part of a direct-I/O request broke the alignment rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AlignmentPart {
    /// The memory address of the buffer.
    Buffer,
    /// The file offset.
    Offset,
    /// The transfer length.
    Length,
}

impl fmt::Display for AlignmentPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AlignmentPart::Buffer => "buffer address",
            AlignmentPart::Offset => "file offset",
            AlignmentPart::Length => "length",
        })
    }
}

/// Why the engine is not running on io_uring.
///
/// Recorded by [`Engine::driver`](crate::Engine::driver) so that a fallback is
/// never silent.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FallbackReason {
    /// Another driver (the thread pool, or AIO) was asked for, by the
    /// builder or `OVERLAP_DRIVER`.
    Forced(String),
    /// `io_uring_setup` returned ENOSYS: the kernel was built without io_uring.
    NotSupported,
    /// `kernel.io_uring_disabled` is set to the given value (1 or 2).
    DisabledBySysctl(u8),
    /// `io_uring_setup` returned EPERM for another reason: usually a seccomp
    /// filter, as container runtimes install by default.
    PermissionDenied,
    /// `io_uring_setup` returned ENOMEM: the locked-memory limit is too small
    /// for the rings (kernels before 5.12 charge rings to `RLIMIT_MEMLOCK`).
    MemoryLimit,
    /// The kernel's io_uring lacks an operation or a feature the engine
    /// needs (named, with the Linux version that brought it).
    MissingOpcode(&'static str),
    /// Any other setup error.
    Other(String),
    /// The system is not Linux: io_uring (and Linux AIO) are Linux's. On
    /// Windows the engine runs on I/O completion ports instead.
    OtherSystem,
}

impl FallbackReason {
    /// A sentence telling the user what to change to get io_uring.
    pub fn hint(&self) -> &'static str {
        match self {
            FallbackReason::Forced(_) => "unset OVERLAP_DRIVER or build the engine with DriverChoice::Auto",
            FallbackReason::NotSupported => "use a kernel built with CONFIG_IO_URING=y (Linux 5.6 or later)",
            FallbackReason::DisabledBySysctl(_) => "run `sysctl -w kernel.io_uring_disabled=0` as root",
            FallbackReason::PermissionDenied => {
                "allow io_uring_setup, io_uring_enter and io_uring_register in the seccomp profile \
                 (e.g. `docker run --security-opt seccomp=<profile>`)"
            }
            FallbackReason::MemoryLimit => "raise the locked-memory limit: `ulimit -l unlimited` or LimitMEMLOCK= in the unit file",
            FallbackReason::MissingOpcode(_) => "upgrade to Linux 6.9 or later",
            FallbackReason::Other(_) => "check `dmesg` and the kernel's io_uring support",
            FallbackReason::OtherSystem => "build the engine with DriverChoice::Auto: it picks this system's own driver",
        }
    }
}

impl fmt::Display for FallbackReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FallbackReason::Forced(by) => write!(f, "another driver forced by {by}"),
            FallbackReason::NotSupported => f.write_str("io_uring_setup failed with ENOSYS: the kernel has no io_uring"),
            FallbackReason::DisabledBySysctl(v) => write!(f, "io_uring is disabled by kernel.io_uring_disabled={v}"),
            FallbackReason::PermissionDenied => {
                f.write_str("io_uring_setup failed with EPERM: blocked by a seccomp filter (common in containers)")
            }
            FallbackReason::MemoryLimit => f.write_str("io_uring_setup failed with ENOMEM: locked-memory limit too small"),
            FallbackReason::MissingOpcode(op) => write!(f, "the kernel's io_uring lacks {op}"),
            FallbackReason::Other(e) => write!(f, "io_uring_setup failed: {e}"),
            FallbackReason::OtherSystem => f.write_str("io_uring is Linux's, and this system is not Linux"),
        }
    }
}

/// Everything that can go wrong in overlap.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The operating system reported an error. Displays as the OS error
    /// itself, and is not its own cause: a report that prints the chain of
    /// causes (`anyhow`'s `{:#}`) names it once.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// A direct-I/O request is not aligned as the file requires. Nothing was submitted.
    #[error("direct I/O needs the {part} aligned to {required} bytes, got {value} (use AlignedBuf / AlignedBufPool::for_file and block-sized offsets)")]
    Misaligned {
        /// What was misaligned.
        part: AlignmentPart,
        /// The alignment the file requires, in bytes.
        required: u32,
        /// The offending address, offset or length.
        value: u64,
    },
    /// `offset + length` does not fit in a file offset (`i64::MAX`).
    #[error("offset {offset} plus length {len} overflows the largest file offset")]
    OffsetOverflow {
        /// The requested offset.
        offset: u64,
        /// The requested length.
        len: u64,
    },
    /// The file was not opened for this kind of access.
    #[error("the file was not opened for {0} (set OpenOptions::{0}(true))")]
    NotOpenedFor(&'static str),
    /// The file was closed (through another handle) before this operation.
    #[error("the file is closed")]
    Closed,
    /// A `try_*` submission found the in-flight budget full.
    #[error("the engine's in-flight budget is full; retry later or use the waiting variant")]
    WouldBlock,
    /// The engine has been shut down.
    #[error("the engine has been shut down")]
    Shutdown,
    /// `read_exact_at` reached the end of the file first.
    #[error("end of file after {read} of {wanted} bytes")]
    UnexpectedEof {
        /// Bytes read before end of file.
        read: usize,
        /// Bytes asked for.
        wanted: usize,
    },
    /// `write_all_at` made no progress (the kernel wrote 0 bytes).
    #[error("write made no progress after {written} of {wanted} bytes")]
    WriteZero {
        /// Bytes written before the stall.
        written: usize,
        /// Bytes asked for.
        wanted: usize,
    },
    /// io_uring was required (builder or `OVERLAP_DRIVER=uring`) but cannot be used.
    #[error("io_uring is unavailable: {reason}; to fix: {}", reason.hint())]
    UringUnavailable {
        /// Why io_uring cannot be used.
        reason: FallbackReason,
    },
    /// Linux AIO was required (builder or `OVERLAP_DRIVER=aio`) but
    /// `io_setup` failed.
    #[error("Linux AIO is unavailable: {reason}")]
    AioUnavailable {
        /// What `io_setup` said, and what to change.
        reason: String,
    },
    /// Windows' I/O completion ports were required (builder or
    /// `OVERLAP_DRIVER=iocp`) but cannot be used: on another system, or
    /// when `CreateIoCompletionPort` fails.
    #[error("I/O completion ports are unavailable: {reason}")]
    IocpUnavailable {
        /// Why, and what to change.
        reason: String,
    },
    /// A configuration value or argument is out of range.
    #[error("invalid argument: {0}")]
    InvalidInput(String),
    /// This process is a `fork` of the one that made the engine, the port
    /// or the ring, or that started the operation: they belong to the
    /// parent (the kernel completes the parent's operations there, with
    /// the parent's memory). The message says what to do.
    #[error("{0}")]
    Forked(&'static str),
    /// The system refused `call` because the process's token does not hold
    /// `privilege` enabled (Windows' `ERROR_PRIVILEGE_NOT_HELD`, 1314,
    /// which [`raw_os_error`](Error::raw_os_error) still gives): the one
    /// case so far, `File::set_valid_data` (`SetFileValidData`) without
    /// `SeManageVolumePrivilege`. Nothing was changed. The message says how
    /// to get it.
    #[error(
        "{call} needs {privilege} enabled in the process's token, and it is not: {}",
        privilege_hint(privilege)
    )]
    PrivilegeNotHeld {
        /// The privilege's name (`SeManageVolumePrivilege`).
        privilege: &'static str,
        /// The system call that asked for it (`SetFileValidData`).
        call: &'static str,
    },
    /// The operation has no counterpart on this operating system (named):
    /// extended attributes on Windows. Nothing was submitted.
    #[error("{0} are not supported on this operating system")]
    Unsupported(&'static str),
}

impl Error {
    /// The OS error number, when the error came from the kernel.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Error::Io(e) => e.raw_os_error(),
            Error::PrivilegeNotHeld { .. } => Some(ERROR_PRIVILEGE_NOT_HELD),
            _ => None,
        }
    }

    /// The error as an [`io::ErrorKind`], for code that speaks `std::io`.
    pub fn kind(&self) -> io::ErrorKind {
        match self {
            Error::Io(e) => e.kind(),
            Error::Misaligned { .. } | Error::OffsetOverflow { .. } | Error::InvalidInput(_) => {
                io::ErrorKind::InvalidInput
            }
            Error::NotOpenedFor(_) => io::ErrorKind::PermissionDenied,
            Error::Closed | Error::Shutdown => io::ErrorKind::NotConnected,
            Error::WouldBlock => io::ErrorKind::WouldBlock,
            Error::UnexpectedEof { .. } => io::ErrorKind::UnexpectedEof,
            Error::WriteZero { .. } => io::ErrorKind::WriteZero,
            Error::UringUnavailable { .. }
            | Error::AioUnavailable { .. }
            | Error::IocpUnavailable { .. } => io::ErrorKind::Unsupported,
            Error::Forked(_) => io::ErrorKind::Other,
            Error::Unsupported(_) => io::ErrorKind::Unsupported,
            Error::PrivilegeNotHeld { .. } => io::ErrorKind::PermissionDenied,
        }
    }

    pub(crate) fn from_errno(errno: i32) -> Error {
        Error::Io(io::Error::from_raw_os_error(errno))
    }
}

/// Windows' `ERROR_PRIVILEGE_NOT_HELD`: the code of
/// [`Error::PrivilegeNotHeld`].
const ERROR_PRIVILEGE_NOT_HELD: i32 = 1314;

/// What to do to hold `privilege` enabled, for [`Error::PrivilegeNotHeld`].
fn privilege_hint(privilege: &str) -> &'static str {
    match privilege {
        "SeManageVolumePrivilege" => {
            "administrators hold it (and accounts granted \"Perform volume maintenance tasks\" \
             in the local security policy), but it is not enabled by default: run the process \
             elevated and call overlapped::enable_manage_volume_privilege() first"
        }
        _ => "grant it to the account and enable it in the token (AdjustTokenPrivileges)",
    }
}

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        match e {
            Error::Io(e) => e,
            other => io::Error::new(other.kind(), other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `anyhow`'s `{:#}` prints: each error of the chain, joined.
    fn chain(e: &dyn std::error::Error) -> String {
        let mut out = e.to_string();
        let mut cur = e.source();
        while let Some(c) = cur {
            out.push_str(": ");
            out.push_str(&c.to_string());
            cur = c.source();
        }
        out
    }

    #[test]
    fn an_os_error_is_named_once_in_a_chain_of_causes() {
        #[cfg(target_os = "linux")]
        let code = libc::EACCES;
        #[cfg(windows)]
        // ERROR_ACCESS_DENIED
        let code = 5;
        // The system's own words ("Permission denied", "Access is denied.",
        // Wine's "Access denied.").
        let words = io::Error::from_raw_os_error(code).to_string();
        let e = Error::from(io::Error::from_raw_os_error(code));
        let text = chain(&e);
        assert_eq!(text.matches(&words).count(), 1, "{text}");
        assert_eq!(e.raw_os_error(), Some(code));
    }
}
