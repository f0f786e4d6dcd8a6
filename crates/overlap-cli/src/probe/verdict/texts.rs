//! The words of the explanations: the conditions a template may require
//! ([`When`]) and the table of templates ([`TEXTS`]), Linux's and
//! Windows' rows together (see the parent module for how they are used).

/// A condition a template of [`TEXTS`] may require.
#[derive(Debug, Clone, Copy)]
pub(super) enum When {
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
pub(super) const TEXTS: &[(&str, &[When], &str)] = &[
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
