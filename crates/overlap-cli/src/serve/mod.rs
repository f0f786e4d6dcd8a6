//! `overlap serve DIR`: a static file server (axum + tower-http's
//! `ServeDir`) whose file I/O is chosen with `--io`:
//!
//! - `overlap` (the default): `ServeDir` on `overlap_tokio::tower_http`'s
//!   backend, every open, `statx` and read through the engine;
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

use std::future::IntoFuture;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use clap::{Args, ValueEnum};
use overlap_tokio::tower_http::OverlapBackend;
use tower_http::services::ServeDir;

mod blocking;

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
    #[arg(long, default_value_t = overlap_tokio::tower_http::DEFAULT_MAX_UNCACHED_READS)]
    max_uncached_reads: usize,
}

/// `--io`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum IoMode {
    /// `std::fs` inside the async handlers, on the runtime's workers.
    Blocking,
    /// tower-http's default backend: `tokio::fs` (tokio's blocking pool).
    TokioFs,
    /// `overlap_tokio::tower_http::OverlapBackend`: the engine.
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
    let files = match args.io {
        IoMode::Overlap => Router::new().fallback_service(
            ServeDir::with_backend(
                &args.dir,
                OverlapBackend::new()
                    .with_read_size(chunk)
                    .with_max_uncached_reads(args.max_uncached_reads),
            )
            .with_buf_chunk_size(chunk),
        ),
        IoMode::TokioFs => {
            Router::new().fallback_service(ServeDir::new(&args.dir).with_buf_chunk_size(chunk))
        }
        IoMode::Blocking => Router::new().fallback_service(
            ServeDir::with_backend(&args.dir, blocking::BlockingBackend).with_buf_chunk_size(chunk),
        ),
    };
    let app = Router::new().route("/health", get(health)).merge(files);
    if args.access_log {
        app.layer(middleware::from_fn(access_log))
    } else {
        app
    }
}

async fn serve(args: ServeArgs) -> Result<()> {
    let addr = SocketAddr::new(args.bind, args.port);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::AddrInUse => anyhow::anyhow!(
                "cannot listen on {addr}: the port is in use (another server? choose one with --port)"
            ),
            _ => anyhow::Error::new(e).context(format!("cannot listen on {addr}")),
        })?;
    let local = listener.local_addr().context("the listening address")?;
    let app = router(&args);
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
        out.flush()?;
    }

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        match stop_signal().await {
            Ok(name) => eprintln!("{name}: shutting down"),
            Err(e) => eprintln!("error: cannot wait for signals ({e}): shutting down"),
        }
        let _ = stop_tx.send(true);
    });
    let mut graceful = stop_rx.clone();
    // TCP_NODELAY on every connection, as nginx sets it (`tcp_nodelay on`):
    // hyper writes a response's head and its first body chunk separately, and
    // with Nagle's algorithm the second waits for the client's delayed ACK
    // (40 ms), which capped a 4-connection load at ~100 requests/s.
    use axum::serve::ListenerExt as _;
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            eprintln!("warning: cannot set TCP_NODELAY on a connection: {e}");
        }
    });
    let server = axum::serve(listener, app).with_graceful_shutdown(async move {
        let _ = graceful.wait_for(|s| *s).await;
    });
    let mut deadline = stop_rx;
    tokio::select! {
        res = server.into_future() => res.context("the server failed")?,
        _ = async {
            let _ = deadline.wait_for(|s| *s).await;
            tokio::time::sleep(DRAIN).await;
        } => eprintln!("requests still in flight after {} s: closed", DRAIN.as_secs()),
    }
    Ok(())
}

/// Ctrl-C (SIGINT) or SIGTERM: the name of the one that came.
async fn stop_signal() -> std::io::Result<&'static str> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "Ctrl-C",
    })
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
