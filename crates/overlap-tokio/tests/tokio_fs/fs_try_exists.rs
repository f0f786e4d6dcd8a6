// tokio 1.54.1 tests/fs_try_exists.rs (MIT, LICENSE.tokio beside it), run against
// overlapped_tokio::fs: `tokio::fs` renamed; changes marked "overlapped-tokio:".

use overlapped_tokio::fs;
use tempfile::tempdir;

#[tokio::test]
#[cfg_attr(miri, ignore)] // No `chmod` in miri.
async fn try_exists() {
    let dir = tempdir().unwrap();

    let existing_path = dir.path().join("foo.txt");
    fs::write(&existing_path, b"Hello File!").await.unwrap();
    let nonexisting_path = dir.path().join("bar.txt");

    assert!(fs::try_exists(existing_path).await.unwrap());
    assert!(!fs::try_exists(nonexisting_path).await.unwrap());
    // FreeBSD root user always has permission to stat.
    // overlapped-tokio: as root (CAP_DAC_OVERRIDE) the directory's mode does
    // not stop `statx`, for tokio's `try_exists` either; skipped there.
    // SAFETY: geteuid has no preconditions.
    #[cfg(unix)]
    if unsafe { libc::geteuid() } == 0 {
        eprintln!(
            "SKIPPED: tokio_fs::fs_try_exists: as root a mode-0o244 directory does not deny statx"
        );
        return;
    }
    // overlapped-tokio: tokio's `cfg(all(unix, not(any(target_os = "freebsd",
    // all(tokio_unstable, feature = "io-uring")))))`: Linux here, without
    // tokio's own io_uring.
    #[cfg(unix)]
    {
        use std::os::unix::prelude::PermissionsExt;
        let permission_denied_directory_path = dir.path().join("baz");
        fs::create_dir(&permission_denied_directory_path)
            .await
            .unwrap();
        let permission_denied_file_path = permission_denied_directory_path.join("baz.txt");
        fs::write(&permission_denied_file_path, b"Hello File!")
            .await
            .unwrap();
        let mut perms = overlapped_tokio::fs::metadata(&permission_denied_directory_path)
            .await
            .unwrap()
            .permissions();

        perms.set_mode(0o244);
        fs::set_permissions(&permission_denied_directory_path, perms)
            .await
            .unwrap();
        let permission_denied_result = fs::try_exists(permission_denied_file_path).await;
        assert_eq!(
            permission_denied_result.err().unwrap().kind(),
            std::io::ErrorKind::PermissionDenied
        );
    }
}
