//! `overlap serve DIR`: a static file server (axum + tower-http's
//! `ServeDir`) whose file I/O is chosen with `--io`:
//!
//! - `overlap` (the default): `ServeDir` on `overlapped_tokio::tower_http`'s
//!   backend, every open, `statx` and read through the engine, and on
//!   Linux a body the page cache holds sent by `sendfile` (`sendfile`);
//! - `tokio-fs`: `ServeDir` as it comes, on tower-http's default backend
//!   (`tokio::fs`, each operation a task on tokio's blocking pool);
//! - `blocking`: the synchronous I/O antipattern, as static-web-server
//!   does it: `std::fs` calls made inside the async handler, on the
//!   runtime's worker threads (a `ServeDir` backend that blocks in `poll`),
//!   so a slow read stalls every connection on that worker.
//!
//! The three serve the same responses (`ServeDir`'s ranges, `ETag`s,
//! precompressed files, index.html). `/health` answers `ok` and touches no
//! file: its latency under load shows what blocking the workers costs.
//! Ctrl-C or SIGTERM stops the server: it stops accepting, lets requests in
//! flight finish for up to 10 s, then exits.
//!
//! Only regular files are served (and directories' `index.html`): a FIFO,
//! socket or device is a 404 in every `--io`, found so without waiting on
//! it (`files`). `HEAD` is answered as `GET` is (the same status and
//! headers, without the body), for every path.
//!
//! Limits as nginx's: a header timeout (`client_header_timeout`, 60 s), a
//! keep-alive timeout (`keepalive_timeout`, 75 s) and a send timeout
//! (`send_timeout`, 60 s) close connections that stall (`conn`); at most
//! `--max-connections` are open at once, the next ones waiting in the
//! listen backlog, and accepting pauses rather than spins at the
//! descriptor limit (`accept`).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use axum::extract::Request;
use axum::http::Method;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use clap::{Args, ValueEnum};
use overlapped_tokio::tower_http::OverlapBackend;
use tower::util::MapRequest;
use tower_http::services::ServeDir;

mod accept;
#[cfg(target_os = "linux")]
mod backend;
mod blocking;
mod conn;
mod files;
#[cfg(target_os = "linux")]
mod sendfile;
mod tokio_fs;

/// How long requests in flight may take to finish after Ctrl-C or SIGTERM.
const DRAIN: Duration = Duration::from_secs(10);

/// Options of `overlap serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// The directory to serve (`DIR/index.html` for `/`).
    dir: PathBuf,
    /// Where file I/O happens: `overlap` (the engine), `tokio-fs`
    /// (tower-http's default, tokio's blocking pool) or `blocking`
    /// (`std::fs` inside the async handlers: the antipattern).
    #[arg(long, value_enum, default_value_t = IoMode::Overlap)]
    io: IoMode,
    /// TCP port (0: any free one; the address is printed).
    #[arg(short, long, default_value_t = 8080)]
    port: u16,
    /// Address to listen on (the loopback by default: `--bind 0.0.0.0`
    /// serves the network).
    #[arg(long, default_value = "127.0.0.1")]
    bind: IpAddr,
    /// Print one line per request on stderr (method, path, status, time).
    #[arg(long)]
    access_log: bool,
    /// Runtime worker threads (default: one per CPU, as tokio).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024))]
    threads: Option<u16>,
    /// Bytes a body chunk holds, and so what one read of a file asks for
    /// (tower-http's default: 64 KiB; 4 KiB to 16 MiB), in every `--io`.
    #[arg(long, default_value_t = 64 << 10,
          value_parser = clap::value_parser!(u32).range(4096..=16 << 20))]
    read_size: u32,
    /// With `--io overlap`: reads of data not in the page cache in flight
    /// at once, at most (0: no limit; see
    /// `OverlapBackend::with_max_uncached_reads`).
    #[arg(long, default_value_t = overlapped_tokio::tower_http::DEFAULT_MAX_UNCACHED_READS)]
    max_uncached_reads: usize,
    /// How long a client may take to send the whole head of a request
    /// (nginx's `client_header_timeout`), from the accept for the first
    /// request, from its first byte for the next ones; then the connection
    /// is closed. `60s`, `500ms`, `2m`; a bare number is seconds.
    #[arg(long, value_name = "TIME", default_value = "60s", value_parser = parse_timeout)]
    header_timeout: Duration,
    /// How long a connection may stay idle after a response before the
    /// next request begins (nginx's `keepalive_timeout`); then it is
    /// closed.
    #[arg(long, value_name = "TIME", default_value = "75s", value_parser = parse_timeout)]
    keepalive_timeout: Duration,
    /// How long a write to the client may wait for it to read (nginx's
    /// `send_timeout`: between two successive writes, not the whole
    /// response); then the connection is closed.
    #[arg(long, value_name = "TIME", default_value = "60s", value_parser = parse_timeout)]
    send_timeout: Duration,
    /// Connections open at once, at most; the next ones wait in the listen
    /// backlog until one closes (default: 512 per worker thread, as nginx's
    /// `worker_connections`, and at most (RLIMIT_NOFILE - 64) / 3, three
    /// descriptors each: 320 under the usual limit of 1024).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    max_connections: Option<u32>,
}

/// A timeout: `60s`, `500ms`, `2m`, `1h`; a bare number is seconds (as
/// nginx's time values); at least 1 ms, at most 24 h.
fn parse_timeout(s: &str) -> Result<Duration, String> {
    let d = crate::util::parse_duration(s)?;
    if d < Duration::from_millis(1) {
        return Err(format!("`{s}`: a timeout must be at least 1ms"));
    }
    Ok(d)
}

/// `--io`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum IoMode {
    /// `std::fs` inside the async handlers, on the runtime's workers.
    Blocking,
    /// tower-http's default backend: `tokio::fs` (tokio's blocking pool).
    TokioFs,
    /// `overlapped_tokio::tower_http::OverlapBackend`: the engine.
    Overlap,
}

impl IoMode {
    fn name(self) -> &'static str {
        match self {
            IoMode::Blocking => "blocking",
            IoMode::TokioFs => "tokio-fs",
            IoMode::Overlap => "overlap",
        }
    }
}

pub fn run(args: ServeArgs) -> Result<()> {
    let meta = std::fs::metadata(&args.dir).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            anyhow::anyhow!("{}: no such directory", args.dir.display())
        } else {
            anyhow::Error::new(e).context(format!("{}", args.dir.display()))
        }
    })?;
    if !meta.is_dir() {
        bail!("{}: not a directory", args.dir.display());
    }
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    rt.enable_all();
    if let Some(n) = args.threads {
        rt.worker_threads(n.into());
    }
    let rt = rt.build().context("cannot start the tokio runtime")?;
    rt.block_on(serve(args))
}

fn router(args: &ServeArgs) -> Router {
    let chunk = args.read_size as usize;
    // `HEAD` goes to `ServeDir` as `GET`: `ServeDir` answers a `HEAD` from
    // the path's metadata alone and a `GET` from the opened file, so the
    // two could differ (a file it cannot open); the body of the `GET` is
    // never read (axum and hyper drop it, keeping its `Content-Length`).
    let head_as_get = head_as_get as fn(Request) -> Request;
    let files = match args.io {
        IoMode::Overlap => {
            let backend = OverlapBackend::new()
                .with_read_size(chunk)
                .with_max_uncached_reads(args.max_uncached_reads);
            // One open per request, and bodies the page cache holds sent
            // by `sendfile`.
            #[cfg(target_os = "linux")]
            let backend = backend::Backend(backend);
            Router::new().fallback_service(MapRequest::new(
                ServeDir::with_backend(&args.dir, backend).with_buf_chunk_size(chunk),
                head_as_get,
            ))
        }
        IoMode::TokioFs => Router::new().fallback_service(MapRequest::new(
            ServeDir::with_backend(&args.dir, tokio_fs::TokioFsBackend).with_buf_chunk_size(chunk),
            head_as_get,
        )),
        IoMode::Blocking => Router::new().fallback_service(MapRequest::new(
            ServeDir::with_backend(&args.dir, blocking::BlockingBackend).with_buf_chunk_size(chunk),
            head_as_get,
        )),
    };
    let app = Router::new().route("/health", get(health)).merge(files);
    if args.access_log {
        app.layer(middleware::from_fn(access_log))
    } else {
        app
    }
}

fn head_as_get(mut req: Request) -> Request {
    if req.method() == Method::HEAD {
        *req.method_mut() = Method::GET;
    }
    req
}

async fn serve(args: ServeArgs) -> Result<()> {
    let addr = SocketAddr::new(args.bind, args.port);
    let listener = listen(addr).map_err(|e| match e.kind() {
        std::io::ErrorKind::AddrInUse => anyhow::anyhow!(
            "cannot listen on {addr}: the port is in use (another server? choose one with --port)"
        ),
        _ => anyhow::Error::new(e).context(format!("cannot listen on {addr}")),
    })?;
    let local = listener.local_addr().context("the listening address")?;
    let app = router(&args);
    let max = max_connections(&args);
    let timeouts = conn::Timeouts {
        header: args.header_timeout,
        keepalive: args.keepalive_timeout,
        send: args.send_timeout,
    };
    // Before the address is printed: a signal sent on reading it stops us.
    let stop = stop_signal();
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        // The first line says where: scripts and tests read the port here.
        writeln!(
            out,
            "serving {} on http://{local}/ (io: {}); Ctrl-C stops",
            args.dir.display(),
            args.io.name()
        )?;
        writeln!(
            out,
            "limits: {max} connections; timeouts: header {:?}, keep-alive {:?}, send {:?}",
            timeouts.header, timeouts.keepalive, timeouts.send
        )?;
        out.flush()?;
    }

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        match stop.await {
            Ok(name) => eprintln!("{name}: shutting down"),
            Err(e) => eprintln!("error: cannot wait for signals ({e}): shutting down"),
        }
        let _ = stop_tx.send(true);
    });
    let open = Arc::new(tokio::sync::Semaphore::new(max));
    let stats = accept::run(listener, app, timeouts, max, open.clone(), stop_rx).await;
    // Stopped accepting: the connections close after their responses in
    // flight (idle ones at once); every permit back means all closed.
    let all = u32::try_from(max).context("the connection cap")?;
    if tokio::time::timeout(DRAIN, open.acquire_many(all))
        .await
        .is_err()
    {
        eprintln!(
            "requests still in flight after {} s: closed",
            DRAIN.as_secs()
        );
    }
    #[cfg(target_os = "linux")]
    if args.io == IoMode::Overlap {
        eprintln!("{} bodies sent by sendfile", sendfile::bodies());
    }
    if stats.out_of_resources > 0 {
        eprintln!(
            "accepting paused {} times for want of descriptors or memory",
            stats.out_of_resources
        );
    }
    Ok(())
}

/// The listen backlog: nginx's on Linux (`NGX_LISTEN_BACKLOG`), where
/// connections wait while the server is at its cap (std's is 128; the
/// kernel caps it at `net.core.somaxconn`).
const BACKLOG: u32 = 511;

/// A listening socket on `addr` (`SO_REUSEADDR`, as std's), backlog
/// [`BACKLOG`].
fn listen(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

/// `--max-connections`, or its default; warns when the descriptor limit
/// leaves room for fewer.
fn max_connections(args: &ServeArgs) -> usize {
    let workers = args.threads.map_or_else(
        || std::thread::available_parallelism().map_or(1, |n| n.get()),
        usize::from,
    );
    let Some(n) = args.max_connections else {
        return accept::default_max_connections(workers) as usize;
    };
    let n = u64::from(n);
    if let Some(nofile) = accept::nofile_limit() {
        if n > accept::connections_for(nofile) {
            eprintln!(
                "warning: --max-connections {n} may need {} descriptors, more than {} ({nofile}) allows: at the limit, accepting pauses 500 ms at a time",
                accept::FDS_PER_CONNECTION * n + accept::RESERVED_FDS,
                crate::sys::OPEN_FILES_LIMIT_NAME
            );
        }
    }
    n as usize
}

/// Ctrl-C (SIGINT) or SIGTERM: the name of the one that came.
/// The handlers are in place when this returns, before the future is
/// first polled: a signal sent as soon as the address is printed is not
/// lost (nor kills the process).
#[cfg(not(windows))]
fn stop_signal() -> impl std::future::Future<Output = std::io::Result<&'static str>> {
    use tokio::signal::unix::{signal, SignalKind};
    let streams = signal(SignalKind::terminate())
        .and_then(|term| Ok((term, signal(SignalKind::interrupt())?)));
    async move {
        let (mut term, mut int) = streams?;
        Ok(tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "Ctrl-C",
        })
    }
}

/// Ctrl-C or Ctrl-Break (Windows' console events): the name of the one
/// that came. The handlers are in place when this returns, as on Linux.
#[cfg(windows)]
fn stop_signal() -> impl std::future::Future<Output = std::io::Result<&'static str>> {
    use tokio::signal::windows::{ctrl_break, ctrl_c};
    let streams = ctrl_c().and_then(|c| Ok((c, ctrl_break()?)));
    async move {
        let (mut c, mut brk) = streams?;
        Ok(tokio::select! {
            _ = c.recv() => "Ctrl-C",
            _ = brk.recv() => "Ctrl-Break",
        })
    }
}

/// `/health`: touches no file.
async fn health() -> &'static str {
    "ok\n"
}

/// `--access-log`: `METHOD PATH STATUS TIME` on stderr.
async fn access_log(req: Request, next: Next) -> Response {
    let start = Instant::now();
    let method = req.method().clone();
    let uri = req.uri().clone();
    let res = next.run(req).await;
    eprintln!(
        "{method} {uri} {} {:.3}ms",
        res.status().as_u16(),
        start.elapsed().as_secs_f64() * 1e3
    );
    res
}
