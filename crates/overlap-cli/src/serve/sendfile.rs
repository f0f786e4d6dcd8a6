//! Bodies sent without a copy (`--io overlap`, Linux), as nginx's
//! `sendfile on`: a response that is a file, or one range of it, whose
//! pages the page cache holds goes from the page cache to the socket with
//! `sendfile(2)`, instead of being read into memory (a copy) and written
//! to the socket (a second copy).
//!
//! hyper writes only the bytes a body gives it, so the body gives it
//! stand-ins: slices of [`STAND_IN`], a static block no other data lives
//! in, as many bytes as the file region holds, in order. The connection's
//! writer ([`poll_write`]) knows them by their address: the bytes before
//! them (the response's head) go out with `MSG_MORE` (held for the body,
//! one segment for both when they fit), and each stand-in byte is a byte
//! of the connection's oldest region, sent by `sendfile`. hyper counts
//! them against the `Content-Length` as any body's. A stand-in with no
//! region to send is an error that closes the connection: as long as
//! hyper queues the body's bytes (below), zeros never reach a client.
//!
//! The file is `ServeDir`'s own: the backend (`super::backend`) keeps a
//! duplicate of the descriptor of the file it last opened for the request
//! being answered. Only a response `ServeDir` made from that file is sent
//! so ([`zero_copy`]): `200` or
//! `206` with one range, no `Content-Encoding`, every page in the page
//! cache (`cachestat`), for `sendfile` would otherwise wait for the device
//! on the runtime's thread; the rest goes through `ServeDir`'s body (the
//! engine's reads). A body that takes longer than [`RECHECK`] to send (a
//! large file, a slow client) has each piece checked again before it is
//! sent: a piece evicted meanwhile is asked of the device
//! (`posix_fadvise(WILLNEED)`, which waits for no read) and sent once the
//! page cache holds it, the writer waiting [`RETRY`] at a time. A page
//! evicted between a check and its send is read by `sendfile` on the
//! runtime's thread: a window of [`RECHECK`] at most.
//!
//! hyper must queue body bytes rather than copy them into its own buffer
//! (its vectored writes, which the connection sets): copied stand-ins would
//! no longer be known by their address.

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, StatusCode};
use axum::response::Response;
use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

/// How long the page cache's answer for a region holds before the next
/// piece sent is checked again.
const RECHECK: Duration = Duration::from_millis(2);

/// How long a writer waits before it looks again for a piece asked of the
/// device.
const RETRY: Duration = Duration::from_millis(1);

/// Bodies given to `sendfile` since the server started.
static BODIES: AtomicU64 = AtomicU64::new(0);

/// How many bodies were given to `sendfile` (said when the server stops).
pub fn bodies() -> u64 {
    BODIES.load(Ordering::Relaxed)
}

/// What bodies sent by `sendfile` give hyper in place of their bytes.
static STAND_IN: [u8; 64 << 10] = [0; 64 << 10];

/// Whether `buf` lies within [`STAND_IN`].
fn is_stand_in(buf: &[u8]) -> bool {
    let (start, end) = (
        STAND_IN.as_ptr() as usize,
        STAND_IN.as_ptr() as usize + STAND_IN.len(),
    );
    let p = buf.as_ptr() as usize;
    !buf.is_empty() && p >= start && p + buf.len() <= end
}

/// A part of a file a response sends with `sendfile`.
#[derive(Debug)]
struct Region {
    fd: OwnedFd,
    offset: u64,
    left: u64,
    /// When the page cache was last found to hold what is left.
    checked: Instant,
    /// The writer's wait for a piece asked of the device.
    retry: Option<Pin<Box<Sleep>>>,
}

/// A connection's regions, oldest first: shared by its responses' bodies
/// (which add theirs when hyper first asks them for bytes) and its writer.
#[derive(Clone, Debug, Default)]
pub struct Regions(Arc<Mutex<VecDeque<Region>>>);

impl Regions {
    fn lock(&self) -> MutexGuard<'_, VecDeque<Region>> {
        // Nothing panics with the lock held; a poisoned queue is still whole.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// `res` with its body sent from `fd` by `sendfile`, when `res` is
/// `ServeDir`'s response from that file and the page cache holds the part
/// it sends; else `res` as it is.
pub fn zero_copy(res: Response, fd: OwnedFd, regions: &Regions) -> Response {
    let Some((offset, len)) = extent(&res) else {
        return res;
    };
    if !crate::sys::all_cached(fd.as_fd(), offset, len) {
        return res;
    }
    let region = Region {
        fd,
        offset,
        left: len,
        checked: Instant::now(),
        retry: None,
    };
    BODIES.fetch_add(1, Ordering::Relaxed);
    let body = StandIns {
        region: Some(region),
        left: len,
        regions: regions.clone(),
    };
    // `ServeDir`'s body, never polled, reads nothing.
    res.map(|_| Body::new(body))
}

/// Where in its file `res`'s body begins and how long it is: `200` (the
/// whole file) or `206` with one range, not encoded, not empty.
fn extent(res: &Response) -> Option<(u64, u64)> {
    let headers = res.headers();
    if headers.contains_key(header::CONTENT_ENCODING) {
        return None;
    }
    let len: u64 = headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()?;
    let offset = match res.status() {
        StatusCode::OK => 0,
        StatusCode::PARTIAL_CONTENT => {
            // `bytes FIRST-LAST/SIZE`
            let range = headers.get(header::CONTENT_RANGE)?.to_str().ok()?;
            let (first, last) = range
                .strip_prefix("bytes ")?
                .split_once('/')?
                .0
                .split_once('-')?;
            let (first, last): (u64, u64) = (first.parse().ok()?, last.parse().ok()?);
            (last.checked_sub(first)? + 1 == len).then_some(first)?
        }
        _ => return None,
    };
    (len > 0).then_some((offset, len))
}

/// A body of stand-ins for the bytes of one region.
struct StandIns {
    /// Given to the connection's writer when hyper first asks for bytes.
    region: Option<Region>,
    /// Stand-in bytes still to give.
    left: u64,
    regions: Regions,
}

impl http_body::Body for StandIns {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let me = self.get_mut();
        if let Some(region) = me.region.take() {
            me.regions.lock().push_back(region);
        }
        if me.left == 0 {
            return Poll::Ready(None);
        }
        let n = me.left.min(STAND_IN.len() as u64) as usize;
        me.left -= n as u64;
        Poll::Ready(Some(Ok(http_body::Frame::data(Bytes::from_static(
            &STAND_IN[..n],
        )))))
    }

    fn is_end_stream(&self) -> bool {
        self.left == 0
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.left)
    }
}

/// A write of `bufs` to `tcp` when stand-ins are among them (`None`: none
/// are, the caller writes them): the bytes before the first stand-in with
/// `MSG_MORE`, or, when `bufs` begins with stand-ins, that many bytes of
/// the oldest region by `sendfile`. As `poll_write_vectored`, the bytes
/// written, which may be fewer than given.
pub fn poll_write(
    tcp: &TcpStream,
    regions: &Regions,
    cx: &mut Context<'_>,
    bufs: &[io::IoSlice<'_>],
) -> Option<Poll<io::Result<usize>>> {
    let first = bufs.iter().position(|b| is_stand_in(b))?;
    if first == 0 && !piece_cached(regions, cx, bufs[0].len()) {
        return Some(Poll::Pending);
    }
    Some(loop {
        match tcp.poll_write_ready(cx) {
            Poll::Pending => break Poll::Pending,
            Poll::Ready(Err(e)) => break Poll::Ready(Err(e)),
            Poll::Ready(Ok(())) => {}
        }
        let res = tcp.try_io(Interest::WRITABLE, || {
            if first > 0 {
                send_more(tcp, &bufs[..first])
            } else {
                send_region(tcp, regions, bufs[0].len())
            }
        });
        match res {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            res => break Poll::Ready(res),
        }
    })
}

/// Whether the page cache holds the next `len` bytes (at most) of the
/// oldest region, checked again once [`RECHECK`] has passed; if not, they
/// are asked of the device and `cx` is woken after [`RETRY`]. `true` with
/// no region: the send reports that.
fn piece_cached(regions: &Regions, cx: &mut Context<'_>, len: usize) -> bool {
    let mut queue = regions.lock();
    let Some(region) = queue.front_mut() else {
        return true;
    };
    if region.checked.elapsed() < RECHECK {
        return true;
    }
    let count = (len as u64).min(region.left);
    if crate::sys::all_cached(region.fd.as_fd(), region.offset, count) {
        region.checked = Instant::now();
        region.retry = None;
        return true;
    }
    crate::sys::advise_willneed(region.fd.as_fd(), region.offset, count);
    let at = Instant::now() + RETRY;
    let retry = match &mut region.retry {
        Some(retry) => {
            retry.as_mut().reset(at);
            retry
        }
        None => region.retry.insert(Box::pin(tokio::time::sleep_until(at))),
    };
    // The timer was just set ahead: polling it registers `cx`'s waker, and
    // the send waits. (Were it ready, the piece would be sent and read by
    // `sendfile` on this thread.)
    retry.as_mut().poll(cx).is_ready()
}

/// `sendmsg(bufs, MSG_MORE)`: more follows at once (the body).
fn send_more(tcp: &TcpStream, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
    // SAFETY: msghdr is plain old data; all-zero is a valid value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    // `IoSlice` is ABI-compatible with `iovec` on Unix (std's promise).
    msg.msg_iov = bufs.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = bufs.len() as _;
    // SAFETY: `msg` names `bufs`, live and only read during the call; the
    // descriptor is the connection's, open while `tcp` lives.
    let n = unsafe { libc::sendmsg(tcp.as_raw_fd(), &msg, libc::MSG_MORE | libc::MSG_NOSIGNAL) };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// Up to `len` bytes of the oldest region, by `sendfile`.
fn send_region(tcp: &TcpStream, regions: &Regions, len: usize) -> io::Result<usize> {
    let mut queue = regions.lock();
    let Some(region) = queue.front_mut() else {
        return Err(io::Error::other(
            "a body's stand-in bytes with no file region to send: closing the connection",
        ));
    };
    let count = (len as u64).min(region.left) as usize;
    debug_assert!(count > 0, "a region in the queue has bytes left");
    let mut offset = region.offset as libc::off_t;
    // SAFETY: both descriptors are open (the region owns its file's, `tcp`
    // the socket's); `offset` is a live local the kernel updates.
    let n = unsafe { libc::sendfile(tcp.as_raw_fd(), region.fd.as_raw_fd(), &mut offset, count) };
    let n = usize::try_from(n).map_err(|_| io::Error::last_os_error())?;
    if n == 0 {
        // The file ends before the length the response announced (it
        // shrank): the body cannot be completed.
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the file ended before the body's length: closing the connection",
        ));
    }
    region.offset += n as u64;
    region.left -= n as u64;
    if region.left == 0 {
        queue.pop_front();
    }
    Ok(n)
}
