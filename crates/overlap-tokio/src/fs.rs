//! Filesystem operations: the names of `tokio::fs`.
