//! The accept loop of `overlap serve`: at most `--max-connections` open at
//! once, the rest waiting in the listen backlog; at the descriptor limit
//! (`EMFILE`), a pause instead of a spin.
//!
//! At the cap the loop does not accept: new connections complete their
//! TCP handshake in the kernel's listen backlog (511; beyond,
//! the kernel drops their SYNs and clients retry) and are served, in their
//! order of arrival, as connections close (the timeouts close silent ones).
//! When an accept fails for want of descriptors or memory (`EMFILE`,
//! `ENFILE`, `ENOBUFS`, `ENOMEM`), the connection stays in the backlog and
//! the loop waits 500 ms before the next accept, as nginx does
//! (`accept_mutex_delay`); each of these is said once on stderr, and how
//! often it happened when the server stops.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

use super::conn::{self, Timeouts};

/// How long accepting pauses after `EMFILE` and its kin (nginx's
/// `accept_mutex_delay`).
const ACCEPT_PAUSE: Duration = Duration::from_millis(500);

/// Descriptors kept out of the connections' share of `RLIMIT_NOFILE`: the
/// standard streams, the listener, the runtime's and the engine's own
/// (epoll, eventfds, signal pipe, rings).
pub const RESERVED_FDS: u64 = 64;

/// Connections per runtime worker thread, as nginx's `worker_connections`
/// per worker process.
pub const CONNECTIONS_PER_WORKER: u64 = 512;

/// The soft `RLIMIT_NOFILE`, if there is one (Windows has none).
pub fn nofile_limit() -> Option<u64> {
    crate::sys::open_files_limit()
}

/// Descriptors one connection may hold: its socket, the file it sends,
/// and that file's duplicate while its body goes out by `sendfile`.
pub const FDS_PER_CONNECTION: u64 = 3;

/// How many connections the descriptor limit leaves room for.
pub fn connections_for(nofile: u64) -> u64 {
    (nofile.saturating_sub(RESERVED_FDS) / FDS_PER_CONNECTION).max(1)
}

/// The default cap: nginx's 512 per worker, and no more than the
/// descriptor limit leaves room for.
pub fn default_max_connections(workers: usize) -> u64 {
    let nginx = CONNECTIONS_PER_WORKER * workers.max(1) as u64;
    nofile_limit().map_or(nginx, |n| nginx.min(connections_for(n)))
}

/// What the loop met, counted for the stop.
#[derive(Debug, Default)]
pub struct AcceptStats {
    /// Times the cap was reached (the loop waited for a connection to end).
    pub at_cap: u64,
    /// Accepts that failed for want of descriptors or memory.
    pub out_of_resources: u64,
}

/// Accepts until `stop` turns true; each connection runs on a task of its
/// own, holding one of `max` permits until it ends. Returns once no
/// longer accepting (connections may still be open: `open` counts them).
pub async fn run(
    listener: TcpListener,
    app: Router,
    timeouts: Timeouts,
    max: usize,
    open: Arc<Semaphore>,
    mut stop: watch::Receiver<bool>,
) -> AcceptStats {
    assert!(max > 0 && open.available_permits() == max, "a cap of {max}");
    let mut stats = AcceptStats::default();
    loop {
        if open.available_permits() == 0 {
            stats.at_cap += 1;
            if stats.at_cap == 1 {
                eprintln!(
                    "warning: {max} connections open (--max-connections): new ones wait in the listen backlog (said once)"
                );
            }
        }
        let permit = tokio::select! {
            p = open.clone().acquire_owned() => p,
            _ = stop.wait_for(|s| *s) => return stats,
        };
        let Ok(permit) = permit else { return stats }; // never closed
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = stop.wait_for(|s| *s) => return stats,
        };
        match accepted {
            Ok((tcp, _)) => {
                // TCP_NODELAY, as nginx sets it (`tcp_nodelay on`): hyper
                // writes a response's head and its first body chunk
                // separately, and with Nagle's algorithm the second waits
                // for the client's delayed ACK (40 ms).
                if let Err(e) = tcp.set_nodelay(true) {
                    eprintln!("warning: cannot set TCP_NODELAY on a connection: {e}");
                }
                let (app, stop) = (app.clone(), stop.clone());
                tokio::spawn(async move {
                    conn::serve(tcp, app, timeouts, stop).await;
                    drop(permit);
                });
            }
            Err(e) if is_connection_error(&e) => {}
            Err(e) => {
                drop(permit);
                stats.out_of_resources += 1;
                if stats.out_of_resources == 1 {
                    eprintln!(
                        "warning: cannot accept a connection ({e}): it waits in the listen backlog; accepting pauses {} ms each time (said once; --max-connections below {} avoids it)",
                        ACCEPT_PAUSE.as_millis(),
                        nofile_limit().map_or(max as u64, connections_for)
                    );
                }
                tokio::select! {
                    _ = tokio::time::sleep(ACCEPT_PAUSE) => {}
                    _ = stop.wait_for(|s| *s) => return stats,
                }
            }
        }
    }
}

/// An accept error that concerns that one connection only (it went away
/// before it was accepted): the next accept goes on at once.
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
    ) || crate::sys::is_protocol_error(e)
}
