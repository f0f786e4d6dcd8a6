//! Output: each mode's record (JSON or text), the progress bar, and the
//! closing summary.

use std::fmt::Write as _;
use std::io::{IsTerminal, Write};

use anyhow::Result;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use overlapped::DriverKind;
use serde::Serialize;

use super::modes::Measurement;
use super::plan::{Mode, NAME_WIDTH};
use super::verdict::{explain, pct, verdict, Facts};
use super::StdoutClosed;

/// One mode's result: a JSON line, or two lines of text.
#[derive(Debug, Serialize)]
pub(super) struct Record {
    driver: &'static str,
    fallback_reason: Option<String>,
    op: &'static str,
    mode: String,
    requests: u64,
    bytes: u64,
    queue_s: f64,
    complete_s: f64,
    out_of_order: bool,
    out_of_order_count: u64,
    inline: u64,
    kernel_workers: u64,
    verdict: &'static str,
    explanation: String,
    mb_s: f64,
    /// Writes: the final fdatasync, in seconds.
    fsync_s: Option<f64>,
    /// Reads: share of the requested pages in the page cache before the mode.
    cached_before: Option<f64>,
    /// Reads: requested pages dirty or under writeback before the mode
    /// (an O_DIRECT read waits until they are written back).
    dirty_before: Option<u64>,
    /// async-buffered-cold: the same reads on an engine without the
    /// page-cache fast path, for comparison.
    fast_path_off_queue_s: Option<f64>,
    /// As `fast_path_off_queue_s`, the time to the last completion.
    fast_path_off_complete_s: Option<f64>,
    /// The seed of the read offsets (`--seed` repeats a run).
    seed: u64,
    /// Buffered reads answered by the page-cache fast path.
    fast_path_hits: u64,
    /// Buffered reads the fast path tried and sent on to the driver.
    fast_path_misses: u64,
    /// Buffered reads sent straight to the driver after a streak of misses.
    fast_path_skipped: u64,
    /// System calls the engine made to submit the mode's requests.
    submit_syscalls: u64,
}

/// Stdout, around the progress bar: text lines, or JSON lines only.
pub(super) struct Out {
    pub(super) json: bool,
    pub(super) pb: ProgressBar,
}

impl Out {
    /// Writes a line to stdout, around the progress bar.
    pub(super) fn line(&self, s: &str) -> Result<()> {
        self.pb
            .suspend(|| {
                let mut out = std::io::stdout().lock();
                writeln!(out, "{s}").and_then(|_| out.flush())
            })
            .map_err(|e| {
                if e.kind() == std::io::ErrorKind::BrokenPipe {
                    anyhow::Error::new(StdoutClosed)
                } else {
                    anyhow::Error::new(e).context("writing to stdout")
                }
            })
    }

    /// Writes a line of text, unless the output is JSON.
    pub(super) fn human(&self, s: &str) -> Result<()> {
        if self.json {
            Ok(())
        } else {
            self.line(s)
        }
    }

    /// Writes a mode's result.
    pub(super) fn record(&self, r: &Record) -> Result<()> {
        if self.json {
            return self.line(&serde_json::to_string(r)?);
        }
        let order = if r.out_of_order {
            "out of order"
        } else {
            "in order"
        };
        let mut first = format!(
            "{:<w$}{} requests queued in {:.3} s, completed in {:.3} s; {order}; inline {}/{}; \
             kernel workers {}",
            r.mode,
            r.requests,
            r.queue_s,
            r.complete_s,
            r.inline,
            r.requests,
            r.kernel_workers,
            w = NAME_WIDTH
        );
        let _ = write!(first, "; {:.0} MB/s", r.mb_s);
        self.line(&first)?;
        self.line(&format!("{:<w$}-> {}", "", r.explanation, w = NAME_WIDTH))
    }
}

/// The progress bar on stderr (hidden for JSON or when stderr is not a
/// terminal).
pub(super) fn progress(json: bool, total: u64) -> ProgressBar {
    if json || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(
        "{msg:<27} [{wide_bar}] {bytes:>10}/{total_bytes} {elapsed:>3}",
    ) {
        pb.set_style(style.progress_chars("=> "));
    }
    pb
}

/// What every record of a run shares.
pub(super) struct RunInfo {
    /// The driver's name.
    pub(super) driver: &'static str,
    /// Why io_uring is not in use, when it is not.
    pub(super) fallback: Option<String>,
    /// The seed of the read offsets.
    pub(super) seed: u64,
}

impl Record {
    /// The record of `mode`, with its verdict and explanation.
    pub(super) fn new(run: &RunInfo, mode: Mode, m: &Measurement, facts: &Facts) -> Record {
        let v = verdict(m);
        let complete_s = m.complete.as_secs_f64();
        Record {
            driver: run.driver,
            fallback_reason: run.fallback.clone(),
            op: if matches!(mode, Mode::Read(..)) {
                "read"
            } else {
                "write"
            },
            mode: mode.name(),
            requests: m.requests,
            bytes: m.bytes,
            queue_s: m.queue.as_secs_f64(),
            complete_s,
            out_of_order: m.out_of_order > 0,
            out_of_order_count: m.out_of_order,
            inline: m.inline,
            kernel_workers: m.kernel_workers,
            verdict: v.as_str(),
            explanation: explain(mode, v, m, facts),
            mb_s: if complete_s > 0.0 {
                m.bytes as f64 / complete_s / 1e6
            } else {
                0.0
            },
            fsync_s: m.fsync.map(|d| d.as_secs_f64()),
            cached_before: m.cached_before,
            dirty_before: m.dirty_before,
            fast_path_off_queue_s: m.fast_path_off.map(|(q, _, _)| q.as_secs_f64()),
            fast_path_off_complete_s: m.fast_path_off.map(|(_, c, _)| c.as_secs_f64()),
            seed: run.seed,
            fast_path_hits: m.fast_path_hits,
            fast_path_misses: m.fast_path_misses,
            fast_path_skipped: m.fast_path_skipped,
            submit_syscalls: m.submit_syscalls,
        }
    }
}

/// The closing paragraph, built from the verdicts.
pub(super) fn summary(records: &[Record], driver: DriverKind, fs: &str) -> String {
    let sum = Summary { records, driver };
    let mut s = format!("Summary ({} on {fs}): ", driver.as_str());
    sum.driver_note(&mut s);
    sum.reads(&mut s);
    sum.writes(&mut s);
    s.trim_end().to_string()
}

/// The records, for the summary's sentences.
struct Summary<'a> {
    records: &'a [Record],
    driver: DriverKind,
}

impl Summary<'_> {
    fn get(&self, name: &str) -> Option<&Record> {
        self.records.iter().find(|r| r.mode == name)
    }

    /// Queueing's share of the time to the last completion.
    fn ratio(r: &Record) -> f64 {
        if r.complete_s > 0.0 {
            r.queue_s / r.complete_s
        } else {
            1.0
        }
    }

    /// The verdict in plain words.
    fn plain(&self, r: &Record) -> &'static str {
        // On aio+pool, only the O_DIRECT modes went to the kernel (Linux AIO).
        let by_threads = self.driver == DriverKind::Pool
            || (self.driver == DriverKind::Aio && !r.mode.contains("direct"));
        match r.verdict {
            "async" if by_threads => "asynchronous (by threads)",
            "async" => "truly asynchronous",
            "sync" => "synchronous",
            _ => "handed to kernel workers",
        }
    }

    fn driver_note(&self, s: &mut String) {
        if self.driver == DriverKind::Aio {
            s.push_str(
                "io_uring is unavailable, so O_DIRECT reads and writes went through Linux AIO, \
                 which the kernel performs asynchronously; buffered ones went to the thread \
                 pool, so whatever of them overlapped did so because threads made blocking \
                 system calls. ",
            );
        }
        if self.driver == DriverKind::Pool {
            s.push_str(
                "the thread-pool driver is in use, so whatever overlapped did so because up to \
                 32 threads made blocking system calls at once, not because the kernel did the \
                 I/O asynchronously. ",
            );
        }
    }

    fn reads(&self, s: &mut String) {
        if let Some(r) = self.get("async-direct") {
            let _ = write!(
                s,
                "{} direct reads were queued in {:.3} s, {} of the {:.3} s they took to \
                 complete, and came back {}: {}",
                r.requests,
                r.queue_s,
                pct(Self::ratio(r)),
                r.complete_s,
                if r.out_of_order {
                    "out of order"
                } else {
                    "in submission order"
                },
                self.plain(r)
            );
            match self.get("sync-direct") {
                Some(sd) if r.complete_s > 0.0 => {
                    let _ = write!(
                        s,
                        " (one after another they took {:.3} s, {:.1}x as long). ",
                        sd.complete_s,
                        sd.complete_s / r.complete_s
                    );
                }
                _ => s.push_str(". "),
            }
        }
        self.cold_reads(s);
        if let Some(r) = self.get("async-buffered-cached") {
            let _ = write!(
                s,
                "Buffered reads of a cached file: {}, {} of {} inline; as KB 156932 says of \
                 the Windows cache, a cache hit completes at once, so asynchronous submission \
                 buys nothing there. ",
                self.plain(r),
                r.inline,
                r.requests
            );
        }
    }

    fn cold_reads(&self, s: &mut String) {
        let Some(r) = self.get("async-buffered-cold") else {
            return;
        };
        let _ = write!(
            s,
            "Buffered reads of an evicted file: {}, queueing took {} of the time",
            self.plain(r),
            pct(Self::ratio(r))
        );
        match (r.fast_path_off_queue_s, r.fast_path_off_complete_s) {
            (Some(q), Some(c)) if r.fast_path_misses > 0 && Self::ratio(r) >= 0.2 => {
                let _ = write!(
                    s,
                    ", because the page-cache fast path tried each read on the calling thread \
                     first and a miss starts the disk read there (without the fast path: \
                     queued in {q:.3} s, completed in {c:.3} s). "
                );
            }
            (Some(q), Some(c)) => {
                let _ = write!(
                    s,
                    " (without the page-cache fast path: queued in {q:.3} s, completed in \
                     {c:.3} s). "
                );
            }
            _ => s.push_str(". "),
        }
    }

    /// "X whether or not the file was preallocated", or each.
    fn pair(&self, grow: &str, prealloc: &str) -> Option<String> {
        match (self.get(grow), self.get(prealloc)) {
            (Some(g), Some(p)) if g.verdict == p.verdict => Some(format!(
                "{} whether or not the file was preallocated",
                self.plain(g)
            )),
            (Some(g), Some(p)) => Some(format!(
                "{} when the file grew, {} when it was preallocated",
                self.plain(g),
                self.plain(p)
            )),
            // The file system could not preallocate (the mode was skipped).
            (Some(g), None) => Some(format!("{} when the file grew", self.plain(g))),
            _ => None,
        }
    }

    fn writes(&self, s: &mut String) {
        if let (Some(g), Some(p)) = (
            self.get("async-grow-direct"),
            self.get("async-prealloc-direct"),
        ) {
            let _ = write!(
                s,
                "Direct writes that grew the file: {} ({} kernel workers, {:.0} MB/s); into \
                 preallocated space: {} ({} kernel workers, {:.0} MB/s). ",
                self.plain(g),
                g.kernel_workers,
                g.mb_s,
                self.plain(p),
                p.kernel_workers,
                p.mb_s
            );
        }
        if let (Some(g), Some(v)) = (
            self.get("async-grow-direct"),
            self.get("async-validdata-direct"),
        ) {
            let _ = write!(
                s,
                "Direct writes that grew the file: {} ({:.0} MB/s); with the valid data length \
                 set beforehand (SetFileValidData): {} ({:.0} MB/s). ",
                self.plain(g),
                g.mb_s,
                self.plain(v),
                v.mb_s
            );
        }
        if let Some(b) = self.pair("async-grow-buffered", "async-prealloc-buffered") {
            let _ = write!(
                s,
                "Buffered writes: {b}; they complete once in RAM and are not durable until {}. ",
                if cfg!(windows) {
                    "FlushFileBuffers"
                } else {
                    "fsync"
                }
            );
        }
        if let Some(w) = self.pair("async-grow-writethrough", "async-prealloc-writethrough") {
            let _ = write!(
                s,
                "Write-through ({}) writes: {w}; each is durable when it completes.",
                crate::sys::WRITE_THROUGH_NAME
            );
        }
    }
}
