//! A request: an operation prepared by a front end (`File`, `Port`, the
//! path functions) with its buffer and its owner, before the engine admits
//! it (`crate::admit`) and it becomes an operation cell (`crate::future`).

use std::sync::Arc;

use crate::engine::Shared;
use crate::error::{Error, Result};
use crate::file::inner::FileRef;
use crate::operation::OpKind;

/// What a request reaches its engine's state through: its file (opened on
/// that engine), or the state itself for an operation without one. One
/// reference either way: a file's request clones no `Arc` of the engine's
/// until it becomes an operation cell (a future's page-cache hit never
/// does).
pub(crate) enum Owner {
    File(FileRef),
    Engine(Arc<Shared>),
}

/// A request prepared but not yet admitted to the engine.
pub(crate) struct Request<B> {
    pub owner: Owner,
    pub buf: B,
    /// The operation, with pointers into `buf`'s heap memory, which does not
    /// move when `buf` moves (IoBuf contract).
    pub kind: OpKind,
    /// Bytes charged against the in-flight budget.
    pub bytes: usize,
    /// Try `preadv2(RWF_NOWAIT)` on the caller's thread first.
    pub fast_path: bool,
}

impl<B> Request<B> {
    /// The engine's state.
    #[inline]
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        match &self.owner {
            Owner::File(f) => f.shared(),
            Owner::Engine(s) => s,
        }
    }

    /// The file it operates on, if any.
    #[inline]
    pub(crate) fn file(&self) -> Option<&FileRef> {
        match &self.owner {
            Owner::File(f) => Some(f),
            Owner::Engine(_) => None,
        }
    }

    /// Checks that the engine runs and counts the operation in on its file
    /// (which fails once the file is closed).
    pub(crate) fn start(&mut self) -> Result<()> {
        debug_assert_eq!(
            self.bytes,
            self.kind.span().map_or(0, |s| s.len),
            "a request is charged the bytes it moves"
        );
        if self.shared().is_shut() {
            return Err(Error::Shutdown);
        }
        match &mut self.owner {
            Owner::File(f) => f.start(),
            Owner::Engine(_) => Ok(()),
        }
    }
}
