//! What the command's tests share.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The built `overlap` binary, without RUST_BACKTRACE (its errors are
/// checked as a user sees them).
pub fn overlap() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_overlap"));
    c.env_remove("RUST_BACKTRACE");
    c
}

/// A fresh, empty directory at `rel` under the integration-test temporary
/// directory (in the target directory: never a tmpfs, as O_DIRECT and real
/// page-cache behaviour need).
pub fn fresh_dir(rel: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(rel);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A command's stderr, as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A command's stdout, as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Writes all of `buf` at `offset` of `file` (`pwrite`; on Windows a
/// positioned `WriteFile`).
pub fn write_all_at(file: &std::fs::File, buf: &[u8], offset: u64) {
    #[cfg(not(windows))]
    std::os::unix::fs::FileExt::write_all_at(file, buf, offset).unwrap();
    #[cfg(windows)]
    {
        let mut done = 0;
        while done < buf.len() {
            let n =
                std::os::windows::fs::FileExt::seek_write(file, &buf[done..], offset + done as u64)
                    .unwrap();
            assert!(n > 0, "a write of 0 bytes");
            done += n;
        }
    }
}
