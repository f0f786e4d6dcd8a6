//! What the journal's integration tests share: where a test's
//! journal lives and how its files are named. (Each module keeps its own
//! `opts()` and `payload()`: their sizes are what that module tests.)
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// A directory for a test's journal, `journal-<name>` under the
/// integration-test temporary directory (in the target directory: never a
/// tmpfs, as O_DIRECT needs), removed if an earlier run left it: the
/// journal creates it.
pub fn fresh_dir(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("journal-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// The file of segment `seq` in the journal directory `d`.
pub fn seg_path(d: &Path, seq: u64) -> PathBuf {
    d.join(format!("{seq:016x}.seg"))
}

/// How many files in `d` have names ending in `suffix`.
pub fn files_ending(d: &Path, suffix: &str) -> usize {
    std::fs::read_dir(d)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(suffix)
        })
        .count()
}

/// A copy of the files of the journal in `from`, as a crash would leave
/// them (the journal may be open).
pub fn copy_dir(from: &Path, to: &Path) {
    let _ = std::fs::remove_dir_all(to);
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

/// Positioned reads and writes of a `std::fs::File`, as Unix's
/// `FileExt` names them, on Linux and Windows (`seek_read` and
/// `seek_write`, looped; they move the file's cursor, which these tests
/// never use).
pub trait FileExt {
    /// Reads up to `buf.len()` bytes at `offset`.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize>;
    /// Writes all of `buf` at `offset`.
    fn write_all_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()>;
}

#[cfg(unix)]
impl FileExt for std::fs::File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        std::os::unix::fs::FileExt::read_at(self, buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        std::os::unix::fs::FileExt::write_all_at(self, buf, offset)
    }
}

#[cfg(windows)]
impl FileExt for std::fs::File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        std::os::windows::fs::FileExt::seek_read(self, buf, offset)
    }
    fn write_all_at(&self, mut buf: &[u8], mut offset: u64) -> std::io::Result<()> {
        while !buf.is_empty() {
            let n = std::os::windows::fs::FileExt::seek_write(self, buf, offset)?;
            if n == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            buf = &buf[n..];
            offset += n as u64;
        }
        Ok(())
    }
}
