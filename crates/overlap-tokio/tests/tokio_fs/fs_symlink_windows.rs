// tokio 1.54.1 tests/fs_symlink_file_windows.rs and
// tests/fs_symlink_dir_windows.rs (MIT, LICENSE.tokio beside it), run against
// overlapped_tokio::fs: `tokio::fs` renamed, the two files in one.

use overlapped_tokio::fs;
use tempfile::tempdir;

#[tokio::test]
async fn symlink_file_windows() {
    let dir = tempdir().unwrap();

    let source_path = dir.path().join("foo.txt");
    let dest_path = dir.path().join("bar.txt");

    fs::write(&source_path, b"Hello File!").await.unwrap();
    fs::symlink_file(&source_path, &dest_path).await.unwrap();

    fs::write(&source_path, b"new data!").await.unwrap();

    // overlapped-tokio: where the system makes the link but std cannot read
    // through it either (Wine), skipped.
    if let Err(e) = std::fs::read(&dest_path) {
        eprintln!("SKIPPED: tokio_fs::fs_symlink_windows: a file link cannot be read: {e}");
        return;
    }

    let from = fs::read(&source_path).await.unwrap();
    let to = fs::read(&dest_path).await.unwrap();

    assert_eq!(from, to);
}

#[tokio::test]
async fn symlink_dir_windows() {
    const FILE_NAME: &str = "abc.txt";

    let temp_dir = tempdir().unwrap();

    let dir1 = temp_dir.path().join("a");
    fs::create_dir(&dir1).await.unwrap();

    let file1 = dir1.as_path().join(FILE_NAME);
    fs::write(&file1, b"Hello File!").await.unwrap();

    let dir2 = temp_dir.path().join("b");
    fs::symlink_dir(&dir1, &dir2).await.unwrap();

    fs::write(&file1, b"new data!").await.unwrap();

    let file2 = dir2.as_path().join(FILE_NAME);

    // overlapped-tokio: as above, for a directory link.
    if let Err(e) = std::fs::read(&file2) {
        eprintln!("SKIPPED: tokio_fs::fs_symlink_windows: a directory link cannot be read: {e}");
        return;
    }

    let from = fs::read(&file1).await.unwrap();
    let to = fs::read(&file2).await.unwrap();

    assert_eq!(from, to);
}
