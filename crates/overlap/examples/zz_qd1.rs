use overlap::*;
fn main() {
    let path = std::env::args().nth(1).unwrap();
    let engine = Engine::builder().cache_fast_path(false).build().unwrap();
    let f = OpenOptions::new()
        .read(true)
        .open(&engine, &path)
        .wait()
        .unwrap();
    let len = f.metadata().wait().unwrap().len;
    let mut b = vec![0u8; 1];
    for _ in 0..1000 {
        let (r, bb) = f.read_at(b, len).wait();
        r.unwrap();
        b = bb;
    }
    let n: u32 = std::env::var("N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20000);
    let t0 = std::time::Instant::now();
    for _ in 0..n {
        let (r, bb) = f.read_at(b, len).wait();
        r.unwrap();
        b = bb;
    }
    println!(
        "{}: QD1 eof round trip {:.1} us",
        engine.driver().detail.split(';').next().unwrap(),
        t0.elapsed().as_secs_f64() * 1e6 / n as f64
    );
}
