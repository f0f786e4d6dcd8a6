//! Verdicts and their explanations.
//!
//! [`verdict`] applies the rules; [`explain`] says why in words. The words
//! are data: [`TEXTS`] is a table of templates, each with the key it
//! answers and the conditions under which it applies. A template's
//! `{name}` is a figure of the measurement (see [`Ctx::figure`]) or, failing
//! that, another key of the table, filled in the same way.

use overlap::DriverKind;

use super::modes::Measurement;
use super::plan::{Alloc, Api, Mode, ReadKind, WriteKind};

/// The share (9/10) of requests completing inline, or of the completion
/// time spent queueing, at or above which the verdict is "sync".
const SYNC_SHARE: (u128, u128) = (9, 10);

/// The verdict rule in words, as the probe prints it before the first mode
/// and as the README states it (a test checks that both say exactly this,
/// and that it names [`SYNC_SHARE`]).
pub(crate) const RULE: &str = "kernel-workers if any io_uring worker thread (iou-wrk) did work \
    during the mode; else sync if 90% or more of the requests were already done when submission \
    returned, or if queueing took 90% or more of the time to the last completion; else async \
    (truly asynchronous: the submitter went on while the kernel did the I/O)";

/// `part` is at least [`SYNC_SHARE`] of `whole` (exact integer arithmetic).
fn most_of(part: u128, whole: u128) -> bool {
    part * SYNC_SHARE.1 >= whole * SYNC_SHARE.0
}

/// The three answers to "did it overlap?".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// The submitter went on while the kernel did the I/O.
    Async,
    /// The work was done before (or while) submission returned: nothing was
    /// left to overlap with.
    Sync,
    /// The submitter went on, but only because the kernel handed the
    /// operations to its blocking worker threads (`iou-wrk`): the I/O was
    /// done synchronously, by threads, inside the kernel.
    KernelWorkers,
}

impl Verdict {
    /// The verdict as the JSON and the summary name it.
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Verdict::Async => "async",
            Verdict::Sync => "sync",
            Verdict::KernelWorkers => "kernel-workers",
        }
    }
}

/// The verdict rules, applied in this order:
///
/// 1. **kernel-workers** if any `iou-wrk` thread appeared or used CPU during
///    the mode. io_uring first tries every operation without blocking; a
///    worker runs only when the file system said "would block" (or cannot
///    say), so one active worker proves that some requests were performed
///    synchronously by a kernel thread. This outranks the timings, which
///    look asynchronous from user space in that case.
/// 2. **sync** if at least 90% of the requests completed inline (already done
///    when submission returned: the page-cache fast path, or a completion
///    found in the ring right after the submitting system call), or if
///    queueing took at least 90% of the time to the last completion: either
///    way the submitter had (almost) nothing left to overlap with — KB
///    156932's "asynchronous I/O appears synchronous".
/// 3. **async** otherwise: requests were queued quickly and completed later,
///    with no kernel worker involved.
///
/// The 90% thresholds leave room for noise (a few requests may hit the
/// cache, a timer is never exact) while still calling a mostly synchronous
/// mode what it is.
pub(super) fn verdict(m: &Measurement) -> Verdict {
    if m.kernel_workers > 0 {
        return Verdict::KernelWorkers;
    }
    let complete = m.complete.as_nanos();
    if most_of(m.inline.into(), m.requests.max(1).into())
        || (complete > 0 && most_of(m.queue.as_nanos(), complete))
    {
        return Verdict::Sync;
    }
    Verdict::Async
}

/// A share as a percentage, never rounding a shortfall up to 100%.
pub(super) fn pct(x: f64) -> String {
    if x > 0.0 && x < 0.01 {
        "<1%".into()
    } else if x > 0.99 && x < 1.0 {
        // Never round a shortfall up to "100%".
        format!("{:.1}%", (x * 1000.0).floor() / 10.0)
    } else {
        format!("{:.0}%", x * 100.0)
    }
}

/// Facts about the run that explanations need.
pub(super) struct Facts {
    pub(super) driver: DriverKind,
    pub(super) fs: String,
    /// For prealloc modes: the grow mode's kernel workers (same kind).
    pub(super) grow_workers: Option<u64>,
    /// The run is on Windows: the explanations speak of `ReadFile`, the
    /// cache manager and the valid data length.
    pub(super) windows: bool,
}

/// A condition a template of [`TEXTS`] may require.
#[derive(Debug, Clone, Copy)]
enum When {
    // The mode.
    SyncRead,
    AsyncRead,
    Write,
    Direct,
    Cold,
    Cached,
    Buffered,
    WriteThrough,
    Grow,
    Prealloc,
    /// Into space whose valid data length was set (Windows).
    ValidData,
    // The verdict.
    Async,
    Sync,
    KernelWorkers,
    /// The transfers ran on the pool's threads: the pool driver, or a
    /// buffered mode on aio+pool (only O_DIRECT goes to Linux AIO).
    Pool,
    /// The file system is ext4.
    Ext4,
    /// The run is on Windows.
    Windows,
    /// More than half of the requested pages were cached before the mode.
    CachedAnyway,
    /// Some reads tried the page-cache fast path and missed.
    FastPathMisses,
    /// The same reads were measured without the fast path.
    FastPathOffMeasured,
    /// Most reads were answered by the fast path.
    MostHits,
    /// Most reads tried the fast path and missed.
    MostMisses,
    /// Most requests completed inline.
    MostInline,
    /// No read was answered by the page-cache fast path.
    NoHits,
    /// Every inline completion was a fast-path hit.
    AllInlineWereHits,
    /// Some completions came back out of submission order.
    OutOfOrder,
    /// The grow mode of the same kind needed kernel workers.
    GrowNeededWorkers,
    /// Some requested pages were dirty or under writeback before the mode:
    /// an O_DIRECT read of them waits until they are written back.
    Dirty,
    /// The kernel said that no requested page was dirty before the mode.
    Clean,
}

use When::*;

/// (key, conditions, template): for a key, the first row whose conditions
/// all hold gives the text.
#[rustfmt::skip]
const TEXTS: &[(&str, &[When], &str)] = &[
    // --- Windows: ReadFile/WriteFile, the cache manager, valid data ------
    ("explanation", &[SyncRead, Windows],
        "completed synchronously ({sync_why}): the baseline, plain blocking ReadFile calls one \
         after another on the calling thread, nothing overlaps"),
    ("explanation", &[AsyncRead, Async, Pool, Windows],
        "asynchronous by threads: queued in {queue_share} of the completion time, {order}; \
         {read_what}; the overlap comes from the pool driver's threads doing blocking ReadFile \
         calls, not from the system"),
    ("explanation", &[AsyncRead, Async, Windows],
        "truly asynchronous: all {requests} were queued in {queue_share} of the time they took \
         to complete (under the 90% that would make it synchronous), {inline} of them completed \
         inside ReadFile (the others returned ERROR_IO_PENDING and completed through the \
         completion port), and {order}; {read_what}"),
    ("sync_why", &[Direct, Windows], "each read went to the device (FILE_FLAG_NO_BUFFERING)"),
    ("sync_why", &[Cold, Windows],
        "each read waited for the disk, unless the cache still held its pages (the probe asked \
         Windows to drop them; Windows does not tell which pages of a file are cached)"),
    ("sync_why", &[Cached, Windows], "the system file cache: each read was a memory copy"),
    ("read_what", &[Direct, Windows],
        "FILE_FLAG_NO_BUFFERING reads bypass the system cache and go to the device, the KB's \
         surest way to keep requests asynchronous"),
    ("read_what", &[Cold, Windows],
        "the probe had asked Windows to drop the file's cached pages (it cannot verify that it \
         did); where the pages are not in memory, the cache manager, which cannot fault them in \
         asynchronously, hands the reads to the system's few worker threads and ReadFile \
         returns at once (KB 156932, \"Data is not in cache\")"),
    ("read_what", &[Cached, Windows],
        "{inline} of {requests} were answered from the system file cache inside ReadFile"),
    ("read_sync_why", &[Cached, Windows],
        "the system file cache: {inline} of {requests} reads found their data in memory and \
         completed inside ReadFile, which returned TRUE instead of ERROR_IO_PENDING (KB 156932: \
         a request that can be completed at once is), so there was nothing to overlap"),
    ("read_sync_why", &[Cold, Windows],
        "{inline} of {requests} completed inside ReadFile and queueing took {queue_share} of \
         the time to the last completion: either the pages were still cached (the probe asked \
         Windows to drop them but cannot verify it), or, with the data not in the cache and \
         many reads at once, the cache manager's few worker threads were saturated and the \
         reads were made synchronous (KB 156932); FILE_FLAG_NO_BUFFERING avoids the cache"),
    ("read_sync_why", &[Direct, Windows],
        "{inline} of {requests} completed inside ReadFile and queueing took {queue_share} of \
         the time to the last completion: the volume answered before ReadFile returned (KB \
         156932 names compressed and encrypted files, which NTFS reads and writes \
         synchronously; the probe does not look at the file's attributes)"),
    ("write_tail", &[Buffered, Windows],
        "; a buffered write completes once it is copied into the system cache (the lazy writer \
         writes it later): not durable until FlushFileBuffers (the final one took {fsync})"),
    ("write_tail", &[WriteThrough, Windows],
        "; write-through (FILE_FLAG_WRITE_THROUGH): each write completed only once on the \
         device (the final FlushFileBuffers took {fsync})"),
    ("write_head", &[Sync, Buffered, Windows],
        "completed synchronously ({inline} of {requests} writes completed inside WriteFile): a \
         buffered write is a copy into the system cache{grow_note}"),
    ("write_head", &[Sync, WriteThrough, Windows],
        "completed synchronously ({inline} of {requests} writes completed inside WriteFile, \
         queueing took {queue_share} of the time to the last completion): a write-through write \
         without FILE_FLAG_NO_BUFFERING goes through the system cache, which copies it and \
         writes it to the device before WriteFile returns{grow_note}"),
    ("write_head", &[Sync, Grow, Windows],
        "completed synchronously ({inline} of {requests} writes completed inside WriteFile, \
         queueing took {queue_share} of the time to the last completion): on Windows any write \
         that extends a file is synchronous (KB 156932); fix: set the size and the valid data \
         length first (File::allocate, then File::set_valid_data, which needs \
         SeManageVolumePrivilege)"),
    ("write_head", &[Sync, Prealloc, Windows],
        "completed synchronously ({inline} of {requests} writes completed inside WriteFile, \
         queueing took {queue_share} of the time to the last completion) although the space \
         was reserved and the size set: each write moved the file's valid data length, which \
         NTFS does synchronously; SetFileValidData moves it once beforehand (the validdata \
         modes)"),
    ("write_head", &[Sync, ValidData, Windows],
        "completed synchronously ({inline} of {requests} writes completed inside WriteFile, \
         queueing took {queue_share} of the time to the last completion) although the valid \
         data length had been set: the volume answered before WriteFile returned (KB 156932 \
         names compressed and encrypted files, which NTFS reads and writes synchronously; the \
         probe does not look at the file's attributes)"),
    ("write_head", &[Async, Pool, Windows],
        "asynchronous by threads{async_write_why}; the overlap comes from the pool driver's \
         threads doing blocking WriteFile calls, not from the system"),
    ("write_head", &[Async, Windows],
        "truly asynchronous: WriteFile returned ERROR_IO_PENDING for {pending} of {requests} \
         writes, which completed through the completion port{async_write_why}"),
    ("grow_note", &[Grow], ", and a write that extends a file is synchronous on Windows \
         anyway (KB 156932)"),
    ("grow_note", &[], ""),
    ("async_write_why", &[ValidData],
        ": the valid data length had been set beforehand (SetFileValidData), so no write \
         extended the file"),
    ("async_write_why", &[Prealloc, Direct, Windows],
        ": the space was reserved and the size set beforehand (Windows documents writes beyond \
         the valid data length as synchronous; this volume did them asynchronously)"),
    ("async_write_why", &[Grow, Windows],
        " (Windows documents writes that extend a file as synchronous; this volume did them \
         asynchronously)"),
    // --- the explanation of one mode ------------------------------------
    ("explanation", &[SyncRead],
        "completed synchronously ({sync_why}): the baseline, plain blocking pread one after \
         another on the calling thread, nothing overlaps"),
    ("explanation", &[AsyncRead, Async, Pool],
        "asynchronous by threads: queued in {queue_share} of the completion time, {order}; \
         {read_what}; the overlap comes from the pool driver's threads doing blocking preads, \
         not from the kernel"),
    ("explanation", &[AsyncRead, Async],
        "truly asynchronous: all {requests} were queued in {queue_share} of the time they took \
         to complete (under the 90% that would make it synchronous), {inline} of them were done \
         by the time they were submitted, and {order}; {read_what}"),
    ("explanation", &[AsyncRead, Sync], "completed synchronously ({read_sync_why})"),
    ("explanation", &[AsyncRead, KernelWorkers, Direct, Dirty],
        "{workers}: {dirty} of the requested pages were dirty in the page cache (written, not \
         yet on the device), and an O_DIRECT read must wait until the kernel has written them \
         back, which io_uring cannot do without blocking, so kernel threads performed these \
         reads synchronously; sync the file (fsync) before reading it with O_DIRECT"),
    ("explanation", &[AsyncRead, KernelWorkers, Direct, Clean],
        "{workers}: none of the requested pages was dirty in the page cache, yet the file \
         system could not start these reads without blocking, so kernel threads performed \
         them synchronously"),
    ("explanation", &[AsyncRead, KernelWorkers],
        "{workers}: the file system could not start these reads without blocking, so kernel \
         threads performed them synchronously"),
    ("explanation", &[Write], "{write_head}{write_tail}"),
    // --- the synchronous baseline ----------------------------------------
    ("sync_why", &[Direct, Dirty],
        "each read went to the device (O_DIRECT), after the kernel had written back the {dirty} \
         requested pages that were dirty in the page cache"),
    ("sync_why", &[Direct], "each read went to the device (O_DIRECT)"),
    ("sync_why", &[Cold, CachedAnyway],
        "page cache: the eviction did not work, so each read was a memory copy"),
    ("sync_why", &[Cold], "each read waited for the disk (file not in the page cache)"),
    ("sync_why", &[Cached], "page cache: each read was a memory copy"),
    // --- async reads -----------------------------------------------------
    ("order", &[OutOfOrder], "{out_of_order} completed out of submission order"),
    ("order", &[], "they completed in submission order"),
    ("read_what", &[Direct, Dirty],
        "O_DIRECT reads bypass the page cache, but {dirty} of the requested pages were dirty \
         there and had to be written back first"),
    ("read_what", &[Direct], "O_DIRECT reads bypass the page cache"),
    ("read_what", &[Cold, FastPathMisses],
        "the file was evicted ({cached} of the requested pages cached), so the reads went to \
         the disk; {misses} reads tried the page cache on the calling thread first (preadv2 \
         RWF_NOWAIT) and missed, and on a miss the kernel starts the disk read right there, \
         which is what queueing cost; after that streak of misses the engine sent {skipped} \
         reads straight to {fast_path_target}{fast_path_off}"),
    ("read_what", &[Cold],
        "the file was evicted ({cached} of the requested pages cached), so the reads went to \
         the disk"),
    ("read_what", &[Cached], "only {hits} of {requests} were answered from the page cache"),
    ("fast_path_target", &[Pool], "the thread pool"),
    ("fast_path_target", &[], "the ring"),
    ("fast_path_off", &[FastPathOffMeasured],
        "; without the fast path (EngineBuilder::cache_fast_path(false)) the same reads were \
         queued in {off_queue_s} s and completed in {off_complete_s} s, {off_inline} inline"),
    ("fast_path_off", &[], ""),
    ("read_sync_why", &[Direct, Dirty],
        "{dirty} of the requested pages were dirty in the page cache, and each O_DIRECT read \
         waited, inside the submitting call, until the kernel had written them back: queueing \
         took {queue_share} of the time to the last completion"),
    ("read_sync_why", &[MostHits],
        "page cache: {hits} of {requests} were answered from memory by preadv2(RWF_NOWAIT) on \
         the calling thread, as fast as a plain pread, so there was nothing to overlap"),
    ("read_sync_why", &[Cold, MostMisses],
        "page-cache misses: each read first tried the page cache on the calling thread \
         (preadv2 RWF_NOWAIT); on a miss the kernel starts the disk read right there, on the \
         calling thread, and may wait for the device, so queueing took {queue_share} of the \
         time to the last completion and {inline} of {requests} reads were already done when \
         the ring got them{fast_path_off}"),
    ("read_sync_why", &[Cached, NoHits],
        "page cache: {inline} of {requests} completed as soon as the ring saw them (none was \
         answered by the fast path on the calling thread); {cached} of the requested pages were \
         cached"),
    ("read_sync_why", &[Cached, AllInlineWereHits],
        "page cache: {hits} of {requests} were answered from memory by preadv2(RWF_NOWAIT) on \
         the calling thread; {cached} of the requested pages were cached"),
    ("read_sync_why", &[Cached],
        "page cache: {hits} of {requests} were answered from memory by preadv2(RWF_NOWAIT) on \
         the calling thread and {inline_beyond_hits} more completed as soon as the ring saw \
         them; {cached} of the requested pages were cached"),
    ("read_sync_why", &[Cold],
        "{inline} of {requests} inline, queueing took {queue_share} of the completion time; \
         {cached} of the requested pages were cached after the eviction"),
    ("read_sync_why", &[],
        "{inline} of {requests} inline, queueing took {queue_share} of the completion time"),
    // --- writes ------------------------------------------------------------
    ("write_tail", &[Buffered],
        "; a buffered write completes once it is copied into RAM: not durable until fsync (the \
         final fsync took {fsync})"),
    ("write_tail", &[WriteThrough],
        "; write-through (O_DSYNC): each write completed only once durable (the final fsync \
         took {fsync})"),
    ("write_tail", &[], ""),
    ("write_head", &[KernelWorkers, Grow, Direct],
        "{workers}: the file grew with each write, and extending a file takes an exclusive \
         lock and a metadata update that {fs_or_the_fs} will not do without blocking; fix: \
         preallocate (File::allocate)"),
    ("write_head", &[KernelWorkers, Prealloc, Direct],
        "{workers} although the space was preallocated (fallocate): {fs} could not write into \
         the preallocated (unwritten) extents without blocking{ext4_unaligned}; a zero-filled \
         preallocation (writing the file once) leaves no unwritten extents"),
    ("write_head", &[KernelWorkers], "{workers}: {buffered_why}{prealloc_note}"),
    ("write_head", &[Sync, MostInline, Direct],
        "completed synchronously ({inline} of {requests} writes were done while they were \
         being submitted)"),
    ("write_head", &[Sync, MostInline],
        "completed synchronously ({inline} of {requests} writes were done while they were \
         being submitted (page cache: memory copies))"),
    ("write_head", &[Sync],
        "completed synchronously (queueing took {queue_share} of the time to the last \
         completion: the writes finished about as fast as they could be submitted, leaving \
         nothing to overlap)"),
    ("write_head", &[Async, Pool],
        "asynchronous by threads{async_write_why}; the overlap comes from the pool driver's \
         threads doing blocking pwrites, not from the kernel"),
    ("write_head", &[Async], "truly asynchronous{async_write_why}"),
    ("fs_or_the_fs", &[Ext4], "ext4"),
    ("fs_or_the_fs", &[], "the file system"),
    ("ext4_unaligned", &[Ext4],
        " (ext4 does so when a buffer is not aligned to the file-system block)"),
    ("ext4_unaligned", &[], ""),
    ("buffered_why", &[Ext4],
        "ext4 offers io_uring no non-blocking buffered writes (it does not set \
         FMODE_BUF_WASYNC), so io_uring hands every buffered write to a worker thread without \
         trying it inline"),
    ("buffered_why", &[],
        "the file system could not perform these buffered writes without blocking, so \
         io_uring handed them to worker threads"),
    ("prealloc_note", &[Prealloc, GrowNeededWorkers],
        "; the growing file of the mode before needed kernel workers as well: preallocating the \
         space changes nothing for these writes"),
    ("prealloc_note", &[], ""),
    ("async_write_why", &[Prealloc, Direct],
        ": the space was preallocated, so no write had to grow the file"),
    ("async_write_why", &[Grow, Direct], " even though the file grew"),
    ("async_write_why", &[], ""),
];

/// Everything a template may refer to.
struct Ctx<'a> {
    mode: Mode,
    v: Verdict,
    m: &'a Measurement,
    facts: &'a Facts,
}

impl Ctx<'_> {
    fn holds(&self, w: When) -> bool {
        let m = self.m;
        match w {
            SyncRead => matches!(self.mode, Mode::Read(Api::Sync, _)),
            AsyncRead => matches!(self.mode, Mode::Read(Api::Async, _)),
            Write => matches!(self.mode, Mode::Write(..)),
            Direct => self.mode.is_direct(),
            Cold => matches!(self.mode, Mode::Read(_, ReadKind::Cold)),
            Cached => matches!(self.mode, Mode::Read(_, ReadKind::Cached)),
            Buffered => matches!(self.mode, Mode::Write(_, WriteKind::Buffered)),
            WriteThrough => matches!(self.mode, Mode::Write(_, WriteKind::WriteThrough)),
            Grow => matches!(self.mode, Mode::Write(Alloc::Grow, _)),
            Prealloc => matches!(self.mode, Mode::Write(Alloc::Prealloc, _)),
            ValidData => matches!(self.mode, Mode::Write(Alloc::ValidData, _)),
            Async => self.v == Verdict::Async,
            Sync => self.v == Verdict::Sync,
            KernelWorkers => self.v == Verdict::KernelWorkers,
            Pool => {
                self.facts.driver == DriverKind::Pool
                    || (self.facts.driver == DriverKind::Aio && !self.mode.is_direct())
            }
            Ext4 => self.facts.fs == "ext4",
            Windows => self.facts.windows,
            CachedAnyway => m.cached_before.is_some_and(|c| c > 0.5),
            FastPathMisses => m.fast_path_misses > 0,
            FastPathOffMeasured => m.fast_path_off.is_some(),
            MostHits => most_of(m.fast_path_hits.into(), m.requests.into()),
            MostMisses => most_of(m.fast_path_misses.into(), m.requests.into()),
            MostInline => most_of(m.inline.into(), m.requests.max(1).into()),
            NoHits => m.fast_path_hits == 0,
            AllInlineWereHits => m.inline <= m.fast_path_hits,
            OutOfOrder => m.out_of_order > 0,
            GrowNeededWorkers => self.facts.grow_workers.is_some_and(|g| g > 0),
            Dirty => m.dirty_before.is_some_and(|d| d > 0),
            Clean => m.dirty_before == Some(0),
        }
    }

    /// The figure named `name`, if it is one.
    fn figure(&self, name: &str) -> Option<String> {
        let m = self.m;
        let secs = |d: std::time::Duration| format!("{:.3}", d.as_secs_f64());
        Some(match name {
            "requests" => m.requests.to_string(),
            "pending" => m.requests.saturating_sub(m.inline).to_string(),
            "inline" => m.inline.to_string(),
            "inline_beyond_hits" => m.inline.saturating_sub(m.fast_path_hits).to_string(),
            "out_of_order" => m.out_of_order.to_string(),
            "hits" => m.fast_path_hits.to_string(),
            "misses" => m.fast_path_misses.to_string(),
            "skipped" => m.fast_path_skipped.to_string(),
            "queue_share" => pct(if m.complete.as_secs_f64() > 0.0 {
                m.queue.as_secs_f64() / m.complete.as_secs_f64()
            } else {
                1.0
            }),
            "cached" => m
                .cached_before
                .map(pct)
                .unwrap_or_else(|| "an unknown share".into()),
            "fsync" => m
                .fsync
                .map(|d| format!("{} s", secs(d)))
                .unwrap_or_else(|| "?".into()),
            "off_queue_s" => secs(m.fast_path_off?.0),
            "off_complete_s" => secs(m.fast_path_off?.1),
            "off_inline" => m.fast_path_off?.2.to_string(),
            "workers" => format!(
                "handed to kernel workers ({} iou-wrk thread{})",
                m.kernel_workers,
                if m.kernel_workers == 1 { "" } else { "s" }
            ),
            "fs" => self.facts.fs.clone(),
            "dirty" => m.dirty_before.unwrap_or(0).to_string(),
            _ => return None,
        })
    }

    /// The text for `key`: the first row of [`TEXTS`] that applies, filled.
    fn text(&self, key: &str) -> String {
        let row = TEXTS
            .iter()
            .find(|(k, when, _)| *k == key && when.iter().all(|&w| self.holds(w)));
        match row {
            Some((_, _, template)) => self.fill(template),
            None => {
                debug_assert!(false, "no text for {key:?} in {:?}/{:?}", self.mode, self.v);
                String::new()
            }
        }
    }

    /// `template` with each `{name}` replaced by its figure or text.
    fn fill(&self, template: &str) -> String {
        let mut out = String::with_capacity(template.len() * 2);
        let mut rest = template;
        while let Some(open) = rest.find('{') {
            out.push_str(&rest[..open]);
            let after = &rest[open + 1..];
            let Some(close) = after.find('}') else {
                debug_assert!(false, "unclosed placeholder in {template:?}");
                out.push_str(&rest[open..]);
                return out;
            };
            let name = &after[..close];
            out.push_str(&self.figure(name).unwrap_or_else(|| self.text(name)));
            rest = &after[close + 1..];
        }
        out.push_str(rest);
        out
    }
}

/// Why mode `mode` got verdict `v`, in words.
pub(super) fn explain(mode: Mode, v: Verdict, m: &Measurement, facts: &Facts) -> String {
    Ctx { mode, v, m, facts }.text("explanation")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::probe::plan::{READ_MODES, WRITE_MODES};

    #[test]
    fn a_shortfall_is_never_rounded_to_100_percent() {
        assert_eq!(pct(0.996), "99.6%");
        assert_eq!(pct(0.9999), "99.9%");
        assert_eq!(pct(1.0), "100%");
        assert_eq!(pct(0.5), "50%");
        assert_eq!(pct(0.001), "<1%");
    }

    fn m(requests: u64, queue_ms: u64, complete_ms: u64, inline: u64, workers: u64) -> Measurement {
        Measurement {
            requests,
            queue: Duration::from_millis(queue_ms),
            complete: Duration::from_millis(complete_ms),
            inline,
            kernel_workers: workers,
            ..Measurement::default()
        }
    }

    /// Whitespace runs as one space (the README wraps its lines).
    fn words(s: &str) -> String {
        s.split_whitespace().collect::<Vec<_>>().join(" ")
    }

    #[test]
    fn one_rule_in_the_code_the_output_and_the_readme() {
        let threshold = format!("{}%", SYNC_SHARE.0 * 100 / SYNC_SHARE.1);
        assert_eq!(RULE.matches(&threshold).count(), 2, "{RULE}");
        let readme =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
                .expect("the README");
        assert!(
            words(&readme).contains(&words(RULE)),
            "the README states the verdict rule differently from the probe: {RULE}"
        );
        assert!(
            !readme.contains("small fraction"),
            "the README's old, vaguer rule"
        );
        // The async explanation says how far from the threshold it was.
        let facts = Facts {
            driver: DriverKind::Uring,
            fs: "ext4".into(),
            grow_workers: None,
            windows: false,
        };
        let mode = READ_MODES
            .into_iter()
            .find(|m| matches!(m, Mode::Read(Api::Async, ReadKind::Cold)))
            .unwrap();
        let e = explain(mode, Verdict::Async, &m(500, 77, 100, 3, 0), &facts);
        assert!(e.contains("77%") && e.contains(&threshold), "{e}");
    }

    #[test]
    fn cached_reads_without_fast_path_hits_are_worded_plainly() {
        let facts = Facts {
            driver: DriverKind::Uring,
            fs: "ext4".into(),
            grow_workers: None,
            windows: false,
        };
        let mode = READ_MODES
            .into_iter()
            .find(|m| matches!(m, Mode::Read(Api::Async, ReadKind::Cached)))
            .unwrap();
        let mut x = m(500, 95, 100, 500, 0);
        x.cached_before = Some(1.0);
        let e = explain(mode, Verdict::Sync, &x, &facts);
        assert!(!e.contains("0 of 500 were answered"), "{e}");
        assert!(!e.contains("more completed"), "{e}");
        assert!(
            e.contains("500 of 500 completed as soon as the ring saw them"),
            "{e}"
        );
        // All inline by the fast path: no "and 0 more".
        x.fast_path_hits = 500;
        let e = explain(mode, Verdict::Sync, &x, &facts);
        assert!(!e.contains("and 0 more"), "{e}");
        assert!(e.contains("500 of 500 were answered from memory"), "{e}");
        // Some of each: both counts.
        x.fast_path_hits = 400;
        let e = explain(mode, Verdict::Sync, &x, &facts);
        assert!(e.contains("400 of 500") && e.contains("100 more"), "{e}");
    }

    #[test]
    fn the_preallocated_mode_does_not_say_preallocating_did_not_help() {
        let facts = Facts {
            driver: DriverKind::Uring,
            fs: "ext4".into(),
            grow_workers: Some(2),
            windows: false,
        };
        for &mode in WRITE_MODES {
            let Mode::Write(Alloc::Prealloc, WriteKind::Buffered) = mode else {
                continue;
            };
            let e = explain(mode, Verdict::KernelWorkers, &m(64, 1, 10, 0, 2), &facts);
            assert!(!e.contains("did not help"), "{e}");
            assert!(e.contains("preallocating the space changes nothing"), "{e}");
        }
    }

    #[test]
    fn verdict_rules() {
        // Kernel workers outrank timings that look asynchronous.
        assert_eq!(verdict(&m(500, 1, 100, 0, 3)), Verdict::KernelWorkers);
        assert_eq!(verdict(&m(500, 100, 100, 500, 1)), Verdict::KernelWorkers);
        // 90% inline, or queueing 90% of the completion time: synchronous.
        assert_eq!(verdict(&m(500, 1, 100, 450, 0)), Verdict::Sync);
        assert_eq!(verdict(&m(500, 1, 100, 449, 0)), Verdict::Async);
        assert_eq!(verdict(&m(500, 90, 100, 0, 0)), Verdict::Sync);
        assert_eq!(verdict(&m(500, 89, 100, 0, 0)), Verdict::Async);
        assert_eq!(verdict(&m(500, 4, 180, 0, 0)), Verdict::Async);
    }

    /// Measurements that reach every row of the table.
    fn variety() -> Vec<Measurement> {
        let mut all = Vec::new();
        for (hits, misses, inline) in [(0, 0, 0), (500, 0, 500), (0, 500, 480), (100, 10, 120)] {
            for (cached_before, dirty_before) in
                [(None, None), (Some(0.0), Some(0)), (Some(0.8), Some(40))]
            {
                for out_of_order in [0, 7] {
                    for workers in [0, 1, 3] {
                        let mut x = m(500, 20, 100, inline, workers);
                        x.dirty_before = dirty_before;
                        x.fast_path_hits = hits;
                        x.fast_path_misses = misses;
                        x.fast_path_skipped = misses / 2;
                        x.cached_before = cached_before;
                        x.out_of_order = out_of_order;
                        x.fsync = (workers == 1).then(|| Duration::from_millis(12));
                        x.fast_path_off = (hits == 0)
                            .then(|| (Duration::from_millis(5), Duration::from_millis(50), 2));
                        all.push(x);
                    }
                }
            }
        }
        all
    }

    /// Every write mode of every system (Windows adds the valid-data ones).
    fn every_write_mode() -> Vec<Mode> {
        let allocs = [Alloc::Grow, Alloc::Prealloc, Alloc::ValidData];
        let kinds = [
            WriteKind::Direct,
            WriteKind::Buffered,
            WriteKind::WriteThrough,
        ];
        let all: Vec<Mode> = allocs
            .into_iter()
            .flat_map(|a| kinds.into_iter().map(move |k| Mode::Write(a, k)))
            .collect();
        assert!(WRITE_MODES.iter().all(|m| all.contains(m)));
        all
    }

    #[test]
    fn every_mode_and_verdict_has_a_complete_explanation() {
        let verdicts = [Verdict::Async, Verdict::Sync, Verdict::KernelWorkers];
        let drivers = [
            DriverKind::Uring,
            DriverKind::Aio,
            DriverKind::Pool,
            DriverKind::Iocp,
        ];
        for mode in READ_MODES.into_iter().chain(every_write_mode()) {
            for v in verdicts {
                for driver in drivers {
                    for (fs, windows) in [("ext4", false), ("xfs", false), ("NTFS", true)] {
                        for grow_workers in [None, Some(0), Some(2)] {
                            let facts = Facts {
                                driver,
                                fs: fs.into(),
                                grow_workers,
                                windows,
                            };
                            for x in variety() {
                                let e = explain(mode, v, &x, &facts);
                                assert!(!e.is_empty(), "{mode:?} {v:?}");
                                assert!(!e.contains(['{', '}']), "unfilled: {e}");
                            }
                        }
                    }
                }
            }
        }
    }

    /// On Windows the explanations speak Windows' terms: no Linux call,
    /// flag or thread is named (no mode there has kernel workers), and the
    /// KB's reasons are given.
    #[test]
    fn windows_explanations_speak_windows_terms() {
        let linux = [
            "preadv2",
            "O_DIRECT",
            "O_DSYNC",
            "io_uring",
            "iou-wrk",
            "fallocate",
            "pread",
            "pwrite",
            "fsync",
            "ring",
            "ext4",
            "page cache",
        ];
        for driver in [DriverKind::Iocp, DriverKind::Pool] {
            let facts = Facts {
                driver,
                fs: "NTFS".into(),
                grow_workers: None,
                windows: true,
            };
            for mode in READ_MODES.into_iter().chain(every_write_mode()) {
                for v in [Verdict::Async, Verdict::Sync] {
                    for mut x in variety().into_iter().filter(|x| x.kernel_workers == 0) {
                        // Windows tells neither cache residency nor dirty pages.
                        (x.cached_before, x.dirty_before) = (None, None);
                        let e = explain(mode, v, &x, &facts);
                        for word in linux {
                            assert!(!e.contains(word), "{mode:?} {v:?}: {word}: {e}");
                        }
                    }
                }
            }
        }
        let facts = Facts {
            driver: DriverKind::Iocp,
            fs: "NTFS".into(),
            grow_workers: None,
            windows: true,
        };
        let grow = Mode::Write(Alloc::Grow, WriteKind::Direct);
        let e = explain(grow, Verdict::Sync, &m(64, 10, 10, 64, 0), &facts);
        assert!(
            e.contains("extends a file is synchronous") && e.contains("set_valid_data"),
            "{e}"
        );
        let cached = Mode::Read(Api::Async, ReadKind::Cached);
        let e = explain(cached, Verdict::Sync, &m(500, 10, 10, 500, 0), &facts);

        assert!(e.contains("inside ReadFile") && e.contains("TRUE"), "{e}");
    }

    #[test]
    fn every_placeholder_is_a_figure_or_a_key() {
        let x = m(1, 1, 1, 1, 1);
        let facts = Facts {
            driver: DriverKind::Uring,
            fs: "ext4".into(),
            grow_workers: None,
            windows: false,
        };
        let cx = Ctx {
            mode: READ_MODES[0],
            v: Verdict::Async,
            m: &x,
            facts: &facts,
        };
        for (_, _, t) in TEXTS {
            let mut rest = *t;
            while let Some(open) = rest.find('{') {
                let close = rest[open..].find('}').expect("closed") + open;
                let name = &rest[open + 1..close];
                let known = matches!(name, "off_queue_s" | "off_complete_s" | "off_inline")
                    || cx.figure(name).is_some()
                    || TEXTS.iter().any(|(k, _, _)| *k == name);
                assert!(known, "{{{name}}} in {t:?} is neither a figure nor a key");
                rest = &rest[close + 1..];
            }
        }
    }
}
