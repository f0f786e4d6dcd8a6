//! Reading records back: [`RecordIter`].

use std::sync::Arc;

use super::options::*;
use crate::error::{Damage, Error, Result};
use crate::format::{record_span, Geometry, Next, RecordReader};
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

impl Record {
    /// The LSN right after this record: where the next record starts (or
    /// will). To resume after the last record processed, read from here:
    /// [`crate::Journal::read_from`] and [`crate::Journal::tail`] accept it
    /// even when no record is there yet.
    pub fn next_lsn(&self) -> Lsn {
        Lsn(self.lsn.0 + record_span(self.data.len()))
    }
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

impl RecordIter {
    /// Where the iteration stops.
    pub(crate) fn end(&self) -> u64 {
        self.end
    }

    /// Lets the iteration go on up to `end` (a record boundary at or after
    /// the current end: the log below it is written and stays as it is).
    pub(crate) fn extend_to(&mut self, end: u64) {
        if end > self.end {
            self.end = end;
            self.reader.source_mut().end = end;
        }
    }
}

impl Iterator for RecordIter {
    type Item = Result<Record>;
    fn next(&mut self) -> Option<Result<Record>> {
        debug_assert_eq!(
            self.reader.source().end,
            self.end,
            "the reader's source stops where the iteration does"
        );
        if self.done || self.reader.position() >= self.end {
            return None;
        }
        let pos = self.reader.position();
        let res = match self.reader.next_record() {
            Ok(Next::Record(lsn, data)) => {
                debug_assert!(
                    pos <= lsn && lsn < self.end,
                    "a record read lies in [position, end)"
                );
                return Some(Ok(Record {
                    lsn: Lsn(lsn),
                    data,
                }));
            }
            // Past a filler that reaches the end.
            Ok(Next::End) if self.reader.position() >= self.end => return None,
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
