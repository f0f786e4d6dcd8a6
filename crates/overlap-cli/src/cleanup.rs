//! Files (and scratch directories) a command creates go away on every way out: at the end, on error,
//! and on an interruption (SIGINT, SIGTERM, SIGHUP; Ctrl-C on Windows). One
//! registry and one handler for the whole process, shared by `probe`, `bench` and `journal bench`.

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, Once, OnceLock};

static FILES: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
static BEFORE_EXIT: OnceLock<fn()> = OnceLock::new();

/// The files this process created and has not removed yet. Create a file
/// while holding this guard: an interruption then either sees the file
/// registered or stops its creation.
pub(crate) fn registry() -> MutexGuard<'static, Vec<PathBuf>> {
    FILES.lock().unwrap_or_else(|p| p.into_inner())
}

/// Removes a registered path: a file, or a directory and all in it (a
/// scratch directory the command made, such as `journal bench`'s).
fn remove(p: &std::path::Path) {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => {
            // Threads of the command may still be adding files: retry.
            for _ in 0..3 {
                if std::fs::remove_dir_all(p).is_ok() {
                    break;
                }
            }
        }
        _ => {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Removes every registered file (best effort) and forgets them.
pub(crate) fn remove_all() {
    for p in std::mem::take(&mut *registry()) {
        remove(&p);
    }
}

/// Removes one registered path now and forgets it.
pub(crate) fn remove_one(path: &std::path::Path) {
    let mut files = registry();
    remove(path);
    files.retain(|p| p != path);
}

/// On an interruption (SIGINT, SIGTERM or SIGHUP on Linux; Ctrl-C,
/// Ctrl-Break or the console closed on Windows: see
/// [`crate::sys::on_interrupt`]), runs `before_exit` (e.g. to stop a child
/// process), removes the registered files, says so on stderr as
/// `overlap COMMAND: interrupted` and exits (128 + the signal on Linux,
/// `STATUS_CONTROL_C_EXIT` on Windows). Only the first call installs
/// anything.
pub(crate) fn install(command: &'static str, before_exit: Option<fn()>) {
    static ONCE: Once = Once::new();
    if let Some(f) = before_exit {
        let _ = BEFORE_EXIT.set(f);
    }
    ONCE.call_once(|| {
        let _ = COMMAND.set(command);
        // Without the handler, the interruption ends the process as usual.
        let _ = crate::sys::on_interrupt(interrupted);
    });
}

/// The command named in the interruption's message.
static COMMAND: OnceLock<&'static str> = OnceLock::new();

/// The interruption: see [`install`].
fn interrupted(exit_code: i32) {
    if let Some(f) = BEFORE_EXIT.get() {
        f();
    }
    // Held until exit: no file can be created after this removal.
    let files = registry();
    for p in files.iter() {
        remove(p);
    }
    // Not eprintln!: it panics when stderr is a closed pipe, and this
    // thread must reach exit() whatever happens.
    let _ = writeln!(
        std::io::stderr(),
        "\noverlap {}: interrupted; removed the {} file(s) it had created",
        COMMAND.get().copied().unwrap_or("command"),
        files.len()
    );
    std::process::exit(exit_code);
}
