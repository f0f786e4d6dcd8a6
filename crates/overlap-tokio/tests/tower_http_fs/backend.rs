//! What tower-http's own tests cannot see about `OverlapBackend`: that the
//! work goes through the engine and not tokio's blocking pool, symbolic
//! links, nanosecond modification times in `ETag`/`Last-Modified` (the
//! same as tower-http's default backend gives), large files, ranges, read
//! sizes, and `serve_file` on awkward names.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{header, Request, Response, StatusCode};
use http_body_util::BodyExt;
use overlapped_tokio::tower_http::{serve_dir, serve_file, serve_file_with_mime, OverlapBackend};
use tower::ServiceExt;
use tower_http::services::ServeDir;

use super::helpers::Body;
use crate::util::{data, tempdir};

rt_tests!(
    #[cfg(target_os = "linux")]
    a_file_is_served_through_the_engine_not_the_blocking_pool,
    #[cfg(target_os = "linux")]
    symbolic_links_are_followed,
    etag_and_last_modified_carry_nanoseconds_as_tokio_backend,
    a_large_file_and_ranges_of_it,
    chunks_are_at_most_the_read_size,
    serve_file_serves_awkward_names,
    serve_file_of_a_directory_or_missing_file_is_404,
    a_file_reads_no_further_than_the_length_its_metadata_gave,
    uncached_reads_wait_for_permits_and_give_them_back,
    files_reading_ahead_themselves_serve_whole_bodies_and_ranges,
    #[cfg(target_os = "linux")]
    errors_of_open_and_metadata_answer_as_tokio_backend,
    #[cfg(target_os = "linux")]
    head_answers_as_get_for_fifos_sockets_and_devices,
);

/// Writes `n` files of `len` bytes, out of the page cache (on Linux; on
/// Windows no range is known to be cached, so every read takes a permit).
fn evicted_files(dir: &std::path::Path, n: usize, len: usize) -> Vec<Vec<u8>> {
    #[cfg(target_os = "linux")]
    use std::os::fd::AsRawFd;
    (0..n)
        .map(|i| {
            let content = data(len, i as u8);
            let p = dir.join(format!("f{i}"));
            std::fs::write(&p, &content).unwrap();
            // Write access: Windows' FlushFileBuffers needs it.
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&p)
                .unwrap();
            f.sync_all().unwrap();
            // SAFETY: advice on a descriptor we own.
            #[cfg(target_os = "linux")]
            unsafe {
                libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED)
            };
            content
        })
        .collect()
}

/// With one permit for reads of uncached data, concurrent requests for
/// evicted files all complete whole; every permit comes back, also from a
/// body dropped half-read.
async fn uncached_reads_wait_for_permits_and_give_them_back() {
    let dir = tempdir();
    let contents = evicted_files(dir.path(), 8, (1 << 20) + 5);
    let backend = OverlapBackend::new().with_max_uncached_reads(1);
    let svc = ServeDir::with_backend(dir.path(), backend.clone());
    let gets = (0..8).map(|i| {
        let svc = svc.clone();
        tokio::spawn(async move { get(svc, &format!("/f{i}"), &[]).await })
    });
    let gets: Vec<_> = gets.collect();
    for (i, g) in gets.into_iter().enumerate() {
        let res = g.await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        assert!(
            res.body()[..] == contents[i][..],
            "f{i}: the body is the file"
        );
    }
    assert_eq!(
        backend.uncached_reads_in_flight(),
        0,
        "every permit came back"
    );

    // A body dropped after its first frame (its next read may be in flight).
    evicted_files(dir.path(), 1, 3 << 20);
    let res = svc
        .clone()
        .oneshot(Request::get("/f0").body(Body::empty()).unwrap())
        .await
        .unwrap();
    let mut body = res.into_body();
    let first = body.frame().await.expect("a frame").expect("data");
    assert!(first.is_data());
    drop(body);
    let back = async {
        while backend.uncached_reads_in_flight() != 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), back)
        .await
        .expect("the dropped body's permit came back");
    let res = get(svc, "/f1", &[]).await;
    assert!(res.body()[..] == contents[1][..]);
}

/// Files opened with every other file counted as reading from the device
/// read ahead themselves (kernel read-ahead off): bodies and ranges are
/// still the file's bytes, evicted or cached.
async fn files_reading_ahead_themselves_serve_whole_bodies_and_ranges() {
    let dir = tempdir();
    let contents = evicted_files(dir.path(), 4, (5 << 20) + 4097);
    let svc = ServeDir::with_backend(
        dir.path(),
        OverlapBackend::new().with_kernel_read_ahead_streams(0),
    );
    for round in 0..2 {
        for (i, content) in contents.iter().enumerate() {
            let res = get(svc.clone(), &format!("/f{i}"), &[]).await;
            assert!(res.body()[..] == content[..], "round {round}, f{i}");
            let res = get(
                svc.clone(),
                &format!("/f{i}"),
                &[(header::RANGE, "bytes=3000000-4200000")],
            )
            .await;
            assert_eq!(res.status(), StatusCode::PARTIAL_CONTENT);
            assert!(
                res.body()[..] == content[3_000_000..=4_200_000],
                "round {round}, f{i}: the range"
            );
        }
    }
}

/// tower-http's own error-path tests (`unexpected_open_error_returns_internal_server_error`,
/// `try_call_returns_metadata_error`) run on an in-memory backend that
/// fails on purpose; here the file system fails for real, and each status
/// must be the one tower-http's default backend (tokio::fs) gives: a
/// symbolic-link loop (ELOOP), a dangling link (ENOENT), a name longer than
/// the file system allows (ENAMETOOLONG), a path through a file (ENOTDIR),
/// a directory without an index. And a FIFO, on which tower-http's default
/// backend cannot be compared (its open waits for a writer, forever here):
/// overlap's refuses it at once, as not found. (A socket, a 500 there from
/// its open's ENXIO, is a 404 here as every special file:
/// `head_answers_as_get_for_fifos_sockets_and_devices`.)
#[cfg(target_os = "linux")]
async fn errors_of_open_and_metadata_answer_as_tokio_backend() {
    let dir = tempdir();
    let d = dir.path();
    std::os::unix::fs::symlink(d.join("loop-b"), d.join("loop-a")).unwrap();
    std::os::unix::fs::symlink(d.join("loop-a"), d.join("loop-b")).unwrap();
    std::os::unix::fs::symlink(d.join("nowhere"), d.join("dangling")).unwrap();
    std::fs::write(d.join("plain"), b"plain").unwrap();
    std::fs::create_dir(d.join("empty-dir")).unwrap();
    let long = format!("/{}", "n".repeat(300));
    let uris = [
        "/loop-a",
        "/dangling",
        long.as_str(),
        "/plain/below",
        "/empty-dir/",
        "/empty-dir",
        "/plain",
    ];
    for uri in uris {
        let ours = get(ServeDir::with_backend(d, OverlapBackend::new()), uri, &[]).await;
        let theirs = get(ServeDir::new(d), uri, &[]).await;
        assert_eq!(
            ours.status(),
            theirs.status(),
            "{uri}: overlap against tokio::fs"
        );
        if theirs.status() == StatusCode::OK {
            assert_eq!(ours.body(), theirs.body(), "{uri}");
        }
    }
    let fifo = std::ffi::CString::new(d.join("fifo").as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path that lives through the call.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    let res = tokio::time::timeout(
        Duration::from_secs(20),
        get(
            ServeDir::with_backend(d, OverlapBackend::new()),
            "/fifo",
            &[],
        ),
    )
    .await
    .expect("a FIFO is refused at once, not waited on");
    assert_eq!(
        res.status(),
        StatusCode::NOT_FOUND,
        "only regular files are served"
    );
    // and the statuses are the errors they should be, not all 200
    let plain = get(
        ServeDir::with_backend(d, OverlapBackend::new()),
        "/plain",
        &[],
    )
    .await;
    assert_eq!(plain.status(), StatusCode::OK);
    let looped = get(
        ServeDir::with_backend(d, OverlapBackend::new()),
        "/loop-a",
        &[],
    )
    .await;
    assert_ne!(looped.status(), StatusCode::OK);
}

/// `ServeDir` answers a `HEAD` from the path's metadata and a `GET` from
/// the opened file: with `OverlapBackend`, a FIFO, a socket and a device
/// (`/dev/zero`, through a link) are a 404 for both, as are a regular file
/// and a directory the same for both, each answered at once.
#[cfg(target_os = "linux")]
async fn head_answers_as_get_for_fifos_sockets_and_devices() {
    let dir = tempdir();
    let d = dir.path();
    let fifo = std::ffi::CString::new(d.join("fifo").as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path that lives through the call.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    let _socket = std::os::unix::net::UnixListener::bind(d.join("socket")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", d.join("zero")).unwrap();
    std::fs::write(d.join("plain"), b"plain").unwrap();
    std::fs::create_dir(d.join("sub")).unwrap();
    std::fs::write(d.join("sub/index.html"), b"index").unwrap();
    let cases = [
        ("/fifo", StatusCode::NOT_FOUND),
        ("/socket", StatusCode::NOT_FOUND),
        ("/zero", StatusCode::NOT_FOUND),
        ("/plain", StatusCode::OK),
        ("/sub/", StatusCode::OK),
        ("/sub", StatusCode::TEMPORARY_REDIRECT),
        ("/missing", StatusCode::NOT_FOUND),
    ];
    for (uri, want) in cases {
        for method in [http::Method::GET, http::Method::HEAD] {
            let svc = ServeDir::with_backend(d, OverlapBackend::new());
            let req = Request::builder().method(&method).uri(uri);
            let res = tokio::time::timeout(
                Duration::from_secs(20),
                svc.oneshot(req.body(Body::empty()).unwrap()),
            )
            .await
            .unwrap_or_else(|_| panic!("{method} {uri}: no answer in 20 s"))
            .unwrap();
            assert_eq!(res.status(), want, "{method} {uri}");
        }
    }
}

async fn get<S>(svc: S, uri: &str, headers: &[(header::HeaderName, &str)]) -> Response<Bytes>
where
    S: tower::Service<
        Request<Body>,
        Response = Response<tower_http::services::fs::ServeFileSystemResponseBody>,
        Error = std::convert::Infallible,
    >,
{
    let mut req = Request::builder().uri(uri);
    for (k, v) in headers {
        req = req.header(k, *v);
    }
    let res = svc.oneshot(req.body(Body::empty()).unwrap()).await.unwrap();
    let (parts, body) = res.into_parts();
    let body = body.collect().await.expect("body").to_bytes();
    Response::from_parts(parts, body)
}

/// The body's frames' lengths.
async fn frame_lens(
    res: Response<tower_http::services::fs::ServeFileSystemResponseBody>,
) -> Vec<usize> {
    let mut body = res.into_body();
    let mut lens = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(d) = frame.expect("frame").into_data() {
            lens.push(d.len());
        }
    }
    lens
}

/// Threads of this process whose name is `name` (`/proc/self/task/*/comm`).
#[cfg(target_os = "linux")]
fn threads_named(name: &str) -> usize {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.trim_end() == name)
        .count()
}

/// Serves a file on a current-thread runtime of its own whose threads are
/// named `name`: the only threads with that name are its blocking pool's.
/// Returns the body and how many such threads exist afterwards.
#[cfg(target_os = "linux")]
fn serve_on_named_runtime<B>(name: &str, dir: &std::path::Path, backend: B) -> (Bytes, usize)
where
    B: tower_http::services::fs::Backend,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_name(name)
        .build()
        .unwrap();
    let svc = ServeDir::with_backend(dir, backend);
    let body = rt.block_on(async {
        let res = get(svc, "/f.bin", &[]).await;
        assert_eq!(res.status(), StatusCode::OK);
        res.into_body()
    });
    // The pool's threads stay alive 10 s after their work by default.
    let n = threads_named(name);
    drop(rt);
    (body, n)
}

#[cfg(target_os = "linux")]
async fn a_file_is_served_through_the_engine_not_the_blocking_pool() {
    let dir = tempdir();
    let content = data(300_000, 1);
    std::fs::write(dir.path().join("f.bin"), &content).unwrap();
    let path = dir.path().to_owned();
    // Runtimes of their own on a thread of its own (this test may itself
    // run inside a runtime).
    let (overlap, tokio) = std::thread::spawn(move || {
        let overlap = serve_on_named_runtime("ovl-probe-a", &path, OverlapBackend::new());
        let tokio =
            serve_on_named_runtime("ovl-probe-b", &path, tower_http::services::fs::TokioBackend);
        (overlap, tokio)
    })
    .join()
    .unwrap();
    assert_eq!(&overlap.0[..], &content[..]);
    assert_eq!(&tokio.0[..], &content[..]);
    // The probe works: tokio's backend used its runtime's blocking pool.
    assert!(
        tokio.1 > 0,
        "tower-http's TokioBackend left no blocking-pool thread: the probe sees nothing"
    );
    assert_eq!(
        overlap.1, 0,
        "OverlapBackend used tokio's blocking pool ({} threads)",
        overlap.1
    );
}

#[cfg(target_os = "linux")]
async fn symbolic_links_are_followed() {
    let dir = tempdir();
    let root = dir.path();
    std::fs::write(root.join("target.txt"), b"the target").unwrap();
    std::fs::create_dir(root.join("sub")).unwrap();
    std::fs::write(root.join("sub/index.html"), b"<p>sub</p>").unwrap();
    std::os::unix::fs::symlink("target.txt", root.join("link.txt")).unwrap();
    std::os::unix::fs::symlink("sub", root.join("linkdir")).unwrap();
    std::os::unix::fs::symlink("nowhere", root.join("dangling.txt")).unwrap();

    let res = get(serve_dir(root), "/link.txt", &[]).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(res.body().as_ref(), b"the target");
    assert_eq!(
        res.headers()[header::CONTENT_LENGTH],
        "10",
        "the target's length"
    );
    assert_eq!(res.headers()[header::CONTENT_TYPE], "text/plain");

    // A link to a directory is a directory: redirected, then its index.
    let res = get(serve_dir(root), "/linkdir", &[]).await;
    assert_eq!(res.status(), StatusCode::TEMPORARY_REDIRECT);
    assert_eq!(res.headers()[header::LOCATION], "/linkdir/");
    let res = get(serve_dir(root), "/linkdir/", &[]).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(res.body().as_ref(), b"<p>sub</p>");

    let res = get(serve_dir(root), "/dangling.txt", &[]).await;
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
}

async fn etag_and_last_modified_carry_nanoseconds_as_tokio_backend() {
    let dir = tempdir();
    let path = dir.path().join("f.txt");
    std::fs::write(&path, b"some text").unwrap();
    let t0 = SystemTime::UNIX_EPOCH + Duration::new(1_700_000_000, 123_456_789);
    let set = |t: SystemTime| {
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(t)
            .unwrap()
    };
    set(t0);
    if std::fs::metadata(&path).unwrap().modified().unwrap() != t0 {
        println!("SKIPPED: this file system does not keep nanosecond modification times");
        return;
    }
    let tokio_svc = || ServeDir::new(dir.path());
    let ours = get(serve_dir(dir.path()), "/f.txt", &[]).await;
    let theirs = get(tokio_svc(), "/f.txt", &[]).await;
    assert_eq!(ours.status(), StatusCode::OK);
    let etag = ours.headers()[header::ETAG].clone();
    assert_eq!(
        etag,
        theirs.headers()[header::ETAG],
        "the same ETag as tokio::fs"
    );
    assert_eq!(
        ours.headers()[header::LAST_MODIFIED],
        theirs.headers()[header::LAST_MODIFIED]
    );
    assert_eq!(
        ours.headers()[header::LAST_MODIFIED],
        "Tue, 14 Nov 2023 22:13:20 GMT"
    );

    // One nanosecond later (Windows: 100, its resolution): a new ETag, the
    // same Last-Modified (seconds).
    set(t0 + Duration::from_nanos(if cfg!(windows) { 100 } else { 1 }));
    let later = get(serve_dir(dir.path()), "/f.txt", &[]).await;
    assert_ne!(
        later.headers()[header::ETAG],
        etag,
        "the ETag sees nanoseconds"
    );
    assert_eq!(
        later.headers()[header::ETAG],
        get(tokio_svc(), "/f.txt", &[]).await.headers()[header::ETAG]
    );
    assert_eq!(
        later.headers()[header::LAST_MODIFIED],
        ours.headers()[header::LAST_MODIFIED]
    );
    // A conditional request with the old ETag is answered in full.
    let again = get(
        serve_dir(dir.path()),
        "/f.txt",
        &[(header::IF_NONE_MATCH, etag.to_str().unwrap())],
    )
    .await;
    assert_eq!(again.status(), StatusCode::OK);
    let cur = later.headers()[header::ETAG].to_str().unwrap().to_owned();
    let not_modified = get(
        serve_dir(dir.path()),
        "/f.txt",
        &[(header::IF_NONE_MATCH, cur.as_str())],
    )
    .await;
    assert_eq!(not_modified.status(), StatusCode::NOT_MODIFIED);
}

async fn a_large_file_and_ranges_of_it() {
    let dir = tempdir();
    let content = data((3 << 20) + 7, 3);
    std::fs::write(dir.path().join("big.bin"), &content).unwrap();

    let res = get(serve_dir(dir.path()), "/big.bin", &[]).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(res.body().len(), content.len());
    assert!(res.body()[..] == content[..], "the body is the file");

    for (range, start, end) in [
        ("bytes=1000000-2100000", 1_000_000usize, 2_100_000usize),
        ("bytes=0-0", 0, 0),
        ("bytes=-5", content.len() - 5, content.len() - 1),
        ("bytes=3145000-", 3_145_000, content.len() - 1),
    ] {
        let res = get(serve_dir(dir.path()), "/big.bin", &[(header::RANGE, range)]).await;
        assert_eq!(res.status(), StatusCode::PARTIAL_CONTENT, "{range}");
        assert_eq!(
            res.headers()[header::CONTENT_RANGE],
            format!("bytes {start}-{end}/{}", content.len()).as_str(),
            "{range}"
        );
        assert!(res.body()[..] == content[start..=end], "{range}: the slice");
    }
    let res = get(
        serve_dir(dir.path()),
        "/big.bin",
        &[(header::RANGE, "bytes=4000000-")],
    )
    .await;
    assert_eq!(res.status(), StatusCode::RANGE_NOT_SATISFIABLE);
}

async fn chunks_are_at_most_the_read_size() {
    let dir = tempdir();
    let content = data(1 << 20, 5);
    std::fs::write(dir.path().join("m.bin"), &content).unwrap();
    let req = || {
        Request::builder()
            .uri("/m.bin")
            .body(Body::empty())
            .unwrap()
    };

    let svc = serve_dir(dir.path()).with_buf_chunk_size(1 << 20);
    let lens = frame_lens(svc.oneshot(req()).await.unwrap()).await;
    assert_eq!(lens.iter().sum::<usize>(), content.len());
    assert!(
        lens.iter().all(|&n| n <= 64 << 10),
        "reads of 64 KiB: {lens:?}"
    );
    assert!(lens.len() >= 16, "{} chunks for 1 MiB", lens.len());

    let backend = OverlapBackend::new().with_read_size(16 << 10);
    assert_eq!(backend.read_size(), 16 << 10);
    let svc = ServeDir::with_backend(dir.path(), backend);
    let lens = frame_lens(svc.oneshot(req()).await.unwrap()).await;
    assert_eq!(lens.iter().sum::<usize>(), content.len());
    assert!(
        lens.iter().all(|&n| n <= 16 << 10),
        "reads of 16 KiB: {lens:?}"
    );
}

async fn serve_file_serves_awkward_names() {
    let dir = tempdir();
    // `?` is no file name character on Windows.
    let awkward = if cfg!(windows) {
        "50%#&.txt"
    } else {
        "50%?#&.txt"
    };
    for (i, name) in ["a b.txt", awkward, "你好.html", "plain"]
        .iter()
        .enumerate()
    {
        let content = format!("file {i}");
        std::fs::write(dir.path().join(name), &content).unwrap();
        // Whatever the request's path.
        for uri in ["/", "/other/path?q=1", "/a%20b.txt"] {
            let res = get(serve_file(dir.path().join(name)), uri, &[]).await;
            assert_eq!(res.status(), StatusCode::OK, "{name} at {uri}");
            assert_eq!(res.body().as_ref(), content.as_bytes(), "{name}");
        }
        let res = get(serve_file(dir.path().join(name)), "/", &[]).await;
        let expected = mime_guess_of(name);
        assert_eq!(res.headers()[header::CONTENT_TYPE], expected, "{name}");
        let res = get(
            serve_file_with_mime(dir.path().join(name), &mime::IMAGE_PNG),
            "/",
            &[(header::RANGE, "bytes=0-3")],
        )
        .await;
        assert_eq!(res.status(), StatusCode::PARTIAL_CONTENT);
        assert_eq!(res.headers()[header::CONTENT_TYPE], "image/png");
        assert_eq!(res.body().as_ref(), b"file");
    }
    // A relative path with no directory part: the current directory's file.
    let cwd_file = "Cargo.toml"; // the test's working directory is the crate's
    let res = get(serve_file(cwd_file), "/", &[]).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(
        res.body().as_ref(),
        std::fs::read(cwd_file).unwrap().as_slice()
    );
}

fn mime_guess_of(name: &str) -> &'static str {
    match name.rsplit_once('.').map(|(_, e)| e) {
        Some("txt") => "text/plain",
        Some("html") => "text/html",
        _ => "application/octet-stream",
    }
}

async fn serve_file_of_a_directory_or_missing_file_is_404() {
    let dir = tempdir();
    std::fs::create_dir(dir.path().join("d")).unwrap();
    std::fs::write(dir.path().join("d/index.html"), b"index").unwrap();
    for path in [
        dir.path().join("d"),
        dir.path().join("missing.txt"),
        "/".into(),
    ] {
        let res = get(serve_file(&path), "/", &[]).await;
        assert_eq!(res.status(), StatusCode::NOT_FOUND, "{}", path.display());
        assert!(res.body().is_empty());
        let res = get(serve_file_with_mime(&path, &mime::IMAGE_PNG), "/", &[]).await;
        assert_eq!(res.status(), StatusCode::NOT_FOUND);
        assert!(
            res.headers().get(header::CONTENT_TYPE).is_none(),
            "no content type on a 404"
        );
    }
}

/// `ServeDir` promises `Content-Length` from the file's metadata: the
/// backend's file then stops there (no read that returns 0 at the end, and
/// a file that grows meanwhile is served as long as it was), and before its
/// metadata was asked for it reads to the end of the file as any file.
async fn a_file_reads_no_further_than_the_length_its_metadata_gave() {
    use std::io::{SeekFrom, Write};
    use tokio::io::{AsyncReadExt, AsyncSeekExt};
    use tower_http::services::fs::{Backend, File as _, Metadata as _};

    let dir = tempdir();
    let path = dir.path().join("grows.bin");
    let content = data(10_000, 9);
    std::fs::write(&path, &content).unwrap();
    let grow = || {
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(&[7u8; 5_000])
            .unwrap()
    };
    let backend = OverlapBackend::new();

    let mut file = backend.open(path.clone()).await.unwrap();
    assert_eq!(file.metadata().await.unwrap().len(), 10_000);
    grow();
    let mut body = Vec::new();
    file.read_to_end(&mut body).await.unwrap();
    assert_eq!(body, content, "the 10,000 bytes the metadata promised");
    // A range within it, and one starting at its end.
    file.seek(SeekFrom::Start(9_000)).await.unwrap();
    let mut tail = Vec::new();
    file.read_to_end(&mut tail).await.unwrap();
    assert_eq!(tail, &content[9_000..]);
    file.seek(SeekFrom::Start(10_000)).await.unwrap();
    assert_eq!(file.read(&mut [0u8; 16]).await.unwrap(), 0);

    // Without metadata: the whole file, as it is now.
    let mut file = backend.open(path.clone()).await.unwrap();
    let mut all = Vec::new();
    file.read_to_end(&mut all).await.unwrap();
    assert_eq!(all.len(), 15_000);
    assert_eq!(&all[..10_000], &content[..]);
}
