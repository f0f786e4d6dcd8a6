//! The run, step by step: the plan and the engine, the data file, the read
//! modes, the write modes, the summary. Each step prints as it goes.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use indicatif::ProgressBar;
use overlapped::{
    Access, AlignedBufPool, DriverChoice, DriverInfo, Engine, EngineBuilder, File, OpenOptions,
};

use super::modes::{async_reads, async_writes, fast_path_off_reads, sync_reads, Measurement};
use super::plan::{
    Alloc, Api, Mode, Plan, ReadKind, WriteKind, NAME_WIDTH, READ_MODES, WRITE_MODES,
};
use super::report::{progress, summary, Out, Record, RunInfo};
use super::system::{cached_share, evict, residency, unwritten_pages, warm, whole_share, Cleanup};
use super::verdict::{pct, Facts};
use super::{DriverArg, ProbeArgs, CHUNK, WRITE_DEPTH};
use crate::size::fmt_bytes;

/// One run's state: what it measures, with what, and what it found.
struct Probe {
    plan: Plan,
    builder: EngineBuilder,
    engine: Engine,
    info: DriverInfo,
    run: RunInfo,
    out: Out,
    pb: ProgressBar,
    cleanup: Cleanup,
    data_path: PathBuf,
    write_path: PathBuf,
    /// The file system accepts O_DIRECT (else the direct modes are skipped).
    direct_ok: bool,
    /// Alignment of the probe's buffers.
    buf_align: usize,
    /// Why the file system cannot preallocate (else the prealloc modes run).
    no_allocate: Option<String>,
    /// Why the valid data length cannot be set (Windows' `SetFileValidData`;
    /// on Linux the notion does not exist and the modes are not planned).
    no_valid_data: Option<String>,
    records: Vec<Record>,
    notes: Vec<String>,
}

/// Runs the probe: everything `overlap probe` does.
pub(super) fn probe(args: ProbeArgs) -> Result<()> {
    let plan = Plan::new(&args)?;
    // Signals are blocked from here on, in this thread and all later ones.
    let cleanup = Cleanup::install();
    let (builder, engine) = start_engine(args.driver, &plan)?;
    let info = engine.driver().clone();
    let run = RunInfo {
        driver: info.kind.as_str(),
        fallback: info.fallback.as_ref().map(|r| r.to_string()),
        seed: plan.seed,
    };
    // Progress: create + 6 read modes (+ 1 without the fast path, which
    // Windows lacks) + 2 warm-ups + the writes.
    let read_passes = if cfg!(windows) { 6 } else { 7 };
    let total = plan.size
        + read_passes * plan.read_bytes()
        + 2 * plan.size
        + WRITE_MODES.len() as u64 * plan.size;
    let pb = progress(args.json, total);
    let out = Out {
        json: args.json,
        pb: pb.clone(),
    };
    let prefix = format!("overlap-probe-{}", std::process::id());
    let mut p = Probe {
        data_path: plan.dir.join(format!("{prefix}-data")),
        write_path: plan.dir.join(format!("{prefix}-write")),
        plan,
        builder,
        engine,
        info,
        run,
        out,
        pb,
        cleanup,
        direct_ok: false,
        buf_align: 0,
        no_allocate: None,
        no_valid_data: valid_data_refusal(),
        records: Vec::new(),
        notes: Vec::new(),
    };
    p.header()?;
    p.create_data_file()?;
    p.read_modes()?;
    p.write_modes()?;
    p.pb.finish_and_clear();
    p.finish(args.json)
}

/// The engine, sized so that every read of a read mode is in flight at
/// once, and its builder (for a second engine without the fast path).
fn start_engine(driver: DriverArg, plan: &Plan) -> Result<(EngineBuilder, Engine)> {
    let choice = match driver {
        DriverArg::Auto => DriverChoice::Auto,
        DriverArg::Uring => DriverChoice::Uring,
        DriverArg::Pool => DriverChoice::Pool,
        DriverArg::Aio => DriverChoice::Aio,
        DriverArg::Iocp => DriverChoice::Iocp,
    };
    let builder = Engine::builder()
        .driver(choice)
        .max_inflight_ops((plan.requests as usize).max(overlapped::DEFAULT_MAX_INFLIGHT_OPS))
        .max_inflight_bytes(
            (plan.read_bytes() as usize).max(overlapped::DEFAULT_MAX_INFLIGHT_BYTES),
        );
    let engine = builder.clone().build().context("starting the I/O engine")?;
    Ok((builder, engine))
}

impl Probe {
    fn header(&self) -> Result<()> {
        let (out, info) = (&self.out, &self.info);
        let driver = self.run.driver;
        out.human("overlap probe: does asynchronous file I/O really overlap here? (the KB 156932 `asynchio` experiment)")?;
        match &info.fallback {
            None => out.human(&format!("driver:    {driver} ({})", info.detail))?,
            Some(r) => out.human(&format!(
                "driver:    {driver} ({}); fallback: {r}; to use {}: {}",
                info.detail,
                crate::sys::NATIVE_DRIVER,
                r.hint()
            ))?,
        }
        out.human(&format!(
            "directory: {} ({}, {} free)",
            self.plan.dir.display(),
            self.plan.fs.kind,
            fmt_bytes(self.plan.fs.available)
        ))?;
        out.human(&format!("verdicts:  {}", super::verdict::RULE))
    }

    /// Opens a new file at `path` for reading and writing.
    fn create(&self, path: &std::path::Path, direct: bool, through: bool) -> Result<File> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .direct(direct)
            .write_through(through)
            .open(&self.engine, path)
            .wait()
            .with_context(|| format!("creating {}", path.display()))
    }

    /// Creates the data file (with O_DIRECT if the file system allows it),
    /// says what alignment direct I/O needs and what the plan is, then
    /// fills it with the engine and syncs it.
    fn create_data_file(&mut self) -> Result<()> {
        self.pb.set_message("creating the data file");
        let path = self.data_path.clone();
        let (file, direct_ok) = self.cleanup.create(&path, || {
            match OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .direct(true)
                .open(&self.engine, &path)
                .wait()
            {
                Ok(f) => Ok((f, true)),
                // The file system refuses O_DIRECT: go on without the direct modes.
                Err(e) if e.raw_os_error() == Some(crate::sys::DIRECT_REFUSED) => {
                    let _ = std::fs::remove_file(&path);
                    Ok((self.create(&path, false, false)?, false))
                }
                Err(e) => Err(e).with_context(|| format!("creating {}", path.display())),
            }
        })?;
        self.direct_ok = direct_ok;
        self.buf_align = AlignedBufPool::for_file(&file, CHUNK as usize, 0)?.align();
        self.describe(&file)?;
        let size = self.plan.size;
        match file.allocate(0, size).wait() {
            Ok(()) => {}
            Err(e)
                if e.raw_os_error()
                    .is_some_and(crate::sys::allocation_unsupported) =>
            {
                self.out.human(&format!(
                    "prealloc:  {} cannot preallocate here ({}: {e}); the prealloc modes are \
                     skipped",
                    self.plan.fs.kind,
                    crate::sys::ALLOCATE_NAME
                ))?;
                self.no_allocate = Some(format!(
                    "{} cannot preallocate ({})",
                    self.plan.fs.kind,
                    crate::sys::ALLOCATE_NAME
                ));
            }
            Err(e) => return Err(e).context("preallocating the data file"),
        }
        async_writes(&self.engine, &file, size, self.plan.seed, &self.pb)
            .context("writing the data file")?;
        file.sync_all().wait().context("syncing the data file")?;
        file.close().wait().context("closing the data file")
    }

    /// The alignment and plan lines.
    fn describe(&self, file: &File) -> Result<()> {
        let align = file.alignment();
        if self.direct_ok {
            self.out.human(&format!(
                "alignment: direct I/O needs buffers aligned to {} bytes and offsets/lengths to \
                 {} bytes (from {}); the probe's buffers (AlignedBufPool::for_file) are aligned \
                 to {}",
                align.memory, align.offset, align.source, self.buf_align
            ))?;
        } else {
            self.out.human(&format!(
                "alignment: {} refuses {} here ({}); the direct modes are skipped",
                self.plan.fs.kind,
                crate::sys::DIRECT_NAME,
                crate::sys::DIRECT_REFUSED_NAME
            ))?;
        }
        let p = &self.plan;
        self.out.human(&format!(
            "plan:      reads: {} x 64 KiB at random distinct offsets of a {} file (seed {}); \
             writes: {} in 64 KiB chunks, {WRITE_DEPTH} in flight",
            p.requests,
            fmt_bytes(p.size),
            p.seed,
            fmt_bytes(p.size)
        ))
    }

    fn facts(&self, grow_workers: Option<u64>) -> Facts {
        Facts {
            driver: self.info.kind,
            fs: self.plan.fs.kind.clone(),
            grow_workers,
            windows: cfg!(windows),
        }
    }

    /// Prints and keeps a mode's record.
    fn record(&mut self, mode: Mode, m: &Measurement, facts: &Facts) -> Result<()> {
        let r = Record::new(&self.run, mode, m, facts);
        self.out.record(&r)?;
        self.records.push(r);
        Ok(())
    }

    /// Why `mode` cannot run here, if it cannot: direct I/O refused, no
    /// preallocation, no valid data length.
    fn refusal(&self, mode: Mode) -> Option<String> {
        if mode.is_direct() && !self.direct_ok {
            return Some(format!(
                "no {} on {}",
                crate::sys::DIRECT_NAME,
                self.plan.fs.kind
            ));
        }
        match mode {
            Mode::Write(Alloc::Prealloc, _) => self.no_allocate.clone(),
            Mode::Write(Alloc::ValidData, _) => self.no_valid_data.clone(),
            _ => None,
        }
    }

    /// A mode that cannot run here: said, with the reason, and skipped.
    fn skip(&mut self, mode: Mode, why: &str, bytes: u64) -> Result<()> {
        self.out.human(&format!(
            "{:<w$}skipped: {why}",
            mode.name(),
            w = NAME_WIDTH
        ))?;
        if self.out.json {
            // Said on stderr with the notes: the JSON has one line per mode run.
            self.notes.push(format!("{} skipped: {why}", mode.name()));
        }
        self.pb.inc(bytes);
        Ok(())
    }

    /// The data file, buffered, for random access.
    fn open_buffered(&self) -> Result<File> {
        let path = &self.data_path;
        OpenOptions::new()
            .read(true)
            .access(Access::Random)
            .open(&self.engine, path)
            .wait()
            .with_context(|| format!("opening {}", path.display()))
    }

    /// The read modes, on the data file, which is removed afterwards.
    fn read_modes(&mut self) -> Result<()> {
        let path = self.data_path.clone();
        let files = ReadFiles {
            // Windows: without buffering, so that it never keeps the file's
            // pages cached (see `crate::sys::drop_cache`).
            std: crate::sys::direct(std::fs::OpenOptions::new().read(true), cfg!(windows))
                .open(&path)
                .with_context(|| format!("opening {}", path.display()))?,
            direct: if self.direct_ok {
                Some(
                    OpenOptions::new()
                        .read(true)
                        .direct(true)
                        .open(&self.engine, &path)
                        .wait()
                        .with_context(|| {
                            format!(
                                "opening {} with {}",
                                path.display(),
                                crate::sys::DIRECT_NAME
                            )
                        })?,
                )
            } else {
                None
            },
            // Windows: opened by each mode after its eviction (a cached
            // handle left open keeps the pages).
            buffered: if cfg!(windows) {
                None
            } else {
                Some(self.open_buffered()?)
            },
        };
        self.out.human("")?;
        self.out.human(&format!(
            "reads: {} x 64 KiB at scattered offsets, all queued before any completion is taken",
            self.plan.requests
        ))?;
        let facts = self.facts(None);
        for mode in READ_MODES {
            self.pb.set_message(mode.name());
            if let Some(why) = self.refusal(mode) {
                self.skip(mode, &why, self.plan.read_bytes())?;
                continue;
            }
            let m = self.read_mode(mode, &files)?;
            self.record(mode, &m, &facts)?;
        }
        drop(files.std);
        if let Some(f) = files.direct {
            f.close().wait().context("closing the data file")?;
        }
        if let Some(f) = files.buffered {
            f.close().wait().context("closing the data file")?;
        }
        self.cleanup.remove(&path)
    }

    /// One read mode: the page cache set up as the mode wants, then the
    /// reads (and, for async-buffered-cold, the same without the fast path).
    fn read_mode(&mut self, mode: Mode, files: &ReadFiles) -> Result<Measurement> {
        let Mode::Read(api, kind) = mode else {
            unreachable!("a read mode")
        };
        let cached_before = self.prepare_cache(mode, kind, &files.std)?;
        let offsets = &self.plan.offsets;
        let dirty_before = unwritten_pages(&files.std, offsets);
        let mut opened = None;
        let mut m = match api {
            Api::Async => {
                let f = match (kind, &files.direct, &files.buffered) {
                    (ReadKind::Direct, Some(direct), _) => direct,
                    (_, _, Some(buffered)) => buffered,
                    _ => opened.insert(self.open_buffered()?),
                };
                async_reads(&self.engine, f, offsets, &self.pb)
            }
            Api::Sync => sync_reads(
                &self.data_path,
                kind == ReadKind::Direct,
                self.buf_align,
                offsets,
                &self.pb,
            ),
        }
        .with_context(|| format!("mode {}", mode.name()))?;
        if let Some(f) = opened {
            f.close().wait().context("closing the data file")?;
        }
        m.cached_before = cached_before;
        m.dirty_before = dirty_before;
        // Windows has no page-cache fast path: nothing to compare there.
        if mode == Mode::Read(Api::Async, ReadKind::Cold) && !cfg!(windows) {
            // The fast path tried every read on this thread first: measure
            // the same reads without it, for the explanation.
            evict(&files.std)?;
            let alt = fast_path_off_reads(&self.builder, &self.data_path, offsets, &self.pb)
                .context("mode async-buffered-cold without the fast path")?;
            m.fast_path_off = Some((alt.queue, alt.complete, alt.inline));
        }
        Ok(m)
    }

    /// Evicts or warms the file as the mode needs; returns the share of the
    /// requested pages cached before the mode, noting a failed eviction or
    /// warm-up.
    fn prepare_cache(
        &mut self,
        mode: Mode,
        kind: ReadKind,
        std_file: &std::fs::File,
    ) -> Result<Option<f64>> {
        let (size, offsets) = (self.plan.size, &self.plan.offsets);
        match kind {
            ReadKind::Direct => Ok(residency(std_file, size).map(|p| cached_share(&p, offsets))),
            ReadKind::Cold => {
                evict(std_file)?;
                let Some(pages) = residency(std_file, size) else {
                    self.notes.push(format!(
                        "{}: could not verify the eviction ({})",
                        mode.name(),
                        crate::sys::RESIDENCY_UNKNOWN
                    ));
                    return Ok(None);
                };
                let share = cached_share(&pages, offsets);
                if share > 0.0 {
                    let why = if self.plan.fs.kind == "tmpfs" {
                        "tmpfs keeps its files in memory: they cannot be evicted"
                    } else {
                        "is the file mapped or in use by another process?"
                    };
                    self.notes.push(format!(
                        "{}: the eviction did not fully work: {} of the requested pages ({} of \
                         the file) were still in the page cache ({why})",
                        mode.name(),
                        pct(share),
                        pct(whole_share(&pages))
                    ));
                }
                Ok(Some(share))
            }
            ReadKind::Cached => {
                self.pb.set_message(format!("{} (warm-up)", mode.name()));
                warm(&self.data_path, &self.pb)?;
                self.pb.set_message(mode.name());
                let Some(pages) = residency(std_file, size) else {
                    return Ok(None);
                };
                let share = cached_share(&pages, offsets);
                if share < 1.0 {
                    self.notes.push(format!(
                        "{}: only {} of the requested pages stayed in the page cache after \
                         reading the file (too little free memory for a {} file?)",
                        mode.name(),
                        pct(share),
                        fmt_bytes(size)
                    ));
                }
                Ok(Some(share))
            }
        }
    }

    /// The write modes, each on a new file, removed afterwards.
    fn write_modes(&mut self) -> Result<()> {
        let size = self.plan.size;
        self.out.human("")?;
        self.out.human(&format!(
            "writes: {} sequentially in 64 KiB chunks, {WRITE_DEPTH} in flight, to a new file",
            fmt_bytes(size)
        ))?;
        let mut grow_workers: [Option<u64>; 3] = [None; 3];
        for &mode in WRITE_MODES {
            let Mode::Write(alloc, kind) = mode else {
                unreachable!("a write mode")
            };
            self.pb.set_message(mode.name());
            if let Some(why) = self.refusal(mode) {
                self.skip(mode, &why, size)?;
                continue;
            }
            let m = self.write_mode(mode)?;
            let k = kind as usize;
            let facts = self.facts(grow_workers[k]);
            if alloc == Alloc::Grow {
                grow_workers[k] = Some(m.kernel_workers);
            }
            self.record(mode, &m, &facts)?;
        }
        Ok(())
    }

    /// One write mode: a new file (preallocated or not), written, synced,
    /// closed and removed.
    fn write_mode(&self, mode: Mode) -> Result<Measurement> {
        let Mode::Write(alloc, kind) = mode else {
            unreachable!("a write mode")
        };
        let (size, path) = (self.plan.size, &self.write_path);
        let file = self.cleanup.create(path, || {
            self.create(
                path,
                kind == WriteKind::Direct,
                kind == WriteKind::WriteThrough,
            )
        })?;
        prepare_space(&file, alloc, size)?;
        let mut m = async_writes(&self.engine, &file, size, self.plan.seed ^ 0x5eed, &self.pb)
            .with_context(|| format!("mode {}", mode.name()))?;
        let t = Instant::now();
        file.sync_data()
            .wait()
            .with_context(|| format!("mode {}: {}", mode.name(), crate::sys::SYNC_NAME))?;
        m.fsync = Some(t.elapsed());
        file.close()
            .wait()
            .with_context(|| format!("mode {}: closing", mode.name()))?;
        self.cleanup.remove(path)?;
        Ok(m)
    }

    /// The notes and the summary (with --json, the notes on stderr only).
    fn finish(self, json: bool) -> Result<()> {
        if json {
            for n in &self.notes {
                eprintln!("note: {n}");
            }
            return Ok(());
        }
        if !self.notes.is_empty() {
            self.out.line("")?;
            for n in &self.notes {
                self.out.line(&format!("note: {n}"))?;
            }
        }
        self.out.line("")?;
        self.out
            .line(&summary(&self.records, self.info.kind, &self.plan.fs.kind))?;
        drop(self.cleanup);
        Ok(())
    }
}

/// Makes room for a write mode's `size` bytes as `alloc` says: nothing
/// (the writes grow the file), a preallocation, or (Windows) the space
/// preallocated, or at least the size set, and the valid data length
/// moved to its end.
fn prepare_space(file: &File, alloc: Alloc, size: u64) -> Result<()> {
    let allocate = || {
        file.allocate(0, size).wait().with_context(|| {
            format!(
                "preallocating {} ({})",
                fmt_bytes(size),
                crate::sys::ALLOCATE_NAME
            )
        })
    };
    match alloc {
        Alloc::Grow => Ok(()),
        Alloc::Prealloc => allocate(),
        Alloc::ValidData => set_valid_data(file, size),
    }
}

/// Sets the file's size to `size` (reserving the space where the file
/// system can) and its valid data length to the same (`SetFileValidData`):
/// the writes that follow extend nothing.
#[cfg(windows)]
fn set_valid_data(file: &File, size: u64) -> Result<()> {
    match file.allocate(0, size).wait() {
        Ok(()) => {}
        Err(e)
            if e.raw_os_error()
                .is_some_and(crate::sys::allocation_unsupported) =>
        {
            file.set_len(size)
                .wait()
                .context("setting the file's size")?;
        }
        Err(e) => return Err(e).context("preallocating before SetFileValidData"),
    }
    file.set_valid_data(size)
        .wait()
        .context("moving the valid data length (SetFileValidData)")
}

/// Not reached: the valid-data modes are Windows'.
#[cfg(not(windows))]
fn set_valid_data(_file: &File, _size: u64) -> Result<()> {
    anyhow::bail!("the valid data length is Windows' notion")
}

/// Why the valid-data modes cannot run, if they cannot: the process must
/// hold `SeManageVolumePrivilege` (an elevated administrator's does), which
/// the probe enables for itself.
#[cfg(windows)]
fn valid_data_refusal() -> Option<String> {
    match overlapped::enable_manage_volume_privilege() {
        Ok(true) => None,
        Ok(false) => Some(
            "SetFileValidData needs SeManageVolumePrivilege, which this process lacks (run \
             from an elevated prompt)"
                .into(),
        ),
        Err(e) => Some(format!(
            "SeManageVolumePrivilege could not be enabled ({e})"
        )),
    }
}

/// No valid data length outside Windows: nothing to refuse.
#[cfg(not(windows))]
fn valid_data_refusal() -> Option<String> {
    None
}

/// The data file, opened for the read modes.
struct ReadFiles {
    /// For residency, eviction and nothing else.
    std: std::fs::File,
    /// With O_DIRECT, when the file system allows it.
    direct: Option<File>,
    /// Buffered, random access (Windows: `None`, each mode opens its own).
    buffered: Option<File>,
}
