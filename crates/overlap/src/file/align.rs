//! The direct-I/O alignment a file requires, and where it comes from.

use crate::operation;

/// Alignment that direct I/O on a file requires, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Alignment {
    /// Alignment of the buffer's address.
    pub memory: u32,
    /// Alignment of file offsets and lengths.
    pub offset: u32,
    /// Where the figures came from: `"statx"` (STATX_DIOALIGN) or
    /// `"block-device"` (the device's logical block size), or `"default"`.
    pub source: &'static str,
}

/// The direct-I/O alignment `st` reports, or the device's.
pub(super) fn alignment_of(st: &libc::statx) -> Alignment {
    if st.stx_mask & operation::STATX_DIOALIGN != 0 && st.stx_dio_offset_align > 0 {
        Alignment {
            memory: st.stx_dio_mem_align,
            offset: st.stx_dio_offset_align,
            source: "statx",
        }
    } else {
        match logical_block_size(st.stx_dev_major, st.stx_dev_minor) {
            Some(n) => Alignment {
                memory: n,
                offset: n,
                source: "block-device",
            },
            None => Alignment {
                memory: 4096,
                offset: 4096,
                source: "default",
            },
        }
    }
}

fn logical_block_size(major: u32, minor: u32) -> Option<u32> {
    let base = format!("/sys/dev/block/{major}:{minor}");
    for p in [
        format!("{base}/queue/logical_block_size"),
        format!("{base}/../queue/logical_block_size"),
    ] {
        if let Some(n) = std::fs::read_to_string(p)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return Some(n);
        }
    }
    None
}
