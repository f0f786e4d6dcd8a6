//! Reading records back: [`RecordIter`].

use std::sync::Arc;

use super::options::*;
use crate::error::{Damage, Error, Result};
use crate::format::{Geometry, Next, RecordReader};
use crate::recovery::StorageSource;
use crate::storage::Storage;

/// A record read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Its LSN.
    pub lsn: Lsn,
    /// Its payload.
    pub data: Vec<u8>,
}

/// Iterator over records (from [`crate::Journal::read_from`] or [`crate::inspect`]).
pub struct RecordIter {
    reader: RecordReader<StorageSource>,
    end: u64,
    done: bool,
}

impl std::fmt::Debug for RecordIter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordIter")
            .field("position", &self.reader.position())
            .field("end", &self.end)
            .finish()
    }
}

impl RecordIter {
    pub(crate) fn new(
        storage: Arc<dyn Storage>,
        geo: Geometry,
        max_record: usize,
        from: u64,
        end: u64,
    ) -> RecordIter {
        RecordIter {
            reader: RecordReader::new(StorageSource { storage, geo, end }, geo, max_record, from),
            end,
            done: false,
        }
    }
}

impl Iterator for RecordIter {
    type Item = Result<Record>;
    fn next(&mut self) -> Option<Result<Record>> {
        if self.done || self.reader.position() >= self.end {
            return None;
        }
        let pos = self.reader.position();
        let res = match self.reader.next_record() {
            Ok(Next::Record(lsn, data)) => {
                return Some(Ok(Record {
                    lsn: Lsn(lsn),
                    data,
                }))
            }
            Ok(Next::End) => Err(Error::Corrupt {
                lsn: pos,
                damage: Damage::Truncated,
            }),
            Ok(Next::Damaged(damage)) => Err(Error::Corrupt { lsn: pos, damage }),
            Err(e) => Err(e.into()),
        };
        self.done = true;
        Some(res)
    }
}
