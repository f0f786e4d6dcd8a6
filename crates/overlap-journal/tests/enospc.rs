//! ENOSPC on a real, small file system (an ext4 image mounted through a
//! loop device): the journal stops (fail-stop) with ENOSPC, every record
//! acknowledged durable before that is on disk, nothing a failed
//! preallocation made is left behind, and the journal works again once
//! space is freed. Skipped loudly (SKIPPED, listed by scripts/test) where
//! no loop device can be mounted.

use std::path::{Path, PathBuf};
use std::process::Command;

use overlapped_journal::{inspect, verify, Error, Journal, Level, Options};

pub struct Mount(pub PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg(&self.0)
            .stderr(std::process::Stdio::null())
            .status();
    }
}

fn run(cmd: &str, args: &[&str]) -> Result<(), String> {
    match Command::new(cmd).args(args).output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!(
            "{cmd} {args:?}: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Err(format!("{cmd}: {e}")),
    }
}

fn small_fs(base: &Path) -> Result<Mount, String> {
    sized_fs(base, 8)
}

pub fn sized_fs(base: &Path, mib: u64) -> Result<Mount, String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not root (mounting a loop device needs root)".into());
    }
    let img = base.join("fs.img");
    let mnt = base.join("mnt");
    let _ = Command::new("umount")
        .arg(&mnt)
        .stderr(std::process::Stdio::null())
        .status();
    std::fs::create_dir_all(&mnt).map_err(|e| e.to_string())?;
    let f = std::fs::File::create(&img).map_err(|e| e.to_string())?;
    f.set_len(mib << 20).map_err(|e| e.to_string())?;
    run("mkfs.ext4", &["-q", "-F", img.to_str().unwrap()])?;
    run(
        "mount",
        &["-o", "loop", img.to_str().unwrap(), mnt.to_str().unwrap()],
    )?;
    Ok(Mount(mnt))
}

#[test]
fn enospc_on_a_small_file_system_is_fail_stop() {
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("journal-enospc");
    std::fs::create_dir_all(&base).unwrap();
    let mount = match small_fs(&base) {
        Ok(m) => m,
        Err(why) => {
            eprintln!("SKIPPED: cannot make a small file system: {why}");
            return;
        }
    };
    let dir = mount.0.join("journal");
    let opts = Options::default()
        .segment_size(1 << 20)
        .buffer_bytes(256 << 10)
        .max_record_bytes(8 << 10);
    let j = Journal::open(&dir, opts.clone()).unwrap();
    let mut acked = Vec::new();
    let mut pending = Vec::new();
    let err = loop {
        let data = vec![acked.len() as u8; 4000];
        let lsn = match j.append(&data) {
            Ok(l) => l,
            Err(e) => break e,
        };
        pending.push(data);
        if pending.len() % 16 == 0 {
            if let Err(e) = j.wait_blocking(lsn, Level::Durable) {
                break e;
            }
            acked.append(&mut pending);
        }
        assert!(acked.len() < 10_000, "an 8 MiB file system never filled up");
    };
    assert!(
        matches!(err, Error::Poisoned(_)) && err.raw_os_error() == Some(libc::ENOSPC),
        "{err:?}"
    );
    assert!(!acked.is_empty());
    // Fail-stop: later calls get the error too.
    assert_eq!(
        j.append(b"more").unwrap_err().raw_os_error(),
        Some(libc::ENOSPC)
    );
    drop(j);
    // Everything acknowledged is there (read without writing: the file
    // system is still full).
    let (report, records) = inspect(&dir, &opts).unwrap();
    let got: Vec<Vec<u8>> = records.map(|r| r.unwrap().data).collect();
    assert!(got.len() >= acked.len(), "{report:?}");
    assert_eq!(&got[..acked.len()], &acked[..]);
}

fn mount_or_skip(name: &str, mib: u64) -> Option<Mount> {
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::create_dir_all(&base).unwrap();
    match sized_fs(&base, mib) {
        Ok(m) => Some(m),
        Err(why) => {
            eprintln!("SKIPPED: cannot make a small file system: {why}");
            None
        }
    }
}

fn free_bytes(p: &Path) -> u64 {
    let out = Command::new("df")
        .args(["-B1", "--output=avail"])
        .arg(p)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines().nth(1).unwrap().trim().parse().unwrap()
}

/// Files whose name ends in `.tmp` in `dir`.
fn leftovers(dir: &Path) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    rd.map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".tmp"))
        .collect()
}

#[test]
fn a_segment_too_large_for_the_file_system_leaves_nothing() {
    // `--segment-mib 100` on a small file system must not leave a 56 MB
    // .seg.tmp, the file system full, and the 100 MiB size in the
    // checkpoint (a retry with a smaller size would fail the same way).
    let Some(mount) = mount_or_skip("journal-enospc-big-segment", 32) else {
        return;
    };
    let free = free_bytes(&mount.0);
    let dir = mount.0.join("journal");
    let big = Options::default().segment_size(64 << 20);
    let err = Journal::open(&dir, big.clone()).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
    assert!(err.to_string().contains("segment 0 needs 64 MiB"), "{err}");
    // The directory it created is gone again, and all the space is back.
    assert!(
        !dir.exists(),
        "{:?}",
        std::fs::read_dir(&dir).map(|d| d.count())
    );
    assert!(free_bytes(&mount.0) >= free, "space was not given back");
    // In a directory that existed: nothing left but the lock file, and no
    // settings persisted.
    std::fs::create_dir(&dir).unwrap();
    assert!(Journal::open(&dir, big).is_err());
    assert!(leftovers(&dir).is_empty());
    assert!(!dir.join("checkpoint").exists());
    assert!(free_bytes(&mount.0) >= free - (64 << 10));
    // A retry with a size that fits works, and uses the new size.
    let small = Options::default().segment_size(4 << 20);
    let j = Journal::open(&dir, small.clone()).unwrap();
    assert_eq!(j.geometry().segment_size, 4 << 20);
    let lsn = j.append(b"x").unwrap();
    j.wait_blocking(lsn, Level::Durable).unwrap();
    drop(j);
    assert_eq!(verify(&dir, &small).unwrap().records, 1);
}

#[test]
fn a_journal_that_ran_out_of_space_works_again_once_space_is_freed() {
    let Some(mount) = mount_or_skip("journal-enospc-refill", 24) else {
        return;
    };
    let dir = mount.0.join("journal");
    let opts = Options::default()
        .segment_size(2 << 20)
        .buffer_bytes(256 << 10)
        .max_record_bytes(8 << 10);
    let j = Journal::open(&dir, opts.clone()).unwrap();
    // Leave room for about three more segments.
    let filler = mount.0.join("filler");
    let keep = 6 << 20;
    let fill = free_bytes(&mount.0).saturating_sub(keep);
    let f = std::fs::File::create(&filler).unwrap();
    run(
        "fallocate",
        &["-l", &fill.to_string(), filler.to_str().unwrap()],
    )
    .unwrap();
    drop(f);
    let mut acked = 0usize;
    let err = loop {
        let lsn = match j.append(&[7u8; 4000]) {
            Ok(l) => l,
            Err(e) => break e,
        };
        if let Err(e) = j.wait_blocking(lsn, Level::Durable) {
            break e;
        }
        acked += 1;
        assert!(acked < 100_000, "the file system never filled up");
    };
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
    drop(j);
    // No partly preallocated segment was left behind.
    assert!(leftovers(&dir).is_empty(), "{:?}", leftovers(&dir));
    // It opens again and reads everything on the still full file system.
    let j = Journal::open(&dir, opts.clone()).unwrap();
    let n = j.read_from(j.start_lsn()).unwrap().count();
    assert!(n >= acked, "{n} < {acked}");
    drop(j);
    // Once space is freed, it appends again.
    std::fs::remove_file(&filler).unwrap();
    let j = Journal::open(&dir, opts.clone()).unwrap();
    let mut last = None;
    for _ in 0..2000 {
        last = Some(j.append(&[8u8; 4000]).unwrap());
    }
    j.wait_blocking(last.unwrap(), Level::Durable).unwrap();
    j.close().unwrap();
    let rep = verify(&dir, &opts).unwrap();
    assert!(rep.records >= acked as u64 + 2000, "{rep:?}");
}
