//! The direct-I/O alignment a file requires, and where it comes from.

use crate::sys::RawStat;

/// Alignment that direct I/O on a file requires, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Alignment {
    /// Alignment of the buffer's address.
    pub memory: u32,
    /// Alignment of file offsets and lengths.
    pub offset: u32,
    /// Where the figures came from: `"statx"` (STATX_DIOALIGN) or
    /// `"block-device"` (the device's logical block size) on Linux,
    /// `"storage-info"` (the volume's sector sizes) on Windows, or
    /// `"default"`.
    pub source: &'static str,
}

/// The direct-I/O alignment `st` reports, or the device's.
#[cfg(target_os = "linux")]
pub(super) fn alignment_of(st: &RawStat) -> Alignment {
    if st.stx_mask & crate::operation::STATX_DIOALIGN != 0 && st.stx_dio_offset_align > 0 {
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

/// The direct-I/O (`FILE_FLAG_NO_BUFFERING`) alignment of the volume
/// `st` was read on (`FileStorageInfo`): offsets and lengths in multiples
/// of its logical sector size, buffers aligned to its physical sector size
/// (Microsoft's "File Buffering"); 4096 where the volume does not say.
#[cfg(windows)]
pub(super) fn alignment_of(st: &RawStat) -> Alignment {
    if st.logical_sector > 0 {
        Alignment {
            memory: st.physical_sector.max(st.logical_sector),
            offset: st.logical_sector,
            source: "storage-info",
        }
    } else {
        Alignment {
            memory: 4096,
            offset: 4096,
            source: "default",
        }
    }
}

#[cfg(target_os = "linux")]
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
