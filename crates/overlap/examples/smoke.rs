use overlap::*;
fn main() {
    for d in [DriverChoice::Uring, DriverChoice::Pool] {
        let engine = Engine::builder().driver(d).build().unwrap();
        println!("{:?}", engine.driver());
        let dir = tempfile::tempdir_in(".").unwrap();
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .direct(true)
            .open(&engine, dir.path().join("x"))
            .wait()
            .unwrap();
        println!("{:?} {:?}", f, f.metadata().wait());
        let pool = AlignedBufPool::for_file(&f, 4096, 4).unwrap();
        let mut b = pool.get();
        b.fill(3);
        let (r, _b) = f.write_all_at(b, 0).wait();
        r.unwrap();
        let (r, b) = f.read_at(pool.get(), 0).wait();
        println!("read {:?} {}", r, b[10]);
        let (r, _) = f.read_at(vec![0u8; 100], 0).wait();
        println!("misaligned: {:?}", r);
        f.allocate(0, 1 << 20).wait().unwrap();
        f.sync_all().wait().unwrap();
        println!("{:?}", f.metadata().wait().unwrap().len);
        f.close().wait().unwrap();
        let (r, _) = f.read_at(pool.get(), 0).wait();
        println!("after close: {:?}", r);
        println!("{:?}", engine.stats());
    }
}
