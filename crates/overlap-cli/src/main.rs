//! `overlap`: probe and benchmark really asynchronous file I/O.

use anyhow::Result;
use clap::{Parser, Subcommand};

mod bench;
mod journal;
mod probe;

/// Really asynchronous file I/O on Linux, measured honestly.
#[derive(Parser, Debug)]
#[command(name = "overlap", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Does asynchronous I/O really overlap on this disk? The KB 156932
    /// `asynchio` experiment on your own files, explained.
    Probe(probe::ProbeArgs),
    /// Measure IOPS, latency and CPU per operation, fio-style, optionally
    /// side by side with fio itself.
    Bench(bench::BenchArgs),
    /// The write-ahead log: append stdin lines, dump, verify and benchmark
    /// a journal directory.
    Journal(journal::JournalArgs),
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Probe(args) => probe::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Journal(args) => journal::run(args),
    }
}
