//! Writing a whole file: [`write()`] (`tokio::fs::write`), through the
//! engine.

use std::io;
use std::path::Path;

use super::support::WHOLE_MAX;
use super::File;
/// Creates a future that will open a file for writing and write the entire
/// contents of `contents` to it: the file is created if it does not exist
/// and truncated if it does.
///
/// # Examples
///
/// ```no_run
/// use overlapped_tokio::fs;
///
/// # async fn dox() -> std::io::Result<()> {
/// fs::write("foo.txt", b"Hello world!").await?;
/// # Ok(())
/// # }
/// ```
pub async fn write(path: impl AsRef<Path>, contents: impl AsRef<[u8]>) -> io::Result<()> {
    let contents = contents.as_ref();
    let file = File::create(path.as_ref().to_path_buf()).await?;
    // Owned copies for the engine, one piece at a time.
    let mut buf = Vec::with_capacity(contents.len().min(WHOLE_MAX));
    for (i, piece) in contents.chunks(WHOLE_MAX).enumerate() {
        buf.clear();
        buf.extend_from_slice(piece);
        let (res, back) = file.write_all_at(buf, (i * WHOLE_MAX) as u64).await;
        res?;
        buf = back;
    }
    Ok(())
}
