//! How long `wait_blocking(lsn, Accepted)` takes right after `append`
//! (an accepted record needs no I/O): the median and 99th percentile of
//! `ROUNDS` rounds, each appending one 100-byte record and waiting for it.
//!
//! `cargo run --release -p overlapped-journal --example accepted_latency [DIR]`

use std::time::Instant;

use overlapped_journal::{Journal, Level, Options};

const ROUNDS: usize = 20_000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = match std::env::args().nth(1) {
        Some(d) => std::path::PathBuf::from(d),
        None => std::env::temp_dir().join(format!("accepted-latency-{}", std::process::id())),
    };
    let _ = std::fs::remove_dir_all(&dir);
    let j = Journal::open(&dir, Options::default().segment_size(64 << 20))?;
    let payload = [7u8; 100];
    let mut took = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let t = Instant::now();
        let lsn = j.append(&payload)?;
        j.wait_blocking(lsn, Level::Accepted)?;
        took.push(t.elapsed().as_nanos() as u64);
    }
    j.close()?;
    let _ = std::fs::remove_dir_all(&dir);
    took.sort_unstable();
    let p = |q: f64| took[((took.len() - 1) as f64 * q) as usize] as f64 / 1000.0;
    println!(
        "append + wait_blocking(Accepted), {ROUNDS} rounds: median {:.2} us, p99 {:.2} us, max {:.2} us",
        p(0.5),
        p(0.99),
        p(1.0)
    );
    Ok(())
}
