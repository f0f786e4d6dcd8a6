//! `overlapped._native`: the extension module behind the `overlapped` Python
//! package (asyncio file I/O on the overlap engine). The Python side lives
//! in `python/python/overlapped/`; `hub` explains how completions reach the loop.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

use std::sync::Mutex;

use overlapped::Engine;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

mod buffer;
mod errors;
mod file;
mod hub;

/// The process's engine and the process it was made in.
static ENGINE: Mutex<Option<(Engine, u32)>> = Mutex::new(None);

/// The process's engine, started on first use (io_uring; where io_uring is
/// blocked, Linux AIO for O_DIRECT reads, writes and syncs with the thread
/// pool beside it, or the pool alone, and the reason why;
/// `OVERLAP_DRIVER=uring|aio|pool` chooses;
/// `OVERLAP_MAX_INFLIGHT_OPS` and `OVERLAP_MAX_INFLIGHT_BYTES` set the
/// in-flight budget, default 4096 operations and 64 MiB).
///
/// A child made by `fork` gets an engine of its own on first use: the
/// parent's driver threads do not exist in the child. The parent's engine
/// is left alone there (shutting it down would wait for threads that are
/// not there), and so are files opened before the fork, which keep it.
pub(crate) fn engine() -> PyResult<Engine> {
    let pid = std::process::id();
    let mut slot = ENGINE.lock().unwrap_or_else(|p| p.into_inner());
    match slot.as_ref() {
        Some((e, made_in)) if *made_in == pid => {
            debug_assert!(
                !e.is_forked_copy(),
                "the engine made by this process is its own"
            );
            return Ok(e.clone());
        }
        Some(_) => {
            if let Some((stale, _)) = slot.take() {
                std::mem::forget(stale);
            }
        }
        None => {}
    }
    let mut builder = Engine::builder();
    if let Some(n) = env_limit("OVERLAP_MAX_INFLIGHT_OPS")? {
        builder = builder.max_inflight_ops(n);
    }
    if let Some(n) = env_limit("OVERLAP_MAX_INFLIGHT_BYTES")? {
        builder = builder.max_inflight_bytes(n);
    }
    let made = builder
        .build()
        .map_err(|e| PyRuntimeError::new_err(format!("overlap: {e}")))?;
    *slot = Some((made.clone(), pid));
    Ok(made)
}

/// An in-flight limit from the environment (a positive integer), if set.
fn env_limit(name: &str) -> PyResult<Option<usize>> {
    match std::env::var(name) {
        Err(_) => Ok(None),
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(n) if n > 0 => Ok(Some(n)),
            _ => Err(pyo3::exceptions::PyValueError::new_err(format!(
                "{name}={v}: expected a positive integer"
            ))),
        },
    }
}

/// `driver()`: which driver the engine runs and why.
#[pyfunction]
fn driver(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let engine = engine()?;
    let info = engine.driver();
    let d = PyDict::new(py);
    d.set_item("kind", info.kind.as_str())?;
    d.set_item("fallback", info.fallback.as_ref().map(|r| r.to_string()))?;
    d.set_item("hint", info.fallback.as_ref().map(|r| r.hint()))?;
    d.set_item("detail", &info.detail)?;
    let (ops, bytes) = engine.limits();
    d.set_item("max_in_flight_ops", ops)?;
    d.set_item("max_in_flight_bytes", bytes)?;
    Ok(d)
}

/// `stats()`: the engine's counters since it started: every field of
/// [`overlapped::Stats`] ([`Stats::fields`](overlapped::Stats::fields), so one
/// added there is here too), named as in Rust but for the spelling
/// `in_flight` ([`python_name`]), then the operations and bytes in flight
/// now.
#[pyfunction]
fn stats(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let e = engine()?;
    let s = py.detach(|| e.stats());
    let d = PyDict::new(py);
    for (name, value) in s.fields() {
        d.set_item(python_name(name), value)?;
    }
    let (ops, bytes) = e.in_flight();
    d.set_item("in_flight_ops", ops)?;
    d.set_item("in_flight_bytes", bytes)?;
    Ok(d)
}

/// A Rust counter's name in Python: every key about what is in flight is
/// spelled `in_flight` there (`inflight_ops_high_water` is
/// `in_flight_ops_high_water`; the Rust spelling still answers in Python,
/// deprecated: `overlapped._DEPRECATED_KEYS`).
fn python_name(rust: &str) -> String {
    rust.replace("inflight", "in_flight")
}

/// `_stats_fields()`: the names of [`overlapped::Stats`]'s counters as
/// [`Stats::fields`](overlapped::Stats::fields) gives them, in Rust's
/// spelling (for the tests: every one of them is a key of `stats()`).
#[pyfunction]
fn _stats_fields() -> Vec<&'static str> {
    overlapped::Stats::default()
        .fields()
        .map(|(name, _)| name)
        .collect()
}

/// `shutdown()`: shuts the process's engine down. Waits (without the GIL)
/// until the operations in flight are complete: their asyncio futures are
/// resolved with their results when their loops run next. Every operation
/// started afterwards, by any loop, raises `RuntimeError` at once. A
/// second call does nothing; a child made by `fork` starts an engine of its
/// own, as ever.
#[pyfunction]
fn shutdown(py: Python<'_>) -> PyResult<()> {
    let e = engine()?;
    py.detach(|| e.shutdown());
    Ok(())
}

/// The page size, the default alignment of `AlignedBuffer`.
#[pyfunction]
fn page_size() -> usize {
    buffer::page_size()
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(driver, m)?)?;
    m.add_function(wrap_pyfunction!(stats, m)?)?;
    m.add_function(wrap_pyfunction!(_stats_fields, m)?)?;
    m.add_function(wrap_pyfunction!(page_size, m)?)?;
    m.add_function(wrap_pyfunction!(shutdown, m)?)?;
    m.add_function(wrap_pyfunction!(file::open, m)?)?;
    m.add_function(wrap_pyfunction!(hub::_forget_hubs_after_fork, m)?)?;
    m.add_class::<buffer::AlignedBuffer>()?;
    m.add_class::<file::PyFile>()?;
    m.add_class::<file::PyAlignment>()?;
    m.add_class::<file::FileStat>()?;
    m.add_class::<hub::Hub>()?;
    m.add("MAX_RW_BYTES", overlapped::MAX_RW_BYTES)?;
    Ok(())
}
