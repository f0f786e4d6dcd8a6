//! `overlap journal`: append to, dump, verify and benchmark a journal
//! (the write-ahead log of `overlapped-journal`).
//!
//! - `append DIR [--level accepted|written|durable]`: one record per line
//!   of standard input; each record's LSN is printed on standard output as
//!   soon as it is acknowledged at the level (default durable).
//! - `dump DIR [--json]`: the records; with `--json`, one object per line
//!   with `lsn` and `data` (UTF-8 text) or `data_b64` (anything else).
//! - `verify DIR`: what recovery would do; exits non-zero when corrupt.
//! - `repair DIR [--dry-run]`: salvage a damaged journal: drop each damaged
//!   stretch, keep every valid record after it, save what it drops to a
//!   file in the journal directory, and list all of it.
//!
//! When the engine is not on io_uring (a seccomp filter blocks it, or
//! `OVERLAP_DRIVER` chose another driver), `append` and `bench` say so once
//! on stderr, with the reason, as `overlap bench` does; `-q` silences it.
//! `-v` says the driver also when it is io_uring.
//! - `bench`: append latency and throughput, and group commit against a
//!   baseline that calls `fdatasync` after every record (see [`bench::bench`]).

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use overlapped_journal::{Journal, Level, Lsn, Options, RecoveryMode, SyncMethod};

use crate::size::fmt_bytes;

mod bench;
mod inspect;

use bench::{bench, BenchArgs};
use inspect::{dump, repair, verify};

/// Options of `overlap journal`.
#[derive(Args, Debug)]
pub struct JournalArgs {
    /// Say more on stderr (the engine driver the journal runs on, also
    /// when it is io_uring).
    #[arg(short, long, global = true)]
    verbose: bool,
    /// Say nothing on stderr about the engine's driver, not even that it
    /// fell back from io_uring.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    quiet: bool,
    #[command(subcommand)]
    cmd: JournalCmd,
}

#[derive(Subcommand, Debug)]
enum JournalCmd {
    /// Append standard input, one record per line (at most 1 MiB each,
    /// the newline not included), printing each record's LSN as soon as it
    /// is acknowledged at `--level`: `accepted` (in the journal's memory:
    /// lost if the process dies), `written` (handed to the kernel: survives
    /// the process, not a power loss) or `durable` (on stable storage:
    /// survives a power loss). Segment files are preallocated in full
    /// (`--segment-mib`, 64 MiB by default) and the next one is made ahead
    /// of need, so even a few records occupy two segments (128 MiB by
    /// default). Exits non-zero if any line was not appended or any LSN not
    /// printed, saying whether the journal or standard output failed.
    Append {
        /// The journal directory (created if needed).
        dir: PathBuf,
        /// Acknowledge at this level.
        #[arg(long, value_enum, default_value_t = LevelArg::Durable)]
        level: LevelArg,
        #[command(flatten)]
        open: OpenArgs,
    },
    /// Print the records, one per line: `LSN<TAB>payload`. A payload that
    /// is UTF-8 without control characters and does not start with `"` is
    /// printed as it is; any other is printed quoted, with `\n`, `\t`,
    /// `\\`, `\"` and `\xNN` escapes, so the two never look alike. Works
    /// while an appender runs (reading the durable prefix).
    Dump {
        /// The journal directory.
        dir: PathBuf,
        /// One JSON object per line: `lsn` and `data` (UTF-8) or `data_b64`.
        #[arg(long)]
        json: bool,
        /// Treat any damage as an error.
        #[arg(long)]
        strict: bool,
    },
    /// Report what recovery would do; exit status 1 when the journal is
    /// corrupt or damaged in a way only `repair` cuts. Works while an
    /// appender runs (checking the durable prefix).
    Verify {
        /// The journal directory.
        dir: PathBuf,
        /// Strict recovery: any damage is corruption.
        #[arg(long)]
        strict: bool,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Salvage a damaged journal: drop each damaged stretch, wherever it is
    /// (even before the durable point), and keep every valid record after
    /// it (resynchronising on the next valid record); rewrite bad segment
    /// headers, and remove segment files outside the log that hold data.
    /// The whole plan is made first and listed (`dropped<TAB>FROM<TAB>TO<TAB>
    /// BYTES<TAB>damage`, `rewrite-header<TAB>SEQ`, `remove-segment<TAB>SEQ`);
    /// before anything is changed, every byte it drops, rewrites or removes
    /// is saved to a new `DIR/dropped-<N>.bin`. No LSN is handed out twice:
    /// new records continue after everything the log holds and after the
    /// checkpoint's durable point. Exits 1, naming the LSNs, when records
    /// acknowledged durable are lost (the repair is still made).
    Repair {
        /// The journal directory.
        dir: PathBuf,
        /// Say what a repair would do and change nothing.
        #[arg(long)]
        dry_run: bool,
        /// JSON lines: one `{"dropped": ...}` per dropped stretch, then the
        /// report.
        #[arg(long)]
        json: bool,
    },
    /// Measure append latency, throughput and group commit.
    Bench(BenchArgs),
}

#[derive(Args, Debug, Clone)]
struct OpenArgs {
    /// Segment size for a new journal: a bare number counts MiB (64), or a
    /// size with a binary unit (64M, 1G).
    #[arg(long = "segment-mib", value_name = "MIB", default_value = "64", value_parser = parse_mib)]
    segment_bytes: u64,
    /// Log buffer size (a power of two): a bare number counts MiB (16), or
    /// a size with a binary unit (16M, 1G).
    #[arg(long = "buffer-mib", value_name = "MIB", default_value = "16", value_parser = parse_mib)]
    buffer_bytes: u64,
    /// Buffered I/O instead of O_DIRECT.
    #[arg(long)]
    buffered: bool,
    /// How writes become durable: auto (O_DSYNC with direct I/O, else
    /// fdatasync), fdatasync (one per group commit), or dsync.
    #[arg(long, value_enum, default_value_t = SyncArg::Auto)]
    sync: SyncArg,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum SyncArg {
    Auto,
    Fdatasync,
    Dsync,
}

/// A size option counted in MiB (see [`crate::size::parse_in`]).
fn parse_mib(s: &str) -> std::result::Result<u64, crate::size::SizeError> {
    crate::size::parse_in(s, 1 << 20)
}

impl OpenArgs {
    /// The journal's options; says the engine's driver (see [`Say`]).
    fn options(&self, say: Say) -> Result<Options> {
        if !(1 << 20..=1 << 40).contains(&self.segment_bytes) {
            bail!(
                "--segment-mib must be between 1 MiB and 1 TiB (1 to 1048576 MiB), not {}",
                fmt_bytes(self.segment_bytes)
            );
        }
        if !self.buffer_bytes.is_power_of_two() || !(1 << 20..=4 << 30).contains(&self.buffer_bytes)
        {
            bail!(
                "--buffer-mib must be a power of two between 1 MiB and 4 GiB (1 to 4096 MiB), not {}",
                fmt_bytes(self.buffer_bytes)
            );
        }
        let buffer_bytes = usize::try_from(self.buffer_bytes).context("--buffer-mib")?;
        let opts = Options::default();
        // The journal's engine, made here so that its driver (and why not
        // io_uring, in a container) can be said on stderr (`-v`); if it
        // cannot start, Journal::open reports the error.
        let opts = match overlapped::Engine::new() {
            Ok(engine) => {
                say.driver(engine.driver());
                opts.engine(engine)
            }
            Err(_) => opts,
        };
        Ok(opts
            .segment_size(self.segment_bytes)
            .buffer_bytes(buffer_bytes)
            .max_record_bytes(overlapped_journal::DEFAULT_MAX_RECORD_BYTES.min(buffer_bytes / 4))
            .direct_io(!self.buffered)
            .sync(match self.sync {
                SyncArg::Auto => SyncMethod::Auto,
                SyncArg::Fdatasync => SyncMethod::Fdatasync,
                SyncArg::Dsync => SyncMethod::Dsync,
            }))
    }
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum LevelArg {
    Accepted,
    Written,
    Durable,
}

impl From<LevelArg> for Level {
    fn from(l: LevelArg) -> Level {
        match l {
            LevelArg::Accepted => Level::Accepted,
            LevelArg::Written => Level::Written,
            LevelArg::Durable => Level::Durable,
        }
    }
}

/// What is said on stderr about the engine's driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Say {
    /// Nothing (`-q`).
    Quiet,
    /// A fallback from io_uring, with its reason (the default).
    Fallback,
    /// The driver, whatever it is (`-v`).
    Verbose,
}

impl Say {
    /// Says `info` on stderr, once, as this level wants: a fallback from
    /// the system's own driver (io_uring; I/O completion ports on Windows)
    /// is said unless quiet (as `overlap bench` says the engine's choice),
    /// the system's own only when verbose.
    fn driver(self, info: &overlapped::DriverInfo) {
        // Once per process (`bench` opens a journal per run).
        static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        let fell_back = info.fallback.is_some();
        match self {
            Say::Verbose => eprintln!("overlap journal: engine driver {info}"),
            Say::Fallback if fell_back => {
                eprintln!(
                    "overlap journal: not on {}: the engine chose {info}",
                    crate::sys::NATIVE_DRIVER
                )
            }
            _ => {}
        }
    }
}

/// Runs `overlap journal`.
pub fn run(args: JournalArgs) -> Result<()> {
    let say = match (args.quiet, args.verbose) {
        (true, _) => Say::Quiet,
        (_, true) => Say::Verbose,
        _ => Say::Fallback,
    };
    match args.cmd {
        JournalCmd::Append { dir, level, open } => append(&dir, level.into(), &open, say),
        JournalCmd::Dump { dir, json, strict } => dump(&dir, json, strict),
        JournalCmd::Verify { dir, strict, json } => verify(&dir, strict, json),
        JournalCmd::Repair { dir, dry_run, json } => repair(&dir, dry_run, json),
        JournalCmd::Bench(b) => bench(b, say),
    }
}

fn mode(strict: bool) -> RecoveryMode {
    if strict {
        RecoveryMode::Strict
    } else {
        RecoveryMode::TolerateTornTail
    }
}

/// Prints the cut recovery made, if any (never silent).
fn report_cut(dir: &Path, r: &overlapped_journal::RecoveryReport) {
    if let Some(at) = r.truncated_at {
        let _ = writeln!(
            std::io::stderr(),
            "overlap journal: recovery cut {} at LSN {at} ({}); nothing valid followed it and it \
             is past the durable point {} recorded in the checkpoint (a torn write); new records \
             continue at LSN {}, after what the torn write left",
            dir.display(),
            r.damage.as_deref().unwrap_or("damage"),
            r.checkpoint_durable_lsn,
            r.end_lsn
        );
    }
}

fn append(dir: &Path, level: Level, open: &OpenArgs, say: Say) -> Result<()> {
    let opts = open.options(say)?;
    let max = opts.max_record_bytes;
    let j = Arc::new(
        Journal::open(dir, opts)
            .with_context(|| format!("opening the journal {}", dir.display()))?,
    );
    report_cut(dir, j.recovery_report());
    // A printer thread acknowledges in order while the main thread appends.
    let (tx, rx) = std::sync::mpsc::sync_channel::<Lsn>(65536);
    let printer = spawn_printer(j.clone(), level, rx);
    let mut n = 0u64;
    let result = append_lines(dir, &j, max, &tx, &mut n);
    drop(tx);
    let (printed, printer_res) = printer
        .join()
        .map_err(|_| anyhow::anyhow!("printer thread panicked"))?;
    let j = Arc::try_unwrap(j).map_err(|_| anyhow::anyhow!("journal still shared"))?;
    let closed = j.close();
    let partial = |e: anyhow::Error| {
        e.context(format!(
            "stopped after appending {n} line(s), {printed} acknowledged as {level}"
        ))
    };
    result.map_err(partial)?;
    printer_res.map_err(partial)?;
    closed.with_context(|| format!("closing the journal {}", dir.display()))?;
    Ok(())
}

/// The printer thread of `append`: prints each LSN from `rx` once it is at
/// `level`; returns how many it printed and why it stopped early, if it did.
fn spawn_printer(
    j: Arc<Journal>,
    level: Level,
    rx: std::sync::mpsc::Receiver<Lsn>,
) -> std::thread::JoinHandle<(u64, Result<()>)> {
    std::thread::spawn(move || -> (u64, Result<()>) {
        let stdout = std::io::stdout();
        let mut printed = 0u64;
        for lsn in rx {
            if let Err(e) = j.wait_blocking(lsn, level) {
                let e = anyhow::Error::from(e)
                    .context(format!("the journal: waiting for LSN {lsn} to be {level}"));
                return (printed, Err(e));
            }
            let mut o = stdout.lock();
            if let Err(e) = writeln!(o, "{lsn}").and_then(|()| o.flush()) {
                // Not an io::Error in the chain: a closed pipe here is a
                // failure (records not reported), not a quiet exit.
                let e = anyhow::anyhow!(
                    "standard output failed ({e}); the journal is fine, but LSN {lsn} and \
                     later could not be reported"
                );
                return (printed, Err(e));
            }
            printed += 1;
        }
        (printed, Ok(()))
    })
}

/// Appends each line of standard input (at most `max` bytes) to `j` and
/// sends its LSN to the printer; counts the lines appended in `n`.
fn append_lines(
    dir: &Path,
    j: &Journal,
    max: usize,
    tx: &std::sync::mpsc::SyncSender<Lsn>,
    n: &mut u64,
) -> Result<()> {
    let stdin = std::io::stdin();
    let mut line = Vec::new();
    let mut input = stdin.lock();
    loop {
        line.clear();
        match input.read_until(b'\n', &mut line) {
            Ok(0) => break Ok(()),
            Ok(_) => {}
            Err(e) => break Err(anyhow::anyhow!("reading standard input: {e}")),
        }
        if line.last() == Some(&b'\n') {
            line.pop();
        }
        if line.len() > max {
            break Err(anyhow::anyhow!(
                "line {}: {} bytes exceeds the record limit of {max} bytes",
                *n + 1,
                line.len()
            ));
        }
        match j.append(&line) {
            Ok(lsn) => {
                *n += 1;
                if tx.send(lsn).is_err() {
                    break Ok(()); // the printer failed; its error follows
                }
            }
            Err(e) => {
                break Err(anyhow::Error::from(e).context(format!(
                    "the journal {}: appending line {}",
                    dir.display(),
                    *n + 1
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> std::result::Result<JournalArgs, clap::Error> {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            journal: JournalArgs,
        }
        <Cli as clap::Parser>::try_parse_from(
            std::iter::once("journal").chain(args.iter().copied()),
        )
        .map(|c| c.journal)
    }

    fn open_of(args: &[&str]) -> OpenArgs {
        match parse(args).unwrap().cmd {
            JournalCmd::Append { open, .. } => open,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn mib_options_take_a_bare_number_of_mib_or_a_size() {
        assert_eq!(open_of(&["append", "d"]).segment_bytes, 64 << 20);
        assert_eq!(open_of(&["append", "d"]).buffer_bytes, 16 << 20);
        for (arg, bytes) in [
            ("8", 8u64 << 20),
            ("8M", 8 << 20),
            ("1G", 1 << 30),
            ("2048k", 2 << 20),
        ] {
            let o = open_of(&["append", "d", "--segment-mib", arg]);
            assert_eq!(o.segment_bytes, bytes, "{arg}");
        }
        let e = parse(&["append", "d", "--segment-mib", "512K"]).unwrap_err();
        assert!(e.to_string().contains("not a whole number of 1 MiB"), "{e}");
        let e = parse(&["append", "d", "--buffer-mib", "1.5"]).unwrap_err();
        assert!(e.to_string().contains("fractions are refused"), "{e}");
    }

    #[test]
    fn record_bytes_take_a_size() {
        for (arg, bytes) in [("100", 100usize), ("4k", 4096), ("1MiB", 1 << 20)] {
            match parse(&["bench", "--record-bytes", arg]).unwrap().cmd {
                JournalCmd::Bench(b) => assert_eq!(b.record_bytes, bytes, "{arg}"),
                other => panic!("{other:?}"),
            }
        }
        assert!(parse(&["bench", "--record-bytes", "-1"]).is_err());
    }

    #[test]
    fn out_of_range_sizes_are_refused_before_anything_is_made() {
        let e = open_of(&["append", "d", "--segment-mib", "0"])
            .options(Say::Quiet)
            .unwrap_err();
        assert!(e.to_string().contains("--segment-mib"), "{e}");
        let e = open_of(&["append", "d", "--buffer-mib", "3"])
            .options(Say::Quiet)
            .unwrap_err();
        assert!(e.to_string().contains("power of two"), "{e}");
    }
}
