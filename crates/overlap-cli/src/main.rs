//! `overlap`: probe and benchmark really asynchronous file I/O, and serve
//! files with it.

use anyhow::Result;
use clap::{Parser, Subcommand};

mod bench;
mod cleanup;
mod journal;
mod probe;
mod serve;
mod size;
mod sys;
mod util;

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
    /// Serve a directory over HTTP (axum + tower-http's ServeDir), its
    /// files read through the engine, or with `--io tokio-fs|blocking` to
    /// compare; `/health` touches no file. nginx's limits: header,
    /// keep-alive and send timeouts, a cap on connections.
    Serve(serve::ServeArgs),
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Probe(args) => probe::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Journal(args) => journal::run(args),
        Command::Serve(args) => serve::run(args),
    }
}

/// Whether the error is a write to a closed pipe (`overlap ... | head`).
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            || c.downcast_ref::<serde_json::Error>()
                .is_some_and(|j| j.io_error_kind() == Some(std::io::ErrorKind::BrokenPipe))
    })
}

fn main() -> std::process::ExitCode {
    match run(Cli::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // The reader went away: nothing left to say to it.
        Err(e) if is_broken_pipe(&e) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
