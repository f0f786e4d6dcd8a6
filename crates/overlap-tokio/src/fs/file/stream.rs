//! The streaming side of [`File`](super::File): its read-ahead buffer, the
//! bytes behind a write, the one operation in flight, and `AsyncRead`,
//! `AsyncSeek` and `AsyncWrite` on them (the offset: `cursor`; a dropped
//! file's operation: `leftover`).

use std::future::Future;
use std::io::{self, SeekFrom};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncSeek, AsyncWrite, ReadBuf};

use super::cursor::{Cursor, AT_END};
use super::File;
use crate::fs::support::{code, engine_err};
use crate::reactor::on_ring;

/// Bytes accepted by `poll_write` while a write was in flight: the write
/// in flight writes them after its own, as one write (write-behind), so
/// that many small writes (`io::copy`'s 8 KiB, a `BufWriter`'s) become few
/// large ones. Shared by the file and its write in flight; only one of them
/// runs at a time (the future runs when the file polls it, or alone once
/// the file is dropped), so the lock is never contended.
#[derive(Default)]
pub(super) struct Behind {
    pub(super) data: Vec<u8>,
    /// The write in flight will still write what is added: set when a write
    /// starts, cleared (under the lock) when it finishes with nothing left.
    open: bool,
}

pub(super) type WriteBehind = Arc<std::sync::Mutex<Behind>>;

pub(super) fn lock(b: &WriteBehind) -> std::sync::MutexGuard<'_, Behind> {
    b.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether bytes wait behind with no write in flight to write them: the
/// rest of a write that failed, for the next write or flush to try again.
pub(super) fn has_pending(b: &WriteBehind) -> bool {
    let b = lock(b);
    !b.open && !b.data.is_empty()
}

pub(super) struct Inner {
    pub(super) state: State,
    /// Bytes waiting for the write in flight (see [`Behind`]).
    pub(super) behind: WriteBehind,
    /// A write's error seen while doing something else: returned by the
    /// next write or flush.
    pub(super) last_write_err: Option<io::Error>,
    /// The result of the last seek (what `poll_complete` reports when idle).
    pub(super) pos: u64,
    /// A seek was done in `start_seek` (no operation): its `poll_complete`
    /// takes a unit of tokio's cooperative budget.
    pub(super) seek_done_here: bool,
    /// The operation in flight (`State::Busy`) is a write: a dropped file
    /// finishes it (a read or a seek in flight is let go: the engine keeps
    /// its buffer until the kernel is done, and nothing acknowledged waits
    /// on it).
    pub(super) busy_writing: bool,
}

/// Bytes read ahead: `data[start..end]` not yet handed to the reader. The
/// cursor is past them, as the kernel's offset would be. The vector keeps
/// its length between operations, so that a read needs to zero only what
/// it adds to it.
#[derive(Default)]
pub(super) struct Buf {
    data: Vec<u8>,
    start: usize,
    end: usize,
}

impl Buf {
    pub(super) fn new(data: Vec<u8>, end: usize) -> Buf {
        debug_assert!(end <= data.len(), "the bytes read ahead lie in the vector");
        Buf {
            data,
            start: 0,
            end,
        }
    }
    pub(super) fn remaining(&self) -> usize {
        debug_assert!(
            self.start <= self.end && self.end <= self.data.len(),
            "start <= end <= the vector's length"
        );
        self.end - self.start
    }
    fn copy_to(&mut self, dst: &mut ReadBuf<'_>) {
        let n = self.remaining().min(dst.remaining());
        dst.put_slice(&self.data[self.start..self.start + n]);
        self.start += n;
        debug_assert!(
            self.start <= self.end,
            "never more handed out than was read ahead"
        );
        if self.start == self.end {
            self.discard();
        }
    }
    /// Drops the unread bytes (keeping the allocation); returns how many.
    pub(super) fn discard(&mut self) -> usize {
        let n = self.remaining();
        self.start = 0;
        self.end = 0;
        n
    }
}

/// The operation in flight. Its engine futures are each polled through
/// `on_ring` inside it (not the whole, so that no `on_ring` nests).
pub(super) type OpFuture = Pin<Box<dyn Future<Output = (Operation, Buf)> + Send>>;

pub(super) enum State {
    Idle(Buf),
    Busy(OpFuture),
}

pub(super) enum Operation {
    Read(io::Result<usize>),
    Write(io::Result<()>),
    Seek(io::Result<u64>),
}

pub(super) const PENDING_MSG: &str =
    "other file operation is pending, call poll_complete before start_seek";

impl Inner {
    pub(super) async fn complete_inflight(&mut self) {
        std::future::poll_fn(|cx| self.poll_complete_inflight(cx)).await;
    }

    fn poll_complete_inflight(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        match ready!(self.poll_flush(cx)) {
            Err(e) => {
                self.last_write_err = Some(e);
                Poll::Ready(())
            }
            Ok(()) => Poll::Ready(()),
        }
    }

    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(e) = self.last_write_err.take() {
            return Poll::Ready(Err(e));
        }
        let State::Busy(fut) = &mut self.state else {
            return Poll::Ready(Ok(()));
        };
        let (op, buf) = ready!(fut.as_mut().poll(cx));
        debug_assert_eq!(
            matches!(op, Operation::Write(_)),
            self.busy_writing,
            "the flag busy_writing says whether the operation in flight is a write"
        );
        self.state = State::Idle(buf);
        match op {
            Operation::Write(res) => Poll::Ready(res),
            Operation::Seek(Ok(pos)) => {
                self.pos = pos;
                Poll::Ready(Ok(()))
            }
            Operation::Read(_) | Operation::Seek(Err(_)) => Poll::Ready(Ok(())),
        }
    }
}

/// Reads up to `len` bytes at the cursor into `buf`'s vector, and moves the
/// cursor past what it read.
///
/// `after_miss`: the caller's page-cache attempt at the cursor just missed,
/// so the engine does not make another first.
async fn read_op(
    file: overlapped::File,
    cursor: Arc<Cursor>,
    mut buf: Buf,
    len: usize,
    after_miss: bool,
) -> (Operation, Buf) {
    // Started only with nothing left read ahead.
    debug_assert_eq!(buf.remaining(), 0, "a read starts with nothing read ahead");
    buf.discard();
    let _turn = turn!(cursor);
    let offset = match cursor.resolve(&file).await {
        Ok(o) => o,
        Err(e) => return (Operation::Read(Err(e)), buf),
    };
    let mut data = std::mem::take(&mut buf.data);
    // Zero-filled only where it grows: the rest is initialised already.
    if data.len() < len {
        data.resize(len, 0);
    } else {
        data.truncate(len);
    }
    let op = if after_miss {
        file.read_at_after_miss(data, offset)
    } else {
        file.read_at(data, offset)
    };
    let (res, data) = on_ring(op).await;
    match res {
        Ok(n) => {
            debug_assert!(
                n <= len && data.len() == len,
                "a read returns at most the bytes asked for, in the vector lent"
            );
            cursor.set(offset + n as u64);
            (Operation::Read(Ok(n)), Buf::new(data, n))
        }
        Err(e) => (
            Operation::Read(Err(engine_err(e, code::NOT_OPENED))),
            Buf::new(data, 0),
        ),
    }
}

/// Writes all of `data` at the cursor (at the end of the file when
/// appending), after giving back `unread` bytes read ahead, then whatever
/// `behind` collected meanwhile, until nothing is left. Each write's range
/// is taken from the cursor when it starts (the first in the first poll,
/// unless a clone's operation has the turn): a later write starts after
/// it. The first error ends the chain and is reported (by the next write or
/// flush); the bytes not written go back behind, first, where the next
/// write or flush tries them again: acknowledged bytes are never dropped.
async fn write_op(
    file: overlapped::File,
    cursor: Arc<Cursor>,
    mut data: Vec<u8>,
    unread: usize,
    behind: WriteBehind,
) -> (Operation, Buf) {
    let mut unread = unread;
    loop {
        let (res, written, mut back) = write_one(&file, &cursor, data, unread).await;
        unread = 0;
        let mut b = lock(&behind);
        debug_assert!(
            b.data.is_empty() || b.open,
            "bytes wait behind a write only while it is open to them"
        );
        if let Err(e) = res {
            debug_assert!(
                written <= back.len(),
                "the kernel took at most the bytes handed to it"
            );
            b.open = false;
            // What the kernel did not take, then what came meanwhile.
            back.drain(..written.min(back.len()));
            back.extend_from_slice(&b.data);
            b.data = back;
            drop(b);
            return (Operation::Write(Err(e)), Buf::default());
        }
        if b.data.is_empty() {
            b.open = false;
            drop(b);
            return (Operation::Write(Ok(())), Buf::new(back, 0));
        }
        // The bytes behind go next; the buffer just written takes their
        // place, for what comes meanwhile.
        let mut spare = back;
        spare.clear();
        data = std::mem::replace(&mut b.data, spare);
    }
}

/// The bytes of a vector from `start` on, as a write's buffer: what is left
/// of a write cut short.
struct Suffix {
    vec: Vec<u8>,
    start: usize,
}

// SAFETY: the bytes are the vector's heap allocation, which does not move
// when the value moves and is not resized while the value is lent to an
// operation; `start <= vec.len()` (asserted where it is made).
unsafe impl overlapped::IoBuf for Suffix {
    fn stable_ptr(&self) -> *const u8 {
        self.vec[self.start..].as_ptr()
    }
    fn bytes_len(&self) -> usize {
        self.vec.len() - self.start
    }
}

/// Writes all of `data` from `offset` (at the end when appending), one
/// write at a time; returns the result, how many bytes the kernel took
/// (all, or those before the error) and the buffer.
async fn write_counted(
    file: &overlapped::File,
    data: Vec<u8>,
    offset: u64,
) -> (io::Result<()>, usize, Vec<u8>) {
    let mut buf = Suffix {
        vec: data,
        start: 0,
    };
    while buf.start < buf.vec.len() {
        let at = offset + buf.start as u64;
        let (res, back) = on_ring(file.write_at(buf, at)).await;
        buf = back;
        match res {
            Ok(0) => {
                let e = io::Error::from(io::ErrorKind::WriteZero);
                return (Err(e), buf.start, buf.vec);
            }
            Ok(n) => {
                debug_assert!(
                    n <= buf.vec.len() - buf.start,
                    "the kernel wrote more than asked"
                );
                buf.start = (buf.start + n).min(buf.vec.len());
            }
            Err(e) => return (Err(engine_err(e, code::NOT_OPENED)), buf.start, buf.vec),
        }
    }
    (Ok(()), buf.start, buf.vec)
}

/// One write of `data` at the cursor (see [`write_op`]): the result, how
/// many bytes were written, the buffer.
async fn write_one(
    file: &overlapped::File,
    cursor: &Cursor,
    data: Vec<u8>,
    unread: usize,
) -> (io::Result<()>, usize, Vec<u8>) {
    let turn = turn!(cursor);
    cursor.unread(unread);
    let len = data.len() as u64;
    if file.is_append() {
        // O_APPEND: the kernel writes at the end whatever the offset, and
        // the position is then the end of the file. The turn is held until
        // then, as the kernel's position lock.
        let (res, written, data) = write_counted(file, data, 0).await;
        debug_assert!(written as u64 <= len, "an append writes at most its bytes");
        if written > 0 {
            cursor.set(AT_END);
        }
        drop(turn);
        return (res, written, data);
    }
    let offset = match cursor.take(file, len).await {
        Ok(o) => o,
        Err(e) => return (Err(e), 0, data),
    };
    drop(turn);
    let (res, written, data) = write_counted(file, data, offset).await;
    debug_assert!(
        written as u64 <= len,
        "a write takes at most its range from the cursor"
    );
    if res.is_err() {
        // The position covers only what was written.
        cursor.give_back(offset + len, offset + written as u64);
    }
    (res, written, data)
}

/// Where a seek to `pos` lands when that is known without the file's
/// length and valid; `None` when it needs the length (`SeekFrom::End`, or a
/// cursor at the end of an appended file) or is invalid (the asynchronous
/// seek then reports the error).
fn seek_target_now(cursor: &Cursor, pos: SeekFrom) -> Option<u64> {
    let n = match pos {
        SeekFrom::Start(n) => n,
        SeekFrom::Current(d) => {
            let cur = cursor.get();
            if cur == AT_END {
                return None;
            }
            cur.checked_add_signed(d)?
        }
        SeekFrom::End(_) => return None,
    };
    (n <= i64::MAX as u64).then_some(n)
}

/// Moves the cursor as `pos` says, after giving back `unread` bytes read
/// ahead (so that `SeekFrom::Current` counts from the position the reader
/// has reached).
async fn seek_op(
    file: overlapped::File,
    cursor: Arc<Cursor>,
    pos: SeekFrom,
    unread: usize,
    buf: Buf,
) -> (Operation, Buf) {
    let _turn = turn!(cursor);
    cursor.unread(unread);
    // As std's: Linux's `lseek` says EINVAL (std's message here), Windows'
    // `SetFilePointerEx` ERROR_NEGATIVE_SEEK.
    let invalid = || {
        #[cfg(windows)]
        return io::Error::from_raw_os_error(code::NEGATIVE_SEEK);
        #[cfg(not(windows))]
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "invalid seek to a negative or overflowing position",
        )
    };
    let target = match pos {
        SeekFrom::Start(n) => Ok(Some(n)),
        SeekFrom::Current(d) => cursor
            .resolve(&file)
            .await
            .map(|cur| cur.checked_add_signed(d)),
        SeekFrom::End(d) => on_ring(file.stat())
            .await
            .map_err(|e| engine_err(e, code::NOT_OPENED))
            .map(|st| st.len.checked_add_signed(d)),
    };
    let res = match target {
        Ok(Some(n)) if n <= i64::MAX as u64 => {
            cursor.set(n);
            Ok(n)
        }
        Ok(_) => Err(invalid()),
        Err(e) => Err(e),
    };
    (Operation::Seek(res), buf)
}

impl File {
    /// Where the next read would start, when that is known without waiting:
    /// nothing in flight, nothing read ahead, a cursor no clone moves and not
    /// at an append's unknown end. For readers that know how far the file
    /// goes (`tower_http`'s backend, from the length its response promised).
    #[cfg_attr(not(feature = "tower-http"), allow(dead_code))]
    pub(crate) fn next_read_offset(&mut self) -> Option<u64> {
        let inner = self.inner.get_mut();
        match &inner.state {
            State::Idle(buf) if buf.remaining() == 0 && !self.cursor.is_shared() => {
                let pos = self.cursor.get();
                (pos != AT_END).then_some(pos)
            }
            _ => None,
        }
    }
}

/// The page cache first, straight into the caller's buffer: no operation,
/// no copy (`read_cached_at_uninit`, one `preadv2(RWF_NOWAIT)` on this
/// thread), only with the cursor ours alone (a clone's read may hold it).
/// `Ready(None)`: answered (`dst` filled, the cursor moved);
/// `Ready(Some(tried))`: the engine must read, `tried` saying whether the
/// cache just missed at the cursor. A read answered here uses a unit of
/// tokio's cooperative budget, as one through the engine (`on_ring`) or
/// `tokio::fs`'s blocking pool does: with the budget spent, `Pending`
/// (woken at once).
fn poll_cached(
    file: &overlapped::File,
    cursor: &Cursor,
    cx: &mut Context<'_>,
    dst: &mut ReadBuf<'_>,
    len: usize,
) -> Poll<Option<bool>> {
    debug_assert!(
        len > 0 && len <= dst.remaining(),
        "a read asks for room it has"
    );
    let pos = cursor.get();
    if cursor.is_shared() || pos == AT_END {
        return Poll::Ready(Some(false));
    }
    let coop = ready!(tokio::task::coop::poll_proceed(cx));
    // SAFETY: only written (by the kernel), never de-initialised, as
    // `unfilled_mut` requires.
    let spare = unsafe { &mut dst.unfilled_mut()[..len] };
    if let Ok(Some(n)) = file.read_cached_at_uninit(spare, pos) {
        debug_assert!(n <= len, "a cached read fills at most the room given");
        // SAFETY: the kernel wrote the first `n` bytes.
        unsafe { dst.assume_init(n) };
        dst.advance(n);
        cursor.set(pos + n as u64);
        coop.made_progress();
        return Poll::Ready(None);
    }
    // Not in the cache (or an error, which the operation reports as
    // before): read through the engine.
    Poll::Ready(Some(true))
}

impl AsyncRead for File {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        dst: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        let inner = me.inner.get_mut();
        loop {
            match &mut inner.state {
                State::Idle(buf) => {
                    if buf.remaining() > 0 || dst.remaining() == 0 {
                        buf.copy_to(dst);
                        return Poll::Ready(Ok(()));
                    }
                    let len = dst.remaining().min(me.max_buf_size);
                    debug_assert!(
                        len > 0,
                        "a read asks for a byte at least: zero reads as the end"
                    );
                    let Some(tried) = ready!(poll_cached(&me.file, &me.cursor, cx, dst, len))
                    else {
                        return Poll::Ready(Ok(()));
                    };
                    let buf = std::mem::take(buf);
                    let fut = read_op(me.file.clone(), me.cursor.clone(), buf, len, tried);
                    inner.state = State::Busy(Box::pin(fut));
                    inner.busy_writing = false;
                }
                State::Busy(fut) => {
                    let (op, buf) = ready!(fut.as_mut().poll(cx));
                    debug_assert_eq!(
                        matches!(op, Operation::Write(_)),
                        inner.busy_writing,
                        "the flag busy_writing says whether the operation in flight is a write"
                    );
                    inner.state = State::Idle(buf);
                    match op {
                        Operation::Read(Ok(n)) => {
                            if let State::Idle(buf) = &mut inner.state {
                                debug_assert_eq!(
                                    buf.remaining(),
                                    n,
                                    "a read's bytes are what it read ahead"
                                );
                                buf.copy_to(dst);
                            }
                            return Poll::Ready(Ok(()));
                        }
                        Operation::Read(Err(e)) => return Poll::Ready(Err(e)),
                        Operation::Write(Ok(())) => {}
                        Operation::Write(Err(e)) => inner.last_write_err = Some(e),
                        Operation::Seek(res) => {
                            if let Ok(pos) = res {
                                inner.pos = pos;
                            }
                        }
                    }
                }
            }
        }
    }
}

impl AsyncSeek for File {
    fn start_seek(self: Pin<&mut Self>, pos: SeekFrom) -> io::Result<()> {
        let me = self.get_mut();
        let inner = me.inner.get_mut();
        match &mut inner.state {
            State::Busy(_) => Err(io::Error::other(PENDING_MSG)),
            State::Idle(buf) => {
                // Bytes read ahead are given back: the cursor returns to
                // the position the reader has reached.
                let unread = buf.discard();
                if !me.cursor.is_shared() {
                    // Nothing else moves an unshared cursor and no
                    // operation is in flight: a seek that needs no file
                    // length is done here, as `lseek` would be, and
                    // `poll_complete` reports it.
                    me.cursor.unread(unread);
                    if let Some(n) = seek_target_now(&me.cursor, pos) {
                        me.cursor.set(n);
                        inner.pos = n;
                        inner.seek_done_here = true;
                        return Ok(());
                    }
                    let buf = std::mem::take(buf);
                    let fut = seek_op(me.file.clone(), me.cursor.clone(), pos, 0, buf);
                    inner.state = State::Busy(Box::pin(fut));
                    inner.busy_writing = false;
                    return Ok(());
                }
                let buf = std::mem::take(buf);
                let fut = seek_op(me.file.clone(), me.cursor.clone(), pos, unread, buf);
                inner.state = State::Busy(Box::pin(fut));
                inner.busy_writing = false;
                Ok(())
            }
        }
    }

    fn poll_complete(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<u64>> {
        let inner = self.get_mut().inner.get_mut();
        loop {
            let State::Busy(fut) = &mut inner.state else {
                if inner.seek_done_here {
                    // A seek done in `start_seek` uses a unit of tokio's
                    // budget when reported, as `tokio::fs`'s (a blocking
                    // task) does: a loop of seeks and cached reads yields.
                    let coop = ready!(tokio::task::coop::poll_proceed(cx));
                    coop.made_progress();
                    inner.seek_done_here = false;
                }
                return Poll::Ready(Ok(inner.pos));
            };
            let (op, buf) = ready!(fut.as_mut().poll(cx));
            debug_assert_eq!(
                matches!(op, Operation::Write(_)),
                inner.busy_writing,
                "the flag busy_writing says whether the operation in flight is a write"
            );
            inner.state = State::Idle(buf);
            match op {
                Operation::Read(_) | Operation::Write(Ok(())) => {}
                Operation::Write(Err(e)) => inner.last_write_err = Some(e),
                Operation::Seek(res) => {
                    if let Ok(pos) = res {
                        inner.pos = pos;
                    }
                    return Poll::Ready(res);
                }
            }
        }
    }
}

impl File {
    /// Starts writing what `fill` appends to the buffer (at most the room
    /// it is given, `max_buf_size` bytes in all), after the operation in
    /// flight; or, while a write of this file is in flight, adds it to the
    /// bytes that write will write next (write-behind; not for a cursor
    /// shared with clones, whose writes take their ranges as they start,
    /// nor for O_DIRECT, whose lengths the caller aligns).
    fn poll_write_with(
        &mut self,
        cx: &mut Context<'_>,
        fill: impl FnOnce(&mut Vec<u8>, usize) -> usize,
    ) -> Poll<io::Result<usize>> {
        if let Some(e) = self.inner.get_mut().last_write_err.take() {
            return Poll::Ready(Err(e));
        }
        loop {
            let inner = self.inner.get_mut();
            let fut = match &mut inner.state {
                State::Busy(fut) => fut,
                State::Idle(_) if has_pending(&inner.behind) => {
                    // The rest of a failed write goes first, in order.
                    self.start_pending(cx);
                    continue;
                }
                State::Idle(buf) => {
                    let buf = std::mem::take(buf);
                    return Poll::Ready(Ok(self.start_write(cx, buf, fill)));
                }
            };
            // A unit of tokio's budget per `poll_write` that waits on the
            // operation in flight, as `tokio::fs`'s (which polls its
            // blocking task), taken only if it gets on.
            let coop = ready!(tokio::task::coop::poll_proceed(cx));
            let Poll::Ready((op, buf)) = fut.as_mut().poll(cx) else {
                if self.write_behind && !self.cursor.is_shared() {
                    let mut b = lock(&inner.behind);
                    let room = self.max_buf_size.saturating_sub(b.data.len());
                    if b.open && room > 0 {
                        coop.made_progress();
                        let n = fill(&mut b.data, room);
                        debug_assert!(
                            n <= room && b.data.len() <= self.max_buf_size,
                            "the bytes behind stay within max_buf_size"
                        );
                        return Poll::Ready(Ok(n));
                    }
                }
                return Poll::Pending;
            };
            coop.made_progress();
            debug_assert_eq!(
                matches!(op, Operation::Write(_)),
                inner.busy_writing,
                "the flag busy_writing says whether the operation in flight is a write"
            );
            inner.state = State::Idle(buf);
            match op {
                Operation::Write(res) => res?,
                Operation::Seek(Ok(pos)) => inner.pos = pos,
                Operation::Read(_) | Operation::Seek(Err(_)) => {}
            }
        }
    }

    /// Starts writing the bytes left behind by a failed write (the file is
    /// idle): they are tried again, before anything written after them.
    pub(super) fn start_pending(&mut self, cx: &mut Context<'_>) {
        let inner = self.inner.get_mut();
        debug_assert!(
            matches!(inner.state, State::Idle(_)),
            "bytes left behind are started on an idle file"
        );
        let pending = std::mem::take(&mut lock(&inner.behind).data);
        let buf = match &mut inner.state {
            State::Idle(buf) => std::mem::take(buf),
            State::Busy(_) => {
                // Never so (the caller checked); put them back.
                lock(&inner.behind).data = pending;
                return;
            }
        };
        self.start_write(cx, buf, move |data, _room| {
            *data = pending;
            data.len()
        });
    }

    /// Starts writing what `fill` appends to `buf`, the idle file's (see
    /// [`poll_write_with`](Self::poll_write_with)); returns how much.
    fn start_write(
        &mut self,
        cx: &mut Context<'_>,
        mut buf: Buf,
        fill: impl FnOnce(&mut Vec<u8>, usize) -> usize,
    ) -> usize {
        let inner = self.inner.get_mut();
        debug_assert!(
            matches!(inner.state, State::Idle(_)),
            "a write starts on an idle file"
        );
        // Bytes read ahead are given back first, as a seek.
        let unread = buf.discard();
        let mut data = std::mem::take(&mut buf.data);
        data.clear();
        let n = fill(&mut data, self.max_buf_size);
        debug_assert_eq!(data.len(), n, "the write is what fill reports it added");
        if self.write_behind {
            lock(&inner.behind).open = true;
        }
        let fut = write_op(
            self.file.clone(),
            self.cursor.clone(),
            data,
            unread,
            inner.behind.clone(),
        );
        // Outside tokio's cooperative budget: the write starts now (a spent
        // budget must not hold back bytes that `poll_write` acknowledges).
        // The budget is taken by the next `poll_write` while it is in
        // flight, as `tokio::fs` takes it when polling its blocking task.
        let mut fut: OpFuture = Box::pin(tokio::task::coop::unconstrained(fut));
        inner.busy_writing = true;
        // Start the write now: its range is taken from the cursor and it
        // proceeds whether or not this file is polled again (as tokio's
        // background write).
        match fut.as_mut().poll(cx) {
            Poll::Ready((op, buf)) => {
                inner.state = State::Idle(buf);
                if let Operation::Write(Err(e)) = op {
                    inner.last_write_err = Some(e);
                }
            }
            Poll::Pending => inner.state = State::Busy(fut),
        }
        n
    }
}

impl AsyncWrite for File {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        src: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().poll_write_with(cx, |data, room| {
            let n = src.len().min(room);
            data.extend_from_slice(&src[..n]);
            n
        })
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().poll_write_with(cx, |data, room| {
            let mut n = 0;
            for b in bufs {
                let take = b.len().min(room - n);
                if take == 0 && room == n {
                    break;
                }
                data.extend_from_slice(&b[..take]);
                n += take;
            }
            debug_assert!(n <= room, "a vectored write takes at most the room given");
            n
        })
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        let inner = me.inner.get_mut();
        // An error not yet reported comes first; after it, the bytes a
        // failed write left behind are tried again.
        if inner.last_write_err.is_none()
            && matches!(inner.state, State::Idle(_))
            && has_pending(&inner.behind)
        {
            me.start_pending(cx);
        }
        me.inner.get_mut().poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_flush(cx)
    }
}
