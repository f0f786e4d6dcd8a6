//! One connection of `overlap serve`, with nginx's three timeouts:
//!
//! - the header timeout (`client_header_timeout`): the whole head of a
//!   request must arrive within it, counted from the accept for the first
//!   request and from its first byte for the next ones;
//! - the keep-alive timeout (`keepalive_timeout`): how long a connection
//!   may stay idle after a response, before the first byte of the next
//!   request;
//! - the send timeout (`send_timeout`): how long a write to the client may
//!   make no progress (between two successive writes, not the whole
//!   response).
//!
//! A timeout closes the connection, as nginx does (it sends nothing: a
//! client that sends nothing reads nothing). While a response is being
//! made and the client takes what is written, no timeout runs.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};
use tower::ServiceExt as _;

/// The three timeouts of a connection.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    pub header: Duration,
    pub keepalive: Duration,
    pub send: Duration,
}

/// Where a connection is between requests; shared by its I/O (which
/// enforces the timeouts) and its requests (which say when one begins and
/// when its response is done).
#[derive(Debug)]
struct Phase {
    /// Requests whose responses are not done (their bodies not dropped).
    in_flight: usize,
    /// With none in flight: a request's head is awaited (the header
    /// timeout: the first request, or bytes of the next came), or nothing
    /// (the keep-alive timeout).
    head: bool,
    /// Since when that wait runs.
    since: Instant,
    /// The connection's task, while a read of it waits with no timeout
    /// (a response in flight, or a write waiting for the client): woken
    /// when that ends, so that the read arms the keep-alive or header
    /// timeout (nothing else may poll the read again: a connection left
    /// idle would never time out).
    reader: Option<Waker>,
}

type SharedPhase = Arc<Mutex<Phase>>;

fn lock(phase: &SharedPhase) -> MutexGuard<'_, Phase> {
    // Nothing panics with the lock held; a poisoned phase is still whole.
    phase.lock().unwrap_or_else(|p| p.into_inner())
}

/// A `TcpStream` whose reads fail with `TimedOut` when the header or the
/// keep-alive timeout passes, and whose writes fail so when the send
/// timeout passes without progress: hyper then closes the connection.
struct TimedIo {
    io: TcpStream,
    phase: SharedPhase,
    timeouts: Timeouts,
    read_timer: Pin<Box<Sleep>>,
    write_timer: Pin<Box<Sleep>>,
    /// Since when a write has been waiting for the client to read.
    write_blocked_since: Option<Instant>,
    /// The file regions its responses send by `sendfile`.
    #[cfg(target_os = "linux")]
    regions: super::sendfile::Regions,
}

impl TimedIo {
    fn new(io: TcpStream, phase: SharedPhase, timeouts: Timeouts) -> TimedIo {
        let far = Instant::now() + Duration::from_secs(86_400 * 365);
        TimedIo {
            io,
            phase,
            timeouts,
            read_timer: Box::pin(tokio::time::sleep_until(far)),
            write_timer: Box::pin(tokio::time::sleep_until(far)),
            write_blocked_since: None,
            #[cfg(target_os = "linux")]
            regions: super::sendfile::Regions::default(),
        }
    }

    /// A write of `bufs`, by `sendfile` for the bytes that stand in for a
    /// file region's (`sendfile`).
    fn poll_write_bufs(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        #[cfg(target_os = "linux")]
        if let Some(res) = super::sendfile::poll_write(&self.io, &self.regions, cx, bufs) {
            return self.after_write(cx, res);
        }
        let res = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.after_write(cx, res)
    }

    /// When a read waiting now times out: none while a response is in
    /// flight or a write waits (the send timeout rules then).
    fn read_deadline(&self) -> Option<Instant> {
        let p = lock(&self.phase);
        if p.in_flight > 0 || self.write_blocked_since.is_some() {
            return None;
        }
        let limit = if p.head {
            self.timeouts.header
        } else {
            self.timeouts.keepalive
        };
        Some(p.since + limit)
    }

    /// A write's outcome: progress ends the wait (and, after the last
    /// response, starts the keep-alive wait anew); `Pending` starts or
    /// continues it, and fails once it outlasted the send timeout.
    fn after_write<R>(
        &mut self,
        cx: &mut Context<'_>,
        res: Poll<io::Result<R>>,
    ) -> Poll<io::Result<R>> {
        if res.is_ready() {
            let was_blocked = self.write_blocked_since.take().is_some();
            let reader = {
                let mut p = lock(&self.phase);
                if p.in_flight == 0 && !p.head {
                    p.since = Instant::now();
                }
                // Taken only when it is woken: a response still in flight
                // keeps it for its own end (`InFlight`'s drop).
                if was_blocked && p.in_flight == 0 {
                    p.reader.take()
                } else {
                    None
                }
            };
            if let Some(w) = reader {
                w.wake();
            }
            return res;
        }
        let since = *self.write_blocked_since.get_or_insert_with(Instant::now);
        if expired(&mut self.write_timer, since + self.timeouts.send, cx) {
            return Poll::Ready(Err(timed_out("send")));
        }
        Poll::Pending
    }
}

/// Whether `deadline` passed; if not, `timer` wakes the task then.
fn expired(timer: &mut Pin<Box<Sleep>>, deadline: Instant, cx: &mut Context<'_>) -> bool {
    if timer.deadline() != deadline {
        timer.as_mut().reset(deadline);
    }
    timer.as_mut().poll(cx).is_ready()
}

fn timed_out(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        format!("the {what} timeout passed"),
    )
}

impl AsyncRead for TimedIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut me.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    // The first byte of a request after an idle wait: the
                    // header timeout runs from here.
                    let mut p = lock(&me.phase);
                    if p.in_flight == 0 && !p.head {
                        p.head = true;
                        p.since = Instant::now();
                    }
                }
                return Poll::Ready(Ok(()));
            }
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => {}
        }
        match me.read_deadline() {
            Some(deadline) if expired(&mut me.read_timer, deadline, cx) => {
                let what = if lock(&me.phase).head {
                    "header"
                } else {
                    "keep-alive"
                };
                Poll::Ready(Err(timed_out(what)))
            }
            Some(_) => Poll::Pending,
            None => {
                // No timeout runs now; the end of what holds it off wakes
                // this read to arm one.
                lock(&me.phase).reader = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

impl AsyncWrite for TimedIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().poll_write_bufs(cx, &[io::IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().poll_write_bufs(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        let res = Pin::new(&mut me.io).poll_flush(cx);
        me.after_write(cx, res)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        let res = Pin::new(&mut me.io).poll_shutdown(cx);
        me.after_write(cx, res)
    }
}

/// A request in flight on its connection, from the call of the service
/// until its response's body is dropped (sent, or abandoned).
struct InFlight(SharedPhase);

impl InFlight {
    fn begin(phase: SharedPhase) -> InFlight {
        lock(&phase).in_flight += 1;
        InFlight(phase)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let reader = {
            let mut p = lock(&self.0);
            assert!(p.in_flight > 0, "a request ended twice");
            p.in_flight -= 1;
            if p.in_flight > 0 {
                return;
            }
            // The keep-alive wait begins (anew at each write still to go).
            p.head = false;
            p.since = Instant::now();
            p.reader.take()
        };
        // Outside the lock: the read arms the keep-alive timeout.
        if let Some(w) = reader {
            w.wake();
        }
    }
}

/// A response body that keeps its request counted in flight.
struct Tracked {
    body: Body,
    _in_flight: InFlight,
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// Sets `Content-Length` from a body of known length if the response has
/// none, as hyper does for a `GET` but not for a `HEAD` (whose response is
/// that of a `GET`, its body not sent): both get the same headers.
fn content_length(res: &mut axum::response::Response) {
    use axum::http::header::CONTENT_LENGTH;
    use http_body::Body as _;
    if res.headers().contains_key(CONTENT_LENGTH) {
        return;
    }
    if let Some(n) = res.body().size_hint().exact() {
        res.headers_mut().insert(CONTENT_LENGTH, n.into());
    }
}

/// Serves HTTP/1.1 on `tcp` with `app` until the client or a timeout
/// closes it; once `stop` turns true, closes it after the response in
/// flight (at once when idle).
pub async fn serve(
    tcp: TcpStream,
    app: Router,
    timeouts: Timeouts,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let phase = Arc::new(Mutex::new(Phase {
        in_flight: 0,
        head: true,
        since: Instant::now(),
        reader: None,
    }));
    let timed = TimedIo::new(tcp, phase.clone(), timeouts);
    #[cfg(target_os = "linux")]
    let regions = timed.regions.clone();
    let io = TokioIo::new(timed);
    let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let in_flight = InFlight::begin(phase.clone());
        // A `HEAD`'s body is never sent: no `sendfile` for it.
        #[cfg(target_os = "linux")]
        let head = req.method() == axum::http::Method::HEAD;
        let call = app.clone().oneshot(req);
        #[cfg(target_os = "linux")]
        let regions = regions.clone();
        async move {
            let mut res = call.await?;
            #[cfg(target_os = "linux")]
            if let Some(fd) = super::backend::take_opened().filter(|_| !head) {
                res = super::sendfile::zero_copy(res, fd, &regions);
            }
            content_length(&mut res);
            Ok::<_, Infallible>(res.map(|body| Tracked {
                body,
                _in_flight: in_flight,
            }))
        }
    });
    // Vectored writes: hyper queues body bytes instead of copying them into
    // its buffer, as `sendfile`'s stand-ins need (which also rules out
    // `pipeline_flush`).
    let conn = hyper::server::conn::http1::Builder::new()
        .writev(true)
        .serve_connection(io, service);
    let run = async move {
        tokio::pin!(conn);
        let mut stopping = false;
        loop {
            tokio::select! {
                // A timeout, a reset or a malformed request ends the
                // connection; there is no one to tell.
                _ = conn.as_mut() => break,
                _ = stop.wait_for(|s| *s), if !stopping => {
                    stopping = true;
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    };
    #[cfg(target_os = "linux")]
    super::backend::scope(run).await;
    #[cfg(not(target_os = "linux"))]
    run.await;
}
