//! The process's engine: `tokio::fs` functions take no engine argument.

use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Mutex;

use overlapped::Engine;

/// The engine in use, leaked: it lives as long as the process (or, in a
/// child after `fork`, is forgotten there: the parent's engine must never
/// be shut down by a child, whose copy has none of its threads).
static ENGINE: AtomicPtr<Engine> = AtomicPtr::new(std::ptr::null_mut());
/// Serialises making or installing an engine.
static MAKING: Mutex<()> = Mutex::new(());

/// The engine every `overlapped_tokio::fs` call uses: created with
/// [`Engine::new`] on first use (io_uring, or the thread pool and the
/// reason why), unless [`set_engine`] installed one before. As
/// `Engine::new`, it obeys the environment variable `OVERLAP_DRIVER`
/// (`uring` or `pool`), which is how the tests run once per driver.
///
/// A child made by `fork` gets an engine of its own on first use: the
/// parent's belongs to the parent (its threads are not in the child).
///
/// ```
/// let engine = overlapped_tokio::engine();
/// println!("{} ({:?})", engine.driver().kind, engine.stats());
/// ```
pub fn engine() -> &'static Engine {
    if let Some(e) = current() {
        return e;
    }
    let _making = MAKING.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(e) = current() {
        return e;
    }
    match Engine::new() {
        Ok(e) => install(e),
        // Engine::new only fails when neither io_uring nor a thread can be
        // had; nothing in this crate can work then.
        Err(e) => panic!("overlapped-tokio: no engine could be created: {e}"),
    }
}

/// Installs `engine` as the one [`engine`] returns; gives it back if an
/// engine is already in use (in this process: a child after `fork` may
/// install one of its own).
pub fn set_engine(engine: Engine) -> Result<(), Engine> {
    let _making = MAKING.lock().unwrap_or_else(|p| p.into_inner());
    if current().is_some() {
        return Err(engine);
    }
    install(engine);
    Ok(())
}

/// The engine in use, unless none was made or it is the parent's.
fn current() -> Option<&'static Engine> {
    let p = ENGINE.load(Ordering::Acquire);
    // SAFETY: a non-null pointer comes from `Box::leak` in `install` and is
    // never freed.
    let e = unsafe { p.as_ref() }?;
    (!e.is_forked_copy()).then_some(e)
}

/// Leaks `engine` and makes it the one in use; the one it replaces (a
/// parent's, in a forked child) is forgotten, never dropped.
fn install(engine: Engine) -> &'static Engine {
    let e: &'static Engine = Box::leak(Box::new(engine));
    ENGINE.store((e as *const Engine).cast_mut(), Ordering::Release);
    e
}

/// The process's engine if one was made or installed already.
#[cfg(target_os = "linux")]
pub(crate) fn engine_if_made() -> Option<&'static Engine> {
    current()
}
