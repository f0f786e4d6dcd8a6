//! Verdicts and their explanations.
//!
//! [`verdict`] applies the rules; [`explain`] says why in words. The words
//! are data: [`TEXTS`] is a table of templates, each with the key it
//! answers and the conditions under which it applies. A template's
//! `{name}` is a figure of the measurement (see [`Ctx::figure`]) or, failing
//! that, another key of the table, filled in the same way.

use overlapped::DriverKind;

use super::modes::Measurement;
use super::plan::{Alloc, Api, Mode, ReadKind, WriteKind};

mod texts;
use texts::When::{self, *};
use texts::TEXTS;

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
