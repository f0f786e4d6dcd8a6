//! What tower-http's tests take from tower-http's private `test_helpers`
//! (a request `Body` and `to_bytes`, after tower-http 0.7.1's
//! `src/test_helpers.rs`, MIT licence in `LICENSE.tower-http`), and the
//! names under which they build their services on the engine.
#![allow(dead_code)]

use std::path::Path;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::Frame;
use http_body_util::BodyExt;
use overlapped_tokio::tower_http::OverlapBackend;
use tower::BoxError;
use tower_http::services::fs::DefaultServeDirFallback;

/// tower-http's repository root in its tests ("..").
pub const REPO_ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/tower_http_fs/fixtures");
/// Its `test-files` ("../test-files").
pub const TEST_FILES_DIR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/tower_http_fs/fixtures/test-files"
);
/// Its README ("../README.md").
pub const README_PATH: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/tower_http_fs/fixtures/README.md"
);
/// Its crate's directory (".").
pub const CRATE_DIR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/tower_http_fs/fixtures/tower-http"
);

/// `ServeDir::new(path)` in tower-http's tests: a `ServeDir` on the engine.
pub struct ServeDir;

// tower-http's tests call `ServeDir::new`: the shim keeps their text.
#[allow(clippy::new_ret_no_self)]
impl ServeDir {
    pub fn new(
        path: impl AsRef<Path>,
    ) -> tower_http::services::ServeDir<DefaultServeDirFallback, OverlapBackend> {
        tower_http::services::ServeDir::with_backend(path, OverlapBackend::new())
    }
}

/// `ServeFile::new(path)` in tower-http's tests: `serve_file` on the
/// engine.
pub struct ServeFile;

#[allow(clippy::new_ret_no_self)]
impl ServeFile {
    pub fn new(path: impl AsRef<Path>) -> overlapped_tokio::tower_http::ServeFile {
        overlapped_tokio::tower_http::serve_file(path)
    }

    pub fn new_with_mime(
        path: impl AsRef<Path>,
        mime: &mime::Mime,
    ) -> overlapped_tokio::tower_http::ServeFile {
        overlapped_tokio::tower_http::serve_file_with_mime(path, mime)
    }
}

type BoxBody = http_body_util::combinators::UnsyncBoxBody<Bytes, BoxError>;

/// A request or fallback-response body.
#[derive(Debug)]
pub struct Body(BoxBody);

impl Body {
    pub fn new<B>(body: B) -> Self
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        Self(body.map_err(Into::into).boxed_unsync())
    }

    pub fn empty() -> Self {
        Self::new(http_body_util::Empty::new())
    }
}

impl Default for Body {
    fn default() -> Self {
        Self::empty()
    }
}

macro_rules! body_from_impl {
    ($ty:ty) => {
        impl From<$ty> for Body {
            fn from(buf: $ty) -> Self {
                Self::new(http_body_util::Full::from(buf))
            }
        }
    };
}

body_from_impl!(&'static [u8]);
body_from_impl!(Vec<u8>);
body_from_impl!(&'static str);
body_from_impl!(String);
body_from_impl!(Bytes);

impl http_body::Body for Body {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.0).poll_frame(cx)
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.0.size_hint()
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_end_stream()
    }
}

pub async fn to_bytes<T>(body: T) -> Result<Bytes, T::Error>
where
    T: http_body::Body,
{
    Ok(body.collect().await?.to_bytes())
}
