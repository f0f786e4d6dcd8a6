//! The file a salvage saves the dropped stretches to, before repair
//! covers them.

use std::io::{self, Write};
use std::sync::Arc;

use super::{DroppedStretch, StorageSource};
use crate::error::{Error, Result};
use crate::format::{Checkpoint, Geometry, StreamSource};
use crate::storage::Storage;

/// The file a salvage saves what it drops to (format in the crate
/// documentation, "Repair").
pub(super) struct Aside {
    path: std::path::PathBuf,
    file: std::io::BufWriter<std::fs::File>,
}

/// The first bytes of a file of dropped stretches.
pub(crate) const ASIDE_MAGIC: &[u8; 8] = b"OVLJDROP";
/// The first bytes of each stretch in it.
pub(crate) const STRETCH_MAGIC: &[u8; 8] = b"STRETCH1";

impl Aside {
    pub(super) fn create(storage: &Arc<dyn Storage>, ckpt: &Checkpoint) -> Result<Option<Aside>> {
        // Named after the generation the repair's checkpoint will have: a
        // repair interrupted before its checkpoint is written runs again
        // with the same name and rewrites the file.
        let name = format!("dropped-{}.bin", ckpt.generation + 1);
        let Some((path, file)) = storage.create_aside(&name)? else {
            return Ok(None);
        };
        let mut file = std::io::BufWriter::new(file);
        file.write_all(ASIDE_MAGIC)?;
        file.write_all(&1u32.to_le_bytes())?;
        file.write_all(&0u32.to_le_bytes())?;
        file.write_all(&ckpt.geometry.uuid.to_le_bytes())?;
        Ok(Some(Aside { path, file }))
    }

    /// Appends the stretch: its header, then its bytes as the storage has
    /// them (read in pieces of at most 1 MiB).
    pub(super) fn save(
        &mut self,
        storage: &Arc<dyn Storage>,
        geo: Geometry,
        d: &DroppedStretch,
    ) -> Result<()> {
        let mut src = StorageSource {
            storage: storage.clone(),
            geo,
            end: d.to,
        };
        // How many bytes exist (a missing segment reads as none).
        let mut chunk = vec![0u8; (d.to - d.from).min(1 << 20) as usize];
        let mut saved = Vec::new();
        let mut at = d.from;
        while at < d.to {
            let want = ((d.to - at) as usize).min(chunk.len());
            let n = src.read_stream(at, &mut chunk[..want])?;
            saved.push((at, n as u64));
            at += want as u64;
        }
        let total: u64 = saved.iter().map(|&(_, n)| n).sum();
        let f = &mut self.file;
        f.write_all(STRETCH_MAGIC)?;
        f.write_all(&d.from.to_le_bytes())?;
        f.write_all(&d.to.to_le_bytes())?;
        f.write_all(&total.to_le_bytes())?;
        f.write_all(&(d.damage.len() as u32).to_le_bytes())?;
        f.write_all(&(d.records.min(u32::MAX as u64) as u32).to_le_bytes())?;
        f.write_all(d.damage.as_bytes())?;
        for (at, n) in saved {
            let n = n as usize;
            if src.read_stream(at, &mut chunk[..n])? != n {
                return Err(Error::Io(Arc::new(io::Error::other(
                    "the log changed while it was being saved",
                ))));
            }
            f.write_all(&chunk[..n])?;
        }
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
