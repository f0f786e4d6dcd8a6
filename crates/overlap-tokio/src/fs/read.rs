//! Reading a whole file: [`read`] and [`read_to_string`] (`tokio::fs::read`,
//! `tokio::fs::read_to_string`), through the engine.

use std::io;
use std::path::Path;

use super::support::{code, engine_err, WHOLE_MAX};
use super::File;
use crate::reactor::on_ring;
/// How much [`read`] asks for at a time once past the expected length.
const READ_CHUNK: usize = 64 << 10;

/// Reads the entire contents of a file into a bytes vector: `open`, then
/// reads through the engine until end of file.
///
/// # Errors
///
/// As `std::fs::read`: the file does not exist, may not be read, ...
///
/// # Examples
///
/// ```no_run
/// use overlapped_tokio::fs;
/// use std::net::SocketAddr;
///
/// #[tokio::main]
/// async fn main() -> Result<(), Box<dyn std::error::Error + 'static>> {
///     let contents = fs::read("address.txt").await?;
///     let foo: SocketAddr = String::from_utf8_lossy(&contents).parse()?;
///     Ok(())
/// }
/// ```
pub async fn read(path: impl AsRef<Path>) -> io::Result<Vec<u8>> {
    // `path` itself lives until the read is done, as in tokio (a
    // `NamedTempFile` given by value removes its file when dropped).
    let file = File::open(path.as_ref().to_path_buf()).await?;
    let file = file.engine_file();
    // The size hint from the attributes the kernel holds (no I/O, no
    // kernel worker: see `overlapped::File::stat_cached`); only a hint, the
    // reads go on to the end of the file whatever it says.
    let hint = file.stat_cached().map(|st| st.len as usize).unwrap_or(0);
    // The expected length plus one byte, so that a file of exactly that
    // length is known complete. Zeroed memory of this size comes from the
    // kernel untouched (calloc), so the reads below fault in each page once.
    let mut out = Tail {
        vec: vec![0u8; hint.saturating_add(1)],
        start: 0,
        len: 0,
    };
    loop {
        if out.start == out.vec.len() {
            // The file grew, or had no known length: room for more.
            out.vec.resize(out.start + READ_CHUNK.max(out.start / 2), 0);
        }
        // Each read lands in place, in pieces well within the engine's
        // in-flight budget: no copy through a separate buffer.
        out.len = (out.vec.len() - out.start).min(WHOLE_MAX);
        debug_assert!(
            out.len > 0,
            "a read asks for a byte at least: zero reads as the end"
        );
        let at = out.start as u64;
        let (res, back) = on_ring(file.read_at(out, at)).await;
        out = back;
        let n = res.map_err(|e| engine_err(e, code::NOT_OPENED))?;
        if n == 0 {
            let mut vec = out.vec;
            vec.truncate(out.start);
            return Ok(vec);
        }
        debug_assert!(
            n <= out.len && out.start + n <= out.vec.len(),
            "a read returns at most the bytes asked for, inside the vector"
        );
        out.start += n;
    }
}

/// `len` bytes of a vector from `start` on, as a read's buffer: the result
/// of [`read`] is read into in place.
struct Tail {
    vec: Vec<u8>,
    start: usize,
    len: usize,
}

// SAFETY: the bytes are the vector's heap allocation, which does not move
// when the value moves and is not resized while the value is lent to an
// operation; `start + len <= vec.len()` (checked below), all initialised.
unsafe impl overlapped::IoBuf for Tail {
    fn stable_ptr(&self) -> *const u8 {
        debug_assert!(self.start + self.len <= self.vec.len());
        self.vec[self.start..].as_ptr()
    }
    fn bytes_len(&self) -> usize {
        self.len.min(self.vec.len().saturating_sub(self.start))
    }
}

// SAFETY: as above; u8 accepts any byte.
unsafe impl overlapped::IoBufMut for Tail {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        self.vec[self.start..].as_mut_ptr()
    }
}

/// Creates a future which will open a file for reading and read the entire
/// contents into a string and return said string.
///
/// # Errors
///
/// As [`read`], and [`io::ErrorKind::InvalidData`] if the contents are not
/// UTF-8.
///
/// # Examples
///
/// ```no_run
/// use overlapped_tokio::fs;
///
/// # async fn dox() -> std::io::Result<()> {
/// let contents = fs::read_to_string("foo.txt").await?;
/// println!("foo.txt contains {} bytes", contents.len());
/// # Ok(())
/// # }
/// ```
pub async fn read_to_string(path: impl AsRef<Path>) -> io::Result<String> {
    let bytes = read(path).await?;
    String::from_utf8(bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        )
    })
}
