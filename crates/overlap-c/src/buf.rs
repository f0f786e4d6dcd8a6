//! A caller's buffer as the engine sees it: an address and a length that
//! the C caller promises to keep valid, and not to touch, until the
//! operation's completion is reaped (the OVERLAPPED rule, see the header).

use std::ffi::c_void;

use overlapped::{IoBuf, IoBufMut};

/// The longest buffer accepted (a larger length cannot describe memory).
pub(crate) const MAX_LEN: u64 = isize::MAX as u64;

/// Memory the C caller lends to one operation.
#[derive(Debug)]
pub(crate) struct CBuf {
    ptr: *mut u8,
    len: usize,
    /// A completion posted with `overlap_port_post`, not an operation's.
    pub(crate) posted: bool,
}

/// No memory: a NULL address, no length (a posted completion's buffer).
impl Default for CBuf {
    fn default() -> CBuf {
        CBuf {
            ptr: std::ptr::null_mut(),
            len: 0,
            posted: false,
        }
    }
}

// SAFETY: a CBuf is an address and a length; the memory is the caller's,
// lent to the one operation that carries it (which the engine may complete
// on another thread), as with an OVERLAPPED structure.
unsafe impl Send for CBuf {}

impl CBuf {
    /// Checks a caller's (address, length): NULL with a length is `EFAULT`,
    /// an absurd length `EINVAL`; the message names `what`.
    pub(crate) fn new(ptr: *const c_void, len: u64, what: &str) -> Result<CBuf, (i32, String)> {
        if len > MAX_LEN {
            return Err((
                libc::EINVAL,
                format!("{what}: a length of {len} bytes cannot describe a buffer"),
            ));
        }
        if ptr.is_null() && len > 0 {
            return Err((
                libc::EFAULT,
                format!("{what}: the buffer is NULL with a length of {len}"),
            ));
        }
        let b = CBuf {
            ptr: ptr as *mut u8,
            len: len as usize,
            posted: false,
        };
        debug_assert!(
            (!b.ptr.is_null() || b.len == 0) && b.len as u64 <= MAX_LEN,
            "a buffer lent to an operation has an address for its bytes, and a length memory can have"
        );
        Ok(b)
    }

    pub(crate) fn posted() -> CBuf {
        CBuf {
            posted: true,
            ..CBuf::default()
        }
    }
}

// SAFETY: the memory lives outside the CBuf value (it is the caller's), so
// the address does not change when the value moves. The caller promises
// (the header's buffer rule, on every function that takes a buffer) that
// `len` bytes at `ptr` stay valid and untouched until the operation's
// completion is reaped (or a blocking call returns); `new` refuses NULL
// with a length and lengths no allocation can have.
unsafe impl IoBuf for CBuf {
    fn stable_ptr(&self) -> *const u8 {
        self.ptr
    }
    fn bytes_len(&self) -> usize {
        self.len
    }
}

// SAFETY: as above; a read's buffer is lent writable (`void *`), and any
// byte pattern is a valid `u8`.
unsafe impl IoBufMut for CBuf {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        self.ptr
    }
}
