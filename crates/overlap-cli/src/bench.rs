//! `overlap bench`: fio-style measurements of the overlap engine (io_uring or
//! the thread pool) and of plain `pread`/`pwrite`, optionally side by side
//! with fio itself on the same file.
//!
//! Vocabulary (also in docs/benchmarking.md):
//! - `--iodepth N`: one requester keeps N operations in flight (engine: one
//!   thread with a completion port, or N futures; sync: N threads, as fio's
//!   psync with `numjobs=N`).
//! - `--concurrency N`: N independent requesters, each with one operation in
//!   flight (engine: N tokio tasks on a multi-thread runtime with one worker
//!   per core, or with `--requester threads` N OS threads each blocking in
//!   `.wait()`; sync: N threads). Both given: concurrency × iodepth in flight
//!   (`--requester threads` refuses an iodepth above 1).

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};

mod claims;
mod datafile;
mod fio;
mod measure;
mod options;
mod plan;
mod plot;
mod report;
mod run;
mod tokio_baselines;

pub(crate) use report::BenchResult;

pub use options::BenchArgs;
pub(crate) use options::{BenchOpts, Driver, Preset, Requester, Rw};
pub(crate) use plan::{plan, Job, Plan, DEFAULT_RANDOM_OPS};

/// Runs `overlap bench`.
pub fn run(args: BenchArgs) -> Result<()> {
    let args = *args.opts;
    let mut plan = plan(&args)?;
    resolve_drivers(&mut plan)?;
    let interactive = !args.json && std::io::stderr().is_terminal();
    let mut data = datafile::DataFiles::new(
        args.dir.clone().unwrap_or_else(|| PathBuf::from(".")),
        args.file.clone(),
        args.size.is_some(),
        plan.size,
    );
    let outcome = run_plan(&args, &plan, &mut data, interactive);
    let cleanup = data.cleanup();
    let results = outcome?;
    cleanup?;
    if !args.json {
        // The rows were printed as each result came in.
        report::print_ratios(&results);
    }
    if let Some(path) = &args.plot {
        plot::draw(path, &results, plan.swept)?;
        if !args.json {
            println!("plot written to {}", path.display());
        }
    }
    Ok(())
}

/// Whether the engine can run on `driver` here: `Err(why)` if not.
fn engine_available(driver: Driver) -> std::result::Result<overlapped::DriverInfo, String> {
    let choice = match driver {
        Driver::Uring => overlapped::DriverChoice::Uring,
        Driver::Aio => overlapped::DriverChoice::Aio,
        Driver::Pool => overlapped::DriverChoice::Pool,
        Driver::Iocp => overlapped::DriverChoice::Iocp,
        _ => overlapped::DriverChoice::Auto,
    };
    overlapped::Engine::builder()
        .driver(choice)
        .build()
        .map(|e| e.driver().clone())
        .map_err(|e| e.to_string())
}

/// Replaces `auto` with the driver the engine chooses (saying which and
/// why), and drops the jobs of drivers unavailable here (saying so), so a
/// sweep such as `uring,pool,sync` runs what it can.
fn resolve_drivers(plan: &mut Plan) -> Result<()> {
    let mut verdicts: Vec<(Driver, std::result::Result<Driver, String>)> = Vec::new();
    for job in &plan.jobs {
        if verdicts.iter().any(|(d, _)| *d == job.driver) {
            continue;
        }
        let verdict = match job.driver {
            Driver::Auto => {
                let info = engine_available(Driver::Auto)
                    .map_err(|e| anyhow::anyhow!("the engine could not start: {e}"))?;
                eprintln!("overlap bench: no --driver given: the engine chose {info}");
                Ok(match info.kind {
                    overlapped::DriverKind::Uring => Driver::Uring,
                    overlapped::DriverKind::Aio => Driver::Aio,
                    overlapped::DriverKind::Iocp => Driver::Iocp,
                    _ => Driver::Pool,
                })
            }
            d @ (Driver::Uring | Driver::Aio | Driver::Iocp) => engine_available(d).map(|_| d),
            d => Ok(d),
        };
        if let Err(why) = &verdict {
            eprintln!(
                "overlap bench: skipped --driver {}: {why}",
                job.driver.as_str()
            );
        }
        verdicts.push((job.driver, verdict));
    }
    let total = plan.jobs.len();
    plan.jobs.retain_mut(
        |job| match verdicts.iter().find(|(d, _)| *d == job.driver) {
            Some((_, Ok(d))) => {
                job.driver = *d;
                true
            }
            _ => false,
        },
    );
    if plan.jobs.is_empty() && total > 0 {
        bail!("no job left to run: every driver asked for is unavailable here (see above)");
    }
    Ok(())
}

fn run_plan(
    args: &BenchOpts,
    plan: &Plan,
    data: &mut datafile::DataFiles,
    interactive: bool,
) -> Result<Vec<BenchResult>> {
    let fio_bin = args.compare_fio.then(fio::find).flatten();
    if args.compare_fio && fio_bin.is_none() {
        eprintln!(
            "fio not found on PATH: running overlap alone (install it with `apt-get install fio`, \
             or the package of your distribution, to get the comparison)"
        );
    }
    let mut results = Vec::new();
    let mut fio_done: Vec<fio::FioJob> = Vec::new();
    let total = plan.jobs.len();
    for (n, job) in plan.jobs.iter().enumerate() {
        let target = data.target_for(job)?;
        if !args.json {
            announce(n, total, job);
        }
        let res = run::run_job(job, &target, interactive)
            .with_context(|| format!("{} job on {}", job.driver.as_str(), target.path.display()))?;
        let r = BenchResult::from_overlap(plan.preset, job, &target, res);
        show(&r, args.json, results.is_empty())?;
        results.push(r);

        if let Some(bin) = &fio_bin {
            for fj in fio::equivalents(job, &target) {
                if fio_done.iter().any(|d| d.same_as(&fj)) {
                    continue;
                }
                let target = data.target_for(job)?; // fresh file again for write jobs
                if !args.json {
                    eprintln!("      fio: {}", fj.command_line(bin, &target.path));
                }
                match fio::run(bin, &fj, &target, plan.preset, interactive) {
                    Ok(r) => {
                        show(&r, args.json, results.is_empty())?;
                        results.push(r);
                    }
                    // fio's own failure costs the comparison, not the results.
                    Err(e) => eprintln!("fio: {e:#}; going on without this comparison"),
                }
                fio_done.push(fj);
            }
        }
    }
    Ok(results)
}

/// Says which job starts, the `n`th (from 0) of `total`, on standard error.
fn announce(n: usize, total: usize, job: &Job) {
    eprintln!(
        "[{}/{}] overlap {} {} bs={} iodepth={} concurrency={}{}{}{}",
        n + 1,
        total,
        job.driver.as_str(),
        job.rw.as_str(),
        job.bs,
        job.iodepth,
        job.concurrency,
        if job.requester == Requester::Threads {
            " threads"
        } else {
            ""
        },
        if job.direct { " direct" } else { "" },
        if job.rw.is_write() {
            if job.prealloc {
                " preallocated"
            } else {
                " growing"
            }
        } else {
            ""
        }
    );
}

/// Prints a result as soon as it is known: a JSON line, or a table row
/// (after the header, for the first).
fn show(r: &BenchResult, json: bool, first: bool) -> Result<()> {
    if json {
        return report::print_json(r);
    }
    if first {
        report::print_header();
    }
    report::print_row(r);
    Ok(())
}

/// Where a job reads or writes.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub path: PathBuf,
    /// Usable bytes: the file (or the part of it the job covers).
    pub size: u64,
}

impl Target {
    pub(crate) fn blocks(&self, bs: usize) -> u64 {
        self.size / bs as u64
    }
}

/// The default number of operations for a job on `size` bytes.
pub(crate) fn default_ops(job: &Job, size: u64) -> u64 {
    if job.rw.is_random() {
        DEFAULT_RANDOM_OPS
    } else {
        (size / job.bs as u64).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan_of(args: &[&str]) -> Result<Plan> {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            opts: BenchOpts,
        }
        let cli = <Cli as clap::Parser>::try_parse_from(
            std::iter::once("bench").chain(args.iter().copied()),
        )?;
        plan(&cli.opts)
    }

    #[test]
    fn threads_requester_pairs_with_psync_numjobs_then_io_uring() {
        let p = plan_of(&[
            "--requester",
            "threads",
            "--concurrency",
            "4,16",
            "--driver",
            "uring,pool,sync",
        ])
        .unwrap();
        assert_eq!(p.swept, Some("concurrency"));
        assert_eq!(p.jobs.len(), 6);
        let target = Target {
            path: PathBuf::from("/nonexistent"),
            size: 1 << 20,
        };
        for job in &p.jobs {
            assert_eq!(job.requester, Requester::Threads);
            assert_eq!(job.iodepth, 1);
            let n = job.concurrency;
            let got: Vec<_> = fio::equivalents(job, &target)
                .iter()
                .map(|f| (f.ioengine, f.iodepth, f.numjobs))
                .collect();
            match job.driver {
                Driver::Sync => assert_eq!(got, [("psync", 1, n)]),
                _ => assert_eq!(got, [("psync", 1, n), ("io_uring", n, 1)]),
            }
        }
        // Without --requester threads, the tokio rows keep their pairing.
        let p = plan_of(&["--concurrency", "4", "--driver", "uring"]).unwrap();
        let got: Vec<_> = fio::equivalents(&p.jobs[0], &target)
            .iter()
            .map(|f| (f.ioengine, f.iodepth, f.numjobs))
            .collect();
        assert_eq!(got, [("io_uring", 4, 1)]);
    }

    #[test]
    fn threads_requester_refuses_a_depth() {
        let e = plan_of(&["--requester", "threads", "--iodepth", "2"]).unwrap_err();
        assert!(e.to_string().contains("--iodepth 2 is refused"), "{e}");
        assert!(plan_of(&["--requester", "threads", "--preset", "scale"]).is_ok());
    }
}
