// A program written against `tokio::fs` and the `tokio::io` traits, included
// twice by `dropin.rs`: once with `fs` = `tokio::fs`, once with
// `fs` = `overlapped_tokio::fs` (the one-line rename). It returns what it
// observed, one line per step, for the two to be compared.

use std::io::SeekFrom;
#[cfg(unix)]
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

fn kind<T>(r: std::io::Result<T>) -> String {
    match r {
        Ok(_) => "ok".into(),
        Err(e) => format!("{:?}", e.kind()),
    }
}

fn kind_errno<T>(r: std::io::Result<T>) -> String {
    match r {
        Ok(_) => "ok".into(),
        Err(e) => format!("{:?}/{:?}", e.kind(), e.raw_os_error()),
    }
}

// Long on purpose: one run of steps, its output compared line by line with tokio's.
// The refused combinations are refused on purpose.
#[allow(clippy::nonsensical_open_options, clippy::suspicious_open_options)]
pub async fn program(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    macro_rules! note {
        ($($t:tt)*) => { out.push(format!($($t)*)) };
    }
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let src = dir.join("src.bin");
    fs::write(&src, &data).await.unwrap();

    // A file into a Vec through tokio::io::copy.
    let mut f = fs::File::open(&src).await.unwrap();
    let mut v = Vec::new();
    let n = tokio::io::copy(&mut f, &mut v).await.unwrap();
    note!("io::copy {n} bytes, equal: {}", v == data);

    // Seek and read.
    let p = f.seek(SeekFrom::Start(1000)).await.unwrap();
    let mut b = [0u8; 16];
    f.read_exact(&mut b).await.unwrap();
    note!("seek to {p}, read {b:?}");
    let p = f.seek(SeekFrom::Current(-8)).await.unwrap();
    f.read_exact(&mut b[..4]).await.unwrap();
    note!("back to {p}, read {:?}", &b[..4]);
    let p = f.seek(SeekFrom::End(-10)).await.unwrap();
    let mut tail = Vec::new();
    f.read_to_end(&mut tail).await.unwrap();
    note!("end-10 = {p}, tail {tail:?}");
    note!("read at eof: {:?}", f.read(&mut b).await.map_err(|e| e.kind()));
    note!("negative seek: {}", kind(f.seek(SeekFrom::Current(-1_000_000)).await));
    note!("position after it: {:?}", f.stream_position().await.map_err(|e| e.kind()));
    let p = f.seek(SeekFrom::Start(400_000)).await.unwrap();
    note!("past the end {p}: read {:?}", f.read(&mut b).await.map_err(|e| e.kind()));
    note!("write to a read-only file: {}", kind(f.write_all(b"x").await));
    note!("its flush: {}", kind(f.flush().await));
    note!("metadata len {}", f.metadata().await.unwrap().len());

    // Write, flush, read back; write then read without a flush.
    let rw = dir.join("rw.txt");
    let mut w = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .open(&rw)
        .await
        .unwrap();
    w.write_all(b"hello world").await.unwrap();
    w.flush().await.unwrap();
    note!("after flush: {:?}", std::fs::read_to_string(&rw).unwrap());
    let p = w.seek(SeekFrom::Start(6)).await.unwrap();
    let mut s = String::new();
    w.read_to_string(&mut s).await.unwrap();
    note!("from {p}: {s:?}");
    w.seek(SeekFrom::Start(0)).await.unwrap();
    w.write_all(b"HELLO").await.unwrap();
    w.write_all(b"!!").await.unwrap();
    let mut rest = String::new();
    w.read_to_string(&mut rest).await.unwrap();
    note!("read right after writing: {rest:?}");
    note!("position {:?}", w.stream_position().await.unwrap());
    w.set_len(4).await.unwrap();
    note!("set_len 4: {:?}, position {:?}", std::fs::read(&rw).unwrap(), w.stream_position().await.unwrap());
    w.set_len(8).await.unwrap();
    note!("set_len 8: {:?}", std::fs::read(&rw).unwrap());
    let n = w
        .write_vectored(&[std::io::IoSlice::new(b"ab"), std::io::IoSlice::new(b"cd")])
        .await
        .unwrap();
    w.flush().await.unwrap();
    note!("vectored {n}: {:?}, vectored? {}", std::fs::read(&rw).unwrap(), tokio::io::AsyncWrite::is_write_vectored(&w));
    w.sync_all().await.unwrap();
    w.sync_data().await.unwrap();

    // try_clone shares the position.
    let mut c = w.try_clone().await.unwrap();
    w.seek(SeekFrom::Start(1)).await.unwrap();
    note!("clone sees position {:?}", c.stream_position().await.unwrap());
    c.write_all(b"Z").await.unwrap();
    c.flush().await.unwrap();
    w.flush().await.unwrap();
    note!("after clone write: {:?}", std::fs::read(&rw).unwrap());
    note!("original position {:?}", w.stream_position().await.unwrap());

    // into_std / from_std keep the position.
    let mut std_file = w.into_std().await;
    note!("std position {:?}", std::io::Seek::stream_position(&mut std_file).unwrap());
    let mut back = fs::File::from_std(std_file);
    let mut two = [0u8; 2];
    back.read_exact(&mut two).await.unwrap();
    note!("from_std reads {two:?}");
    match back.try_into_std() {
        Ok(_) => note!("try_into_std ok"),
        Err(_) => note!("try_into_std refused"),
    }

    // Append.
    let log = dir.join("log");
    std::fs::write(&log, b"zero\n").unwrap();
    let mut a = fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&log)
        .await
        .unwrap();
    a.write_all(b"one\n").await.unwrap();
    a.write_all(b"two\n").await.unwrap();
    a.flush().await.unwrap();
    note!("append: {:?}, position {:?}", std::fs::read_to_string(&log).unwrap(), a.stream_position().await.unwrap());
    a.seek(SeekFrom::Start(0)).await.unwrap();
    a.write_all(b"three\n").await.unwrap();
    a.flush().await.unwrap();
    note!("append after seek: {:?}", std::fs::read_to_string(&log).unwrap());

    // Open errors and options.
    note!("open missing: {}", kind_errno(fs::File::open(dir.join("missing")).await));
    note!("create_new existing: {}", kind_errno(fs::File::create_new(&src).await));
    note!("no access mode: {}", kind(fs::OpenOptions::new().open(&src).await));
    note!("truncate without write: {}", kind(fs::OpenOptions::new().read(true).truncate(true).open(&src).await));
    note!("append with truncate: {}", kind(fs::OpenOptions::new().append(true).truncate(true).open(&src).await));
    let ro = fs::File::open(&src).await.unwrap();
    // Windows: ERROR_ACCESS_DENIED (FileEndOfFileInfo needs write access);
    // Wine's std says ERROR_INVALID_PARAMETER (its ftruncate's EINVAL), so
    // the step is compared on Unix only, and checked in `file` on Windows.
    #[cfg(unix)]
    note!("set_len read-only: {}", kind(ro.set_len(1).await));
    #[cfg(windows)]
    drop(ro);
    let made = dir.join("mode");
    #[cfg(unix)]
    {
        let m = fs::OpenOptions::new().write(true).create(true).mode(0o600).open(&made).await.unwrap();
        note!("mode {:o}", m.metadata().await.unwrap().permissions().mode() & 0o777);
        note!("O_NOFOLLOW on a link: {}", {
            std::os::unix::fs::symlink(&made, dir.join("link-to-mode")).unwrap();
            kind_errno(fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(dir.join("link-to-mode")).await)
        });
    }
    let mut created = fs::File::create(&made).await.unwrap();
    note!("create truncates: len {}", created.metadata().await.unwrap().len());
    created.write_all(b"abc").await.unwrap();
    created.flush().await.unwrap();
    let mut wo = String::new();
    note!("read write-only: {}", kind(created.read_to_string(&mut wo).await));

    // Directories.
    fs::create_dir_all(dir.join("d/e/f")).await.unwrap();
    fs::create_dir_all(dir.join("d/e")).await.unwrap();
    fs::write(dir.join("d/x.txt"), b"x").await.unwrap();
    #[cfg(unix)]
    {
        fs::DirBuilder::new().mode(0o700).create(dir.join("d/g")).await.unwrap();
        note!("dir mode {:o}", fs::metadata(dir.join("d/g")).await.unwrap().permissions().mode() & 0o777);
    }
    #[cfg(windows)]
    fs::DirBuilder::new().create(dir.join("d/g")).await.unwrap();
    note!("DirBuilder again: {}", kind_errno(fs::DirBuilder::new().create(dir.join("d/g")).await));
    fs::DirBuilder::new().recursive(true).create(dir.join("d/g/h/i")).await.unwrap();
    let mut rd = fs::read_dir(dir.join("d")).await.unwrap();
    let mut names = Vec::new();
    while let Some(e) = rd.next_entry().await.unwrap() {
        let t = e.file_type().await.unwrap();
        let m = e.metadata().await.unwrap();
        names.push(format!(
            "{} dir={} len={} path_ok={}",
            e.file_name().to_string_lossy(),
            t.is_dir(),
            if t.is_dir() { 0 } else { m.len() },
            e.path() == dir.join("d").join(e.file_name())
        ));
    }
    names.sort();
    note!("read_dir: {names:?}");
    note!("read_dir of a file: {}", kind_errno(fs::read_dir(&src).await));
    note!("create_dir existing: {}", kind_errno(fs::create_dir(dir.join("d")).await));
    note!("create_dir_all over a file: {}", kind(fs::create_dir_all(dir.join("d/x.txt/y")).await));
    note!("remove_dir non-empty: {}", kind_errno(fs::remove_dir(dir.join("d")).await));
    note!("remove_file on a dir: {}", kind_errno(fs::remove_file(dir.join("d")).await));
    fs::remove_dir(dir.join("d/e/f")).await.unwrap();
    fs::remove_dir_all(dir.join("d")).await.unwrap();
    note!("after remove_dir_all: {:?}", fs::try_exists(dir.join("d")).await.unwrap());

    // Paths.
    fs::copy(&src, dir.join("copy")).await.unwrap();
    #[cfg(unix)]
    {
        std::fs::set_permissions(&src, std::fs::Permissions::from_mode(0o640)).unwrap();
        let n = fs::copy(&src, dir.join("copy2")).await.unwrap();
        note!("copy {n}, equal {}, mode {:o}", std::fs::read(dir.join("copy2")).unwrap() == data,
            std::fs::metadata(dir.join("copy2")).unwrap().permissions().mode() & 0o777);
    }
    // Windows: the contents only. std's count comes from CopyFileExW's
    // progress callback, which Wine does not call (tokio's copy says 0
    // there); this crate's count is checked in `outside`.
    #[cfg(windows)]
    {
        fs::copy(&src, dir.join("copy2")).await.unwrap();
        note!("copy equal {}", std::fs::read(dir.join("copy2")).unwrap() == data);
    }
    note!("copy a dir: {}", kind(fs::copy(dir, dir.join("nope")).await));
    fs::rename(dir.join("copy"), dir.join("renamed")).await.unwrap();
    note!("renamed: {:?} {:?}", fs::try_exists(dir.join("copy")).await.unwrap(), fs::try_exists(dir.join("renamed")).await.unwrap());
    note!("rename missing: {}", kind_errno(fs::rename(dir.join("copy"), dir.join("x")).await));
    fs::hard_link(dir.join("renamed"), dir.join("hard")).await.unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        note!("nlink {}", fs::metadata(dir.join("hard")).await.unwrap().nlink());
        fs::symlink("renamed", dir.join("soft")).await.unwrap();
        note!("read_link {:?}", fs::read_link(dir.join("soft")).await.unwrap());
        note!("canonical is renamed: {}", fs::canonicalize(dir.join("soft")).await.unwrap() == fs::canonicalize(dir.join("renamed")).await.unwrap());
        note!("symlink_metadata is link: {}", fs::symlink_metadata(dir.join("soft")).await.unwrap().file_type().is_symlink());
        note!("metadata follows: {}", fs::metadata(dir.join("soft")).await.unwrap().len());
    }
    fs::remove_file(dir.join("renamed")).await.unwrap();
    #[cfg(unix)]
    note!("dangling exists: {}", kind(fs::try_exists(dir.join("soft")).await.map(|b| assert!(!b))));
    note!("remove missing: {}", kind_errno(fs::remove_file(dir.join("renamed")).await));
    #[cfg(unix)]
    {
        fs::set_permissions(dir.join("hard"), std::fs::Permissions::from_mode(0o604)).await.unwrap();
        note!("set_permissions {:o}", std::fs::metadata(dir.join("hard")).unwrap().permissions().mode() & 0o777);
        let hf = fs::File::open(dir.join("hard")).await.unwrap();
        hf.set_permissions(std::fs::Permissions::from_mode(0o600)).await.unwrap();
        note!("File::set_permissions {:o}", std::fs::metadata(dir.join("hard")).unwrap().permissions().mode() & 0o777);
    }
    #[cfg(windows)]
    {
        let mut perm = fs::metadata(dir.join("hard")).await.unwrap().permissions();
        perm.set_readonly(true);
        fs::set_permissions(dir.join("hard"), perm.clone()).await.unwrap();
        note!("set_permissions readonly {}", std::fs::metadata(dir.join("hard")).unwrap().permissions().readonly());
        let hf = fs::File::open(dir.join("hard")).await.unwrap();
        #[allow(clippy::permissions_set_readonly_false)]
        perm.set_readonly(false);
        hf.set_permissions(perm).await.unwrap();
        note!("File::set_permissions readonly {}", std::fs::metadata(dir.join("hard")).unwrap().permissions().readonly());
    }

    // Whole files.
    fs::write(dir.join("w"), "text ✓").await.unwrap();
    note!("read_to_string {:?}", fs::read_to_string(dir.join("w")).await.unwrap());
    fs::write(dir.join("w"), [0xffu8, 0xfe]).await.unwrap();
    note!("invalid utf-8: {}", kind(fs::read_to_string(dir.join("w")).await));
    note!("read {:?}", fs::read(dir.join("w")).await.unwrap());
    fs::write(dir.join("empty"), b"").await.unwrap();
    note!("read empty {:?}", fs::read(dir.join("empty")).await.unwrap());
    note!("read missing: {}", kind_errno(fs::read(dir.join("missing")).await));
    note!("read a dir: {}", kind_errno(fs::read(dir).await));
    let nul = Path::new("a\0b");
    note!("NUL in a path: {}", kind(fs::File::open(nul).await));
    note!("NUL in a path (remove): {}", kind(fs::remove_file(nul).await));
    out
}

