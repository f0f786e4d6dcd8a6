//! Submits writes as fast as possible, each with a freshly allocated buffer,
//! and reports the peak resident memory: backpressure must keep it near the
//! in-flight budget however fast the caller submits.
//!
//! `cargo run --release -p overlapped --example write_flood -- DIR [total_MiB] [budget_MiB]`

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "an example: a failure ends it, with its message"
)]

use overlapped::{Engine, OpenOptions, Port};

#[cfg(unix)]
fn peak_rss_mib() -> f64 {
    // SAFETY: getrusage writes into the local struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a local rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    ru.ru_maxrss as f64 / 1024.0
}

/// Not measured here (`getrusage` is Unix's): NaN, printed as such.
#[cfg(not(unix))]
fn peak_rss_mib() -> f64 {
    f64::NAN
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = args
        .next()
        .ok_or("usage: write_flood DIR [total_MiB] [budget_MiB]")?;
    let total_mib: u64 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(2048);
    let budget_mib: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(64);
    let engine = Engine::builder()
        .max_inflight_bytes(budget_mib << 20)
        .build()?;
    let path = std::path::Path::new(&dir).join("overlap-write-flood.dat");
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&engine, &path)
        .wait()?;
    let port: Port<Vec<u8>> = Port::new(&engine);
    let chunk = 1u64 << 20;
    let t0 = std::time::Instant::now();
    let (total, drainer) = (total_mib * (1 << 20), port.clone());
    // A collector thread takes completions; the submitter never waits for it.
    let collector = std::thread::spawn(move || {
        let mut n = 0u64;
        loop {
            match drainer.next_timeout(std::time::Duration::from_millis(200)) {
                Some(c) => {
                    c.result.expect("write");
                    n += 1;
                }
                None if n * chunk >= total => return n,
                None => {}
            }
        }
    });
    let mut off = 0;
    while off < total {
        port.write_at(&file, vec![0xA5u8; chunk as usize], off, off)
            .map_err(|(e, _)| e)?;
        off += chunk;
    }
    let n = collector.join().map_err(|_| "collector panicked")?;
    let secs = t0.elapsed().as_secs_f64();
    let st = engine.stats();
    drop(file);
    std::fs::remove_file(&path)?;
    println!(
        "wrote {} MiB in {n} writes in {secs:.2} s with a {budget_mib} MiB budget: peak RSS {:.1} MiB, in-flight high water {:.1} MiB, backpressure waits {}",
        total_mib,
        peak_rss_mib(),
        st.inflight_bytes_high_water as f64 / (1 << 20) as f64,
        st.backpressure_waits
    );
    Ok(())
}
