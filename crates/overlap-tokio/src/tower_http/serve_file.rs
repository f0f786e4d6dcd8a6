//! tower-http's `ServeFile` on the engine: a `ServeDir` over the file's
//! directory, every request rewritten to the file.

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::io;
use std::path::Path;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::header::CONTENT_TYPE;
use http::{HeaderValue, Request, Response, Uri};
use tower_http::services::fs::{
    DefaultServeDirFallback, ServeDir, ServeFileSystemResponseBody, ServeFileSystemResponseFuture,
};
use tower_service::Service;

use super::OverlapBackend;

/// tower-http's `ServeFile` with the engine underneath: made by
/// [`serve_file`] or [`serve_file_with_mime`], with `ServeFile`'s builder
/// methods and behaviour (content type from the file's extension,
/// precompressed variants, ranges, `ETag`/`Last-Modified` and conditional
/// requests, `GET` and `HEAD` only).
///
/// It is a `ServeDir` on [`OverlapBackend`] over the file's directory that
/// serves the file whatever the request's path. Differences from
/// tower-http's `ServeFile`: a path that names a directory, or a file whose
/// name is not UTF-8, is answered 404 (tower-http's opens it and fails).
#[derive(Clone)]
pub struct ServeFile {
    dir: ServeDir<DefaultServeDirFallback, OverlapBackend>,
    uri: Uri,
    mime: Option<HeaderValue>,
}

impl fmt::Debug for ServeFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServeFile")
            .field("dir", &self.dir)
            .field("uri", &self.uri)
            .field("mime", &self.mime)
            .finish()
    }
}

/// Serves the file at `path` through the overlap engine, as tower-http's
/// `ServeFile::new(path)`: the `Content-Type` is guessed from the file's
/// extension.
pub fn serve_file(path: impl AsRef<Path>) -> ServeFile {
    ServeFile::build(path.as_ref(), None)
}

/// Serves the file at `path` through the overlap engine with this
/// `Content-Type`, as tower-http's `ServeFile::new_with_mime`.
pub fn serve_file_with_mime(path: impl AsRef<Path>, mime: &mime::Mime) -> ServeFile {
    // A parsed `Mime` is always a valid header value; should one not be,
    // the type is guessed as by `serve_file` rather than panicking.
    ServeFile::build(path.as_ref(), HeaderValue::from_str(mime.as_ref()).ok())
}

impl ServeFile {
    fn build(path: &Path, mime: Option<HeaderValue>) -> ServeFile {
        let (dir, name) = match (path.parent(), path.file_name()) {
            (Some(parent), Some(name)) => {
                let parent = if parent.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    parent
                };
                (parent, name.as_encoded_bytes())
            }
            // `/` or a path ending in `..`: the directory itself, which is
            // no file (404).
            _ => (path, &b""[..]),
        };
        let uri = Uri::try_from(encode_path(name)).unwrap_or_else(|_| Uri::from_static("/"));
        let dir = ServeDir::with_backend(dir, OverlapBackend::new())
            .append_index_html_on_directories(false)
            .redirect_to_trailing_slash(false);
        ServeFile { dir, uri, mime }
    }

    /// As `ServeFile::precompressed_gzip`: serves `FILE.gz` instead when
    /// the client accepts gzip and it exists.
    pub fn precompressed_gzip(mut self) -> Self {
        self.dir = self.dir.precompressed_gzip();
        self
    }

    /// As `ServeFile::precompressed_br`: `FILE.br` for brotli.
    pub fn precompressed_br(mut self) -> Self {
        self.dir = self.dir.precompressed_br();
        self
    }

    /// As `ServeFile::precompressed_deflate`: `FILE.zz` for deflate.
    pub fn precompressed_deflate(mut self) -> Self {
        self.dir = self.dir.precompressed_deflate();
        self
    }

    /// As `ServeFile::precompressed_zstd`: `FILE.zst` for zstd.
    pub fn precompressed_zstd(mut self) -> Self {
        self.dir = self.dir.precompressed_zstd();
        self
    }

    /// As `ServeFile::with_buf_chunk_size` (a chunk is also at most the
    /// backend's read size, 64 KiB).
    pub fn with_buf_chunk_size(mut self, chunk_size: usize) -> Self {
        self.dir = self.dir.with_buf_chunk_size(chunk_size);
        self
    }

    /// As `ServeFile::ignore_multi_range_requests`.
    pub fn ignore_multi_range_requests(mut self, ignore: bool) -> Self {
        self.dir = self.dir.ignore_multi_range_requests(ignore);
        self
    }

    /// As `ServeFile::try_call`: the response, or the `io::Error` that
    /// stopped it (a missing file is an error here, 404 by `call`).
    pub fn try_call<ReqBody>(&mut self, mut req: Request<ReqBody>) -> ResponseFuture<io::Error>
    where
        ReqBody: Send + 'static,
    {
        *req.uri_mut() = self.uri.clone();
        let fut: ServeFileSystemResponseFuture<ReqBody> = self.dir.try_call(req);
        let mime = self.mime.clone();
        ResponseFuture(Box::pin(async move {
            let res = fut.await?;
            Ok(set_mime(res, mime))
        }))
    }
}

impl<ReqBody> Service<Request<ReqBody>> for ServeFile
where
    ReqBody: Send + 'static,
{
    type Response = Response<ServeFileSystemResponseBody>;
    type Error = Infallible;
    type Future = ResponseFuture<Infallible>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: Request<ReqBody>) -> Self::Future {
        *req.uri_mut() = self.uri.clone();
        let fut = self.dir.call(req);
        let mime = self.mime.clone();
        ResponseFuture(Box::pin(async move {
            let res = fut.await?;
            Ok(set_mime(res, mime))
        }))
    }
}

/// The response future of [`ServeFile`].
pub struct ResponseFuture<E>(
    Pin<Box<dyn Future<Output = Result<Response<ServeFileSystemResponseBody>, E>> + Send>>,
);

impl<E> fmt::Debug for ResponseFuture<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ResponseFuture")
    }
}

impl<E> Future for ResponseFuture<E> {
    type Output = Result<Response<ServeFileSystemResponseBody>, E>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0.as_mut().poll(cx)
    }
}

/// A set content type replaces the guessed one on the file's responses
/// (those that have one).
fn set_mime<B>(mut res: Response<B>, mime: Option<HeaderValue>) -> Response<B> {
    if let Some(mime) = mime {
        if res.headers().contains_key(CONTENT_TYPE) {
            res.headers_mut().insert(CONTENT_TYPE, mime);
        }
    }
    res
}

/// `/` and the name, every byte but RFC 3986's unreserved ones
/// percent-encoded (`ServeDir` decodes the path as UTF-8).
fn encode_path(name: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(1 + name.len() * 3);
    out.push('/');
    for &b in name {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push('%');
            out.push(HEX[(b >> 4) as usize] as char);
            out.push(HEX[(b & 15) as usize] as char);
        }
    }
    debug_assert!(
        !out[1..].contains('/'),
        "the encoded name is one path segment"
    );
    out
}

#[cfg(test)]
mod tests {
    use super::encode_path;

    #[test]
    fn names_are_percent_encoded() {
        assert_eq!(encode_path(b"a-b.c_d~"), "/a-b.c_d~");
        assert_eq!(
            encode_path("f w.txt".as_bytes()),
            "/f%20w.txt",
            "a space is encoded"
        );
        assert_eq!(encode_path("你".as_bytes()), "/%E4%BD%A0");
        assert_eq!(encode_path(b"a%b?c#"), "/a%25b%3Fc%23");
    }
}
