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
