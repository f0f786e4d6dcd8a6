//! The process's engine: `tokio::fs` functions take no engine argument.

use std::sync::OnceLock;

use overlap::Engine;

static ENGINE: OnceLock<Engine> = OnceLock::new();

/// The engine every `overlap_tokio::fs` call uses: created with
/// [`Engine::new`] on first use (io_uring, or the thread pool and the
/// reason why), unless [`set_engine`] installed one before. As
/// `Engine::new`, it obeys the environment variable `OVERLAP_DRIVER`
/// (`uring` or `pool`), which is how the tests run once per driver.
///
/// ```
/// let engine = overlap_tokio::engine();
/// println!("{} ({:?})", engine.driver().kind, engine.stats());
/// ```
pub fn engine() -> &'static Engine {
    ENGINE.get_or_init(|| match Engine::new() {
        Ok(e) => e,
        // Engine::new only fails when neither io_uring nor a thread can be
        // had; nothing in this crate can work then.
        Err(e) => panic!("overlap-tokio: no engine could be created: {e}"),
    })
}

/// Installs `engine` as the one [`engine`] returns; gives it back if an
/// engine is already in use.
pub fn set_engine(engine: Engine) -> Result<(), Engine> {
    ENGINE.set(engine)
}

/// The process's engine if one was made or installed already.
pub(crate) fn engine_if_made() -> Option<&'static Engine> {
    ENGINE.get()
}
