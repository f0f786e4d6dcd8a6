//! The file a salvage saves what it drops, rewrites or removes to, before
//! it changes anything.

use std::io::{self, Write};
use std::sync::Arc;

use super::DroppedStretch;
use crate::error::{Error, Result};
use crate::format::{Checkpoint, Geometry};
use crate::storage::Storage;

/// The file a salvage saves to (format in the crate documentation,
/// "Repair").
pub(super) struct Aside {
    path: std::path::PathBuf,
    file: std::io::BufWriter<std::fs::File>,
    buf: Vec<u8>,
}

/// The first bytes of a file of dropped stretches.
pub(crate) const ASIDE_MAGIC: &[u8; 8] = b"OVLJDROP";
/// The version of that file's format.
pub(crate) const ASIDE_VERSION: u32 = 2;
/// The first bytes of a dropped stretch in it.
pub(crate) const STRETCH_MAGIC: &[u8; 8] = b"STRETCH2";
/// The first bytes of a segment's bytes in it (a header rewritten, or a
/// segment file removed).
pub(crate) const SEGMENT_MAGIC: &[u8; 8] = b"SEGMENT2";
/// Pieces are read and saved this many bytes at a time.
const PIECE: usize = 1 << 20;
/// Most names tried for a new file (`dropped-<N>.bin`, N counting up).
const MAX_NAMES: u64 = 1000;

/// Why a segment's bytes were saved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SegmentFate {
    /// Its header block is rewritten (it was not valid).
    HeaderRewritten = 1,
    /// The segment file is removed (it lies outside the log and holds
    /// data, or has a bad header).
    Removed = 2,
}

impl Aside {
    /// Creates the file, named after the generation the repair's
    /// checkpoint will have, or the next free number: a file an earlier,
    /// interrupted repair left is never overwritten (it may hold bytes
    /// that repair went on to remove).
    pub(super) fn create(storage: &Arc<dyn Storage>, ckpt: &Checkpoint) -> Result<Option<Aside>> {
        let mut n = ckpt.generation + 1;
        let (path, file) = loop {
            match storage.create_aside(&format!("dropped-{n}.bin")) {
                Ok(Some(made)) => break made,
                Ok(None) => return Ok(None),
                Err(e)
                    if e.kind() == io::ErrorKind::AlreadyExists
                        && n < ckpt.generation + MAX_NAMES =>
                {
                    n += 1;
                }
                Err(e) => return Err(e.into()),
            }
        };
        let mut file = std::io::BufWriter::new(file);
        file.write_all(ASIDE_MAGIC)?;
        file.write_all(&ASIDE_VERSION.to_le_bytes())?;
        file.write_all(&0u32.to_le_bytes())?;
        file.write_all(&ckpt.geometry.uuid.to_le_bytes())?;
        Ok(Some(Aside {
            path,
            file,
            buf: Vec::new(),
        }))
    }

    /// Appends a dropped stretch: its header, then the bytes of it that
    /// exist (in the segment files that exist; holes skipped).
    pub(super) fn save_stretch(
        &mut self,
        storage: &Arc<dyn Storage>,
        segs: &[u64],
        geo: Geometry,
        d: &DroppedStretch,
    ) -> Result<()> {
        let f = &mut self.file;
        f.write_all(STRETCH_MAGIC)?;
        f.write_all(&d.from.to_le_bytes())?;
        f.write_all(&d.to.to_le_bytes())?;
        f.write_all(&(d.damage.len() as u32).to_le_bytes())?;
        f.write_all(&(d.records.min(u32::MAX as u64) as u32).to_le_bytes())?;
        f.write_all(d.damage.as_bytes())?;
        // Only the segments that exist: the work is bounded by the files,
        // never by how far apart the stretch's LSNs are.
        for &seq in segs {
            let (s0, s1) = (geo.segment_start(seq), geo.segment_start(seq + 1));
            let (a, b) = (d.from.max(s0), d.to.min(s1));
            if a >= b {
                continue;
            }
            let off = geo.header_size + (a - s0);
            self.save_range(storage, seq, off, off + (b - a))?;
        }
        self.end_pieces()
    }

    /// Appends the bytes of segment `seq` that `fate` changes: its header
    /// block (`size` is the header size), or its whole file (`size` is
    /// the segment size; a file longer than that is saved whole too).
    pub(super) fn save_segment(
        &mut self,
        storage: &Arc<dyn Storage>,
        seq: u64,
        fate: SegmentFate,
        size: u64,
    ) -> Result<()> {
        let f = &mut self.file;
        f.write_all(SEGMENT_MAGIC)?;
        f.write_all(&seq.to_le_bytes())?;
        f.write_all(&(fate as u32).to_le_bytes())?;
        f.write_all(&0u32.to_le_bytes())?;
        match fate {
            SegmentFate::HeaderRewritten => self.save_range(storage, seq, 0, size)?,
            SegmentFate::Removed => {
                self.save_range(storage, seq, 0, size)?;
                self.save_beyond(storage, seq, size)?;
            }
        }
        self.end_pieces()
    }

    /// Saves what a file holds past `from` (the segment size), up to its
    /// end, or up to the first megabyte of zeros where the storage's reads
    /// never end.
    fn save_beyond(&mut self, storage: &Arc<dyn Storage>, seq: u64, from: u64) -> Result<()> {
        let mut at = from;
        while let Some((r0, _)) = storage.data_after(seq, at)? {
            let p = r0.max(at);
            self.buf.resize(PIECE, 0);
            let n = storage.read(seq, p, &mut self.buf[..PIECE])?;
            if n == 0 || self.buf[..n].iter().all(|&b| b == 0) {
                return Ok(());
            }
            self.piece(seq, p, n)?;
            if n < PIECE {
                return Ok(());
            }
            at = p + n as u64;
        }
        Ok(())
    }

    /// Writes one piece: the first `n` bytes of the buffer, read at
    /// `offset` of segment `seq`.
    fn piece(&mut self, seq: u64, offset: u64, n: usize) -> Result<()> {
        let f = &mut self.file;
        f.write_all(&(n as u32).to_le_bytes())?;
        f.write_all(&seq.to_le_bytes())?;
        f.write_all(&offset.to_le_bytes())?;
        f.write_all(&self.buf[..n])?;
        Ok(())
    }

    /// Saves the data of `[from, to)` of segment `seq`'s file as pieces
    /// (`len u32` (1..=1 MiB), `seq u64`, `offset u64`, the bytes),
    /// skipping holes and stopping at the end of the file.
    fn save_range(
        &mut self,
        storage: &Arc<dyn Storage>,
        seq: u64,
        from: u64,
        to: u64,
    ) -> Result<()> {
        let mut at = from;
        while at < to {
            let Some((r0, r1)) = storage.data_after(seq, at)? else {
                return Ok(());
            };
            let (r0, r1) = (r0.max(at), r1.min(to));
            if r0 >= r1 {
                return Ok(());
            }
            let mut p = r0;
            while p < r1 {
                let want = ((r1 - p) as usize).min(PIECE);
                self.buf.resize(want, 0);
                let n = storage.read(seq, p, &mut self.buf[..want])?;
                if n > 0 {
                    self.piece(seq, p, n)?;
                }
                if n < want {
                    return Ok(()); // the end of the file
                }
                p += n as u64;
            }
            at = r1;
        }
        Ok(())
    }

    fn end_pieces(&mut self) -> Result<()> {
        self.file.write_all(&0u32.to_le_bytes())?;
        Ok(())
    }

    /// Makes the file durable; returns its path.
    pub(super) fn finish(self) -> Result<String> {
        let file = self
            .file
            .into_inner()
            .map_err(|e| Error::from(io::Error::new(e.error().kind(), e.error().to_string())))?;
        file.sync_all()?;
        Ok(self.path.display().to_string())
    }
}
