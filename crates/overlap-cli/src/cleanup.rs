//! Files (and scratch directories) a command creates go away on every way out: at the end, on error,
//! and on SIGINT, SIGTERM or SIGHUP. One registry and one signal thread for
//! the whole process, shared by `probe`, `bench` and `journal bench`.

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

/// Blocks SIGINT, SIGTERM and SIGHUP in this thread and every thread started
/// after it (the mask is inherited) and starts one thread that waits for
/// them: it runs `before_exit` (e.g. to stop a child process), removes the
/// registered files, says so on stderr as `overlap COMMAND: interrupted` and
/// exits with 128 + the signal. Only the first call installs anything.
pub(crate) fn install(command: &'static str, before_exit: Option<fn()>) {
    static ONCE: Once = Once::new();
    if let Some(f) = before_exit {
        let _ = BEFORE_EXIT.set(f);
    }
    ONCE.call_once(|| {
        // SAFETY: sigset_t is plain data; sigemptyset initialises it.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is a valid sigset_t owned by this frame; blocking the
        // signals only defers their delivery to the sigwait below.
        let blocked = unsafe {
            libc::sigemptyset(&mut set);
            for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                libc::sigaddset(&mut set, sig);
            }
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) == 0
        };
        if !blocked {
            return;
        }
        let spawned = std::thread::Builder::new()
            .name("overlap-signals".into())
            .spawn(move || loop {
                let mut sig: libc::c_int = 0;
                // SAFETY: a valid set moved into this thread and a valid out-pointer.
                if unsafe { libc::sigwait(&set, &mut sig) } != 0 {
                    continue;
                }
                if let Some(f) = BEFORE_EXIT.get() {
                    f();
                }
                // Held until exit: no file can be created after this removal.
                let files = registry();
                for p in files.iter() {
                    remove(p);
                }
                // Not eprintln!: it panics when stderr is a closed pipe, and
                // this thread must reach exit() whatever happens.
                let _ = writeln!(
                    std::io::stderr(),
                    "\noverlap {command}: interrupted; removed the {} file(s) it had created",
                    files.len()
                );
                std::process::exit(128 + sig);
            });
        if spawned.is_err() {
            // Without the waiter, let the signals end the process as usual.
            // SAFETY: as above, on the same valid set.
            unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) };
        }
    });
}
