//! A fault-injecting, in-memory [`Storage`] for tests: it remembers which
//! writes were synced, so a simulated power loss can drop, tear (at
//! 512-byte granularity) or reorder the rest; and it can fail a chosen
//! write or sync with EIO, ENOSPC or a short write (on Windows
//! `ERROR_IO_DEVICE` and `ERROR_DISK_FULL`: [`Fault::os_error`]).

use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex};

use overlapped::AlignedBuf;
use rand::Rng;

use crate::storage::Storage;

/// The sector size below which writes are assumed atomic.
pub const SECTOR: usize = 512;

#[derive(Debug, Clone, Default)]
struct MemFile {
    /// What reads see (the page cache).
    current: Vec<u8>,
    /// What survives a power loss.
    durable: Vec<u8>,
    /// Writes since the last sync, in order: (offset, bytes).
    pending: Vec<(u64, Vec<u8>)>,
}

fn put(v: &mut Vec<u8>, off: u64, data: &[u8]) {
    let off = off as usize;
    if v.len() < off + data.len() {
        v.resize(off + data.len(), 0);
    }
    v[off..off + data.len()].copy_from_slice(data);
}

/// Writes each 512-byte sector of `data` at `off` or not, at random.
fn put_some_sectors(img: &mut Vec<u8>, off: u64, data: &[u8], rng: &mut dyn FnMut() -> u32) {
    for (s, chunk) in data.chunks(SECTOR).enumerate() {
        if rng() % 2 == 0 {
            put(img, off + (s * SECTOR) as u64, chunk);
        }
    }
}

impl MemFile {
    /// A file whose current and durable contents are both `img`.
    fn settled(img: Vec<u8>) -> MemFile {
        MemFile {
            current: img.clone(),
            durable: img,
            pending: Vec::new(),
        }
    }
    fn write(&mut self, off: u64, data: &[u8]) {
        put(&mut self.current, off, data);
        self.pending.push((off, data.to_vec()));
    }
    fn sync(&mut self) {
        for (off, data) in self.pending.drain(..) {
            put(&mut self.durable, off, &data);
        }
    }
}

/// What a simulated power loss does to writes that were not synced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Loss {
    /// None of them survive.
    DropAll,
    /// A prefix of them survives, and the next one is torn: a random subset
    /// of its 512-byte sectors.
    Torn,
    /// Each 512-byte sector of each of them survives or not, at random
    /// (the device reordered them).
    Reorder,
}

/// An error to inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// EIO.
    Eio,
    /// ENOSPC.
    Enospc,
    /// Half of the write lands, then it fails (as a short write does).
    ShortWrite,
}

impl Fault {
    /// The OS error number the fault fails with: `EIO` or `ENOSPC` (on
    /// Windows `ERROR_IO_DEVICE` or `ERROR_DISK_FULL`); `None` for a short
    /// write.
    pub fn os_error(self) -> Option<i32> {
        match self {
            Fault::Eio => Some(crate::error::IO_ERROR),
            Fault::Enospc => Some(crate::error::NO_SPACE),
            Fault::ShortWrite => None,
        }
    }

    fn error(self) -> io::Error {
        match self {
            Fault::Eio => io::Error::from_raw_os_error(crate::error::IO_ERROR),
            Fault::Enospc => io::Error::from_raw_os_error(crate::error::NO_SPACE),
            Fault::ShortWrite => io::Error::new(io::ErrorKind::WriteZero, "short write"),
        }
    }
}

#[derive(Debug, Default)]
struct State {
    segs: BTreeMap<u64, MemFile>,
    ckpt: Option<MemFile>,
    writes: u64,
    syncs: u64,
    fail_write_at: Option<(u64, Fault)>,
    fail_sync_at: Option<(u64, Fault)>,
    failed: bool,
}

/// The in-memory storage. Cheap to clone (clones share the state).
#[derive(Debug, Clone)]
pub struct FaultStorage {
    st: Arc<Mutex<State>>,
    block: usize,
    dsync: bool,
}

impl Default for FaultStorage {
    fn default() -> Self {
        FaultStorage::new(512)
    }
}

impl FaultStorage {
    /// An empty storage with `block`-byte writes.
    pub fn new(block: usize) -> FaultStorage {
        FaultStorage {
            st: Arc::new(Mutex::new(State::default())),
            block,
            dsync: false,
        }
    }

    /// An empty storage whose writes are durable when they complete (as
    /// O_DSYNC files are).
    pub fn with_dsync(block: usize) -> FaultStorage {
        FaultStorage {
            dsync: true,
            ..FaultStorage::new(block)
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes the `n`-th segment write from now (0 = the next) fail.
    pub fn fail_write(&self, n: u64, fault: Fault) {
        let mut st = self.lock();
        st.fail_write_at = Some((st.writes + n, fault));
    }

    /// Makes the `n`-th sync from now (0 = the next) fail. As Linux does
    /// after a failed fsync, the unsynced writes are then forgotten: they
    /// stay readable but never become durable.
    pub fn fail_sync(&self, n: u64, fault: Fault) {
        let mut st = self.lock();
        st.fail_sync_at = Some((st.syncs + n, fault));
    }

    /// Segment writes and syncs done so far.
    pub fn counts(&self) -> (u64, u64) {
        let st = self.lock();
        (st.writes, st.syncs)
    }

    /// Whether an injected fault has fired.
    pub fn fault_fired(&self) -> bool {
        self.lock().failed
    }

    /// The storage as a power loss now would leave it: synced data, plus
    /// what `loss` lets survive of the rest.
    pub fn crash(&self, loss: Loss, rng: &mut impl Rng) -> FaultStorage {
        let st = self.lock();
        let mut out = State::default();
        let survive = |f: &MemFile, rng: &mut dyn FnMut() -> u32| -> Vec<u8> {
            let mut img = f.durable.clone();
            match loss {
                Loss::DropAll => {}
                Loss::Torn => {
                    let keep = rng() as usize % (f.pending.len() + 1);
                    for (i, (off, data)) in f.pending.iter().enumerate().take(keep + 1) {
                        if i < keep {
                            put(&mut img, *off, data);
                        } else {
                            put_some_sectors(&mut img, *off, data, rng);
                        }
                    }
                }
                Loss::Reorder => {
                    for (off, data) in &f.pending {
                        put_some_sectors(&mut img, *off, data, rng);
                    }
                }
            }
            img
        };
        let mut next = || rng.random::<u32>();
        for (&seq, f) in &st.segs {
            out.segs
                .insert(seq, MemFile::settled(survive(f, &mut next)));
        }
        if let Some(f) = &st.ckpt {
            out.ckpt = Some(MemFile::settled(survive(f, &mut next)));
        }
        FaultStorage {
            st: Arc::new(Mutex::new(out)),
            block: self.block,
            dsync: self.dsync,
        }
    }

    /// Runs `f` on the current bytes of segment `seq` (to corrupt them).
    pub fn with_segment<R>(&self, seq: u64, f: impl FnOnce(&mut Vec<u8>) -> R) -> Option<R> {
        let mut st = self.lock();
        let file = st.segs.get_mut(&seq)?;
        let r = f(&mut file.current);
        file.durable = file.current.clone();
        file.pending.clear();
        Some(r)
    }
}

impl Storage for FaultStorage {
    fn block_size(&self) -> usize {
        self.block
    }

    fn writes_are_durable(&self) -> bool {
        self.dsync
    }

    fn describe(&self) -> String {
        "in-memory fault-injecting storage".into()
    }

    fn list_segments(&self) -> io::Result<Vec<u64>> {
        Ok(self.lock().segs.keys().copied().collect())
    }

    fn create_segment(&self, seq: u64, _size: u64, header: &[u8]) -> io::Result<()> {
        let mut img = Vec::new();
        put(&mut img, 0, header);
        self.lock().segs.insert(seq, MemFile::settled(img));
        Ok(())
    }

    fn write(&self, seq: u64, offset: u64, buf: AlignedBuf) -> (io::Result<()>, AlignedBuf) {
        let mut st = self.lock();
        let n = st.writes;
        st.writes += 1;
        if offset % self.block as u64 != 0 || buf.len() % self.block != 0 {
            return (
                Err(io::Error::new(io::ErrorKind::InvalidInput, "misaligned")),
                buf,
            );
        }
        let fault = st.fail_write_at.filter(|&(at, _)| at == n).map(|(_, f)| f);
        let Some(file) = st.segs.get_mut(&seq) else {
            return (Err(io::Error::from(io::ErrorKind::NotFound)), buf);
        };
        let dsync = self.dsync;
        let res = match fault {
            None => {
                file.write(offset, &buf);
                Ok(())
            }
            Some(f) => {
                if f == Fault::ShortWrite {
                    file.write(offset, &buf[..buf.len() / 2]);
                }
                Err(f)
            }
        };
        if dsync {
            file.sync();
        }
        match res {
            Ok(()) => (Ok(()), buf),
            Err(f) => {
                st.failed = true;
                (Err(f.error()), buf)
            }
        }
    }

    fn sync(&self, seq: u64) -> io::Result<()> {
        let mut st = self.lock();
        let n = st.syncs;
        st.syncs += 1;
        let fault = st.fail_sync_at.filter(|&(at, _)| at == n).map(|(_, f)| f);
        let file = st
            .segs
            .get_mut(&seq)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        match fault {
            None => {
                file.sync();
                Ok(())
            }
            Some(f) => {
                file.pending.clear();
                st.failed = true;
                Err(f.error())
            }
        }
    }

    fn read(&self, seq: u64, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let st = self.lock();
        let Some(f) = st.segs.get(&seq) else {
            return Ok(0);
        };
        let off = (offset as usize).min(f.current.len());
        // Space that was never written reads as zeros (preallocated), up to
        // what the caller asked: the segment is conceptually full size.
        let n = buf.len();
        let have = (f.current.len() - off).min(n);
        buf[..have].copy_from_slice(&f.current[off..off + have]);
        buf[have..].fill(0);
        Ok(n)
    }

    fn zero(&self, seq: u64, offset: u64, len: u64) -> io::Result<()> {
        let mut st = self.lock();
        let file = st
            .segs
            .get_mut(&seq)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        let end = ((offset + len) as usize).min(file.current.len());
        if (offset as usize) < end {
            let zeros = vec![0u8; end - offset as usize];
            file.write(offset, &zeros);
        }
        Ok(())
    }

    fn remove_segment(&self, seq: u64) -> io::Result<()> {
        self.lock().segs.remove(&seq);
        Ok(())
    }

    fn read_checkpoint(&self) -> io::Result<Option<Vec<u8>>> {
        Ok(self.lock().ckpt.as_ref().map(|f| f.current.clone()))
    }

    fn write_checkpoint(&self, offset: u64, data: &[u8], sync: bool) -> io::Result<()> {
        let mut st = self.lock();
        let f = st.ckpt.get_or_insert_with(MemFile::default);
        f.write(offset, data);
        if sync {
            f.sync();
        }
        Ok(())
    }
}
