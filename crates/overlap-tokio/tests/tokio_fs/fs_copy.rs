// tokio 1.54.1 tests/fs_copy.rs (MIT, LICENSE.tokio beside it), run against
// overlapped_tokio::fs: `tokio::fs` renamed; changes marked "overlapped-tokio:".

use overlapped_tokio::fs;
use tempfile::tempdir;

#[tokio::test]
#[cfg_attr(miri, ignore)] // No `fchmod` in miri.
async fn copy() {
    let dir = tempdir().unwrap();

    let source_path = dir.path().join("foo.txt");
    let dest_path = dir.path().join("bar.txt");

    fs::write(&source_path, b"Hello File!").await.unwrap();
    fs::copy(&source_path, &dest_path).await.unwrap();

    let from = fs::read(&source_path).await.unwrap();
    let to = fs::read(&dest_path).await.unwrap();

    assert_eq!(from, to);
}

#[tokio::test]
#[cfg_attr(miri, ignore)] // No `fchmod` in miri.
async fn copy_permissions() {
    let dir = tempdir().unwrap();
    let from_path = dir.path().join("foo.txt");
    let to_path = dir.path().join("bar.txt");

    let from = overlapped_tokio::fs::File::create(&from_path)
        .await
        .unwrap();
    let mut from_perms = from.metadata().await.unwrap().permissions();
    from_perms.set_readonly(true);
    from.set_permissions(from_perms.clone()).await.unwrap();

    overlapped_tokio::fs::copy(from_path, &to_path)
        .await
        .unwrap();

    let to_perms = overlapped_tokio::fs::metadata(to_path)
        .await
        .unwrap()
        .permissions();

    assert_eq!(from_perms, to_perms);
}
