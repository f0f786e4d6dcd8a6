//! ENOSPC on a real, small file system (an 8 MiB ext4 image mounted through
//! a loop device): the journal stops (fail-stop) with ENOSPC, and every
//! record acknowledged durable before that is on disk.

use std::path::{Path, PathBuf};
use std::process::Command;

use overlap_journal::{inspect, Error, Journal, Level, Options};

struct Mount(PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
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
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not root (mounting a loop device needs root)".into());
    }
    let img = base.join("fs.img");
    let mnt = base.join("mnt");
    let _ = Command::new("umount").arg(&mnt).status();
    std::fs::create_dir_all(&mnt).map_err(|e| e.to_string())?;
    let f = std::fs::File::create(&img).map_err(|e| e.to_string())?;
    f.set_len(8 << 20).map_err(|e| e.to_string())?;
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
