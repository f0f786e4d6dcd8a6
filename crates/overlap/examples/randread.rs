//! Random 4 KiB O_DIRECT reads at a fixed queue depth through a completion
//! port: one thread keeps `depth` reads in flight and resubmits as each one
//! completes. Prints IOPS and CPU time per read.
//!
//! `cargo run --release -p overlapped --example randread -- FILE [depth] [reads]`
use overlapped::{AlignedBufPool, Engine, OpenOptions, Port};
use std::time::Instant;

#[cfg(unix)]
fn cpu_s() -> f64 {
    // SAFETY: getrusage writes into the local struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a local rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Not measured here (`getrusage` is Unix's): NaN, printed as such.
#[cfg(not(unix))]
fn cpu_s() -> f64 {
    f64::NAN
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: randread FILE [depth] [reads]")?;
    let depth: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(32);
    let reads: u64 = args
        .next()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(200_000);
    let engine = Engine::new()?;
    let file = OpenOptions::new()
        .read(true)
        .direct(true)
        .open(&engine, &path)
        .wait()?;
    let blocks = file.metadata().wait()?.len / 4096;
    let pool = AlignedBufPool::for_file(&file, 4096, depth)?;
    let port: Port<overlapped::AlignedBuf> = Port::new(&engine);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next_off = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % blocks) * 4096
    };
    let (t0, c0) = (Instant::now(), cpu_s());
    let mut submitted = 0u64;
    while submitted < depth as u64 && submitted < reads {
        port.read_at(&file, pool.get(), next_off(), submitted)
            .map_err(|(e, _)| e)?;
        submitted += 1;
    }
    let mut done = 0u64;
    while let Some(c) = port.next() {
        c.result?;
        done += 1;
        if submitted < reads {
            port.read_at(&file, c.buf, next_off(), submitted)
                .map_err(|(e, _)| e)?;
            submitted += 1;
        }
    }
    let (secs, cpu) = (t0.elapsed().as_secs_f64(), cpu_s() - c0);
    println!(
        "driver {} depth {depth}: {:.0} IOPS, cpu_us_per_op {:.2}, {:?}",
        engine.driver().kind,
        done as f64 / secs,
        cpu * 1e6 / done as f64,
        engine.stats()
    );
    if std::env::var_os("RANDREAD_THREADS").is_some() {
        for t in std::fs::read_dir("/proc/self/task")?.flatten() {
            let comm = std::fs::read_to_string(t.path().join("comm"))?;
            let status = std::fs::read_to_string(t.path().join("status"))?;
            let sw: Vec<&str> = status
                .lines()
                .filter(|l| l.contains("ctxt_switches"))
                .collect();
            println!("{} {:?}", comm.trim(), sw);
        }
    }
    Ok(())
}
