//! `overlap serve`, run as the built binary on a free port, for each
//! `--io`: a file, a range, a 404, `HEAD`, `/health`, the index, the access
//! log, a clean stop on SIGTERM and on SIGINT; and its errors for a busy
//! port, a missing directory and a file given as the directory; `HEAD`
//! against `GET` on every kind of path, FIFOs in each `--io`; the header,
//! keep-alive and send timeouts; 300 silent connections against a server
//! allowed 256 descriptors (the cap, the backlog, `EMFILE`, its CPU). The
//! client is plain HTTP/1.1 over `std::net::TcpStream`, every step bounded
//! in time.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::util::{fresh_dir, overlap, stderr};

const MODES: [&str; 3] = ["overlap", "tokio-fs", "blocking"];
const TIMEOUT: Duration = Duration::from_secs(20);

/// A running `overlap serve`, killed if the test ends without stopping it.
struct Server {
    child: Option<Child>,
    addr: SocketAddr,
    /// Its stdout's lines after the first.
    lines: std::sync::mpsc::Receiver<String>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Server {
    fn start(dir: &Path, extra: &[&str]) -> Server {
        Server::start_limited(dir, extra, None)
    }

    /// `start`, the server's `RLIMIT_NOFILE` set to `nofile` if given.
    fn start_limited(dir: &Path, extra: &[&str], nofile: Option<u64>) -> Server {
        let mut cmd = overlap();
        cmd.arg("serve")
            .arg(dir)
            .args(["--port", "0", "--threads", "2"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(n) = nofile {
            use std::os::unix::process::CommandExt;
            // SAFETY: setrlimit is async-signal-safe, as the child between
            // fork and exec requires; it touches only the struct on the stack.
            unsafe {
                cmd.pre_exec(move || {
                    let lim = libc::rlimit {
                        rlim_cur: n,
                        rlim_max: n,
                    };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                })
            };
        }
        let mut child = cmd.spawn().expect("run overlap serve");
        // The first line says where it listens; read it on a thread so that
        // a server that never says it cannot hang the test. The next lines
        // go to `lines`.
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut server = Server {
            child: Some(child),
            addr: "0.0.0.0:0".parse().unwrap(),
            lines: rx,
        };
        let line = server
            .lines
            .recv_timeout(TIMEOUT)
            .expect("the server said nothing");
        let url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no address in {line:?}"));
        server.addr = url
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .parse()
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        server
    }

    /// The server's process id.
    fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// Sends `sig` and waits (bounded) for the exit; returns its status and
    /// stderr.
    fn stop(mut self, sig: i32) -> (ExitStatus, String) {
        let mut child = self.child.take().unwrap();
        // SAFETY: kill(2) on the pid of our own child, which has not been
        // waited for, so the pid cannot have been reused.
        let rc = unsafe { libc::kill(child.id() as libc::pid_t, sig) };
        assert_eq!(rc, 0, "kill: {}", std::io::Error::last_os_error());
        let end = Instant::now() + TIMEOUT;
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > end {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the server did not stop within {TIMEOUT:?} of signal {sig}");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        (status, err)
    }
}

struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One request on a connection of its own (`Connection: close`).
fn request(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
    let mut s = TcpStream::connect_timeout(&addr, TIMEOUT).expect("connect");
    s.set_read_timeout(Some(TIMEOUT)).unwrap();
    s.set_write_timeout(Some(TIMEOUT)).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read the response");
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("end of headers");
    let head = String::from_utf8(raw[..split].to_vec()).unwrap();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap();
    let status = status_line.split(' ').nth(1).unwrap().parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let body = raw[split + 4..].to_vec();
    let reply = Reply {
        status,
        headers,
        body,
    };
    assert!(
        reply.header("transfer-encoding").is_none(),
        "this client reads Content-Length bodies only"
    );
    reply
}

fn site(name: &str) -> (std::path::PathBuf, Vec<u8>) {
    let dir = fresh_dir(&format!("serve-{name}"));
    let content: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(dir.join("big.bin"), &content).unwrap();
    std::fs::write(dir.join("index.html"), b"<b>home</b>\n").unwrap();
    std::fs::create_dir(dir.join("sub")).unwrap();
    std::fs::write(dir.join("sub/a b.txt"), b"spaced\n").unwrap();
    (dir, content)
}

#[test]
fn serves_files_ranges_404_and_health_in_each_io_mode() {
    for mode in MODES {
        let (dir, content) = site(&format!("files-{mode}"));
        let server = Server::start(&dir, &["--io", mode]);
        let addr = server.addr;
        assert!(
            addr.ip().is_loopback(),
            "{mode}: binds the loopback: {addr}"
        );

        let r = request(addr, "GET", "/big.bin", &[]);
        assert_eq!(r.status, 200, "{mode}");
        assert_eq!(r.header("content-length"), Some("300000"), "{mode}");
        assert!(r.body == content, "{mode}: the body is the file");
        assert!(r.header("etag").is_some() && r.header("last-modified").is_some());

        let r = request(addr, "GET", "/big.bin", &[("Range", "bytes=70000-200000")]);
        assert_eq!(r.status, 206, "{mode}");
        assert_eq!(
            r.header("content-range"),
            Some("bytes 70000-200000/300000"),
            "{mode}"
        );
        assert!(r.body == content[70000..=200000], "{mode}: the range");

        let r = request(addr, "HEAD", "/big.bin", &[]);
        assert_eq!(r.status, 200, "{mode}");
        assert_eq!(r.header("content-length"), Some("300000"));
        assert!(r.body.is_empty(), "{mode}: HEAD has no body");

        let r = request(addr, "GET", "/", &[]);
        assert_eq!(
            (r.status, &r.body[..]),
            (200, &b"<b>home</b>\n"[..]),
            "{mode}"
        );
        let r = request(addr, "GET", "/sub/a%20b.txt", &[]);
        assert_eq!((r.status, &r.body[..]), (200, &b"spaced\n"[..]), "{mode}");

        let r = request(addr, "GET", "/missing.txt", &[]);
        assert_eq!(r.status, 404, "{mode}");
        let r = request(addr, "GET", "/../Cargo.toml", &[]);
        assert_eq!(r.status, 404, "{mode}: nothing outside the directory");

        let r = request(addr, "GET", "/health", &[]);
        assert_eq!((r.status, &r.body[..]), (200, &b"ok\n"[..]), "{mode}");

        let (status, err) = server.stop(libc::SIGTERM);
        assert!(status.success(), "{mode}: {status}: {err}");
        assert!(err.contains("SIGTERM: shutting down"), "{mode}: {err}");
        assert!(
            !err.contains("GET"),
            "{mode}: no access log by default: {err}"
        );
    }
}

/// Requests pipelined on one keep-alive connection get their responses in
/// order, each body whole: files (sent by `sendfile` with `--io overlap`
/// on Linux when the page cache holds them, their heads held for them),
/// ranges, `HEAD`s, and responses with no file between them.
#[test]
fn pipelined_requests_on_one_connection_get_whole_bodies_in_each_io_mode() {
    for mode in MODES {
        let (dir, content) = site(&format!("pipelined-{mode}"));
        let server = Server::start(&dir, &["--io", mode]);
        let mut s = TcpStream::connect_timeout(&server.addr, TIMEOUT).expect("connect");
        s.set_read_timeout(Some(TIMEOUT)).unwrap();
        let asks = [
            ("GET", "/big.bin", ""),
            ("GET", "/health", ""),
            ("GET", "/big.bin", "Range: bytes=65535-131072\r\n"),
            ("HEAD", "/big.bin", ""),
            ("GET", "/missing", ""),
            ("GET", "/index.html", ""),
            ("GET", "/big.bin", "Range: bytes=299999-\r\n"),
        ];
        let mut all = String::new();
        for (method, path, extra) in asks {
            all += &format!("{method} {path} HTTP/1.1\r\nHost: x\r\n{extra}\r\n");
        }
        s.write_all(all.as_bytes()).unwrap();
        let want: [(u16, &[u8]); 7] = [
            (200, &content),
            (200, b"ok\n"),
            (206, &content[65535..=131072]),
            (200, b""),
            (404, b""),
            (200, b"<b>home</b>\n"),
            (206, &content[299999..]),
        ];
        for (i, (status, body)) in want.into_iter().enumerate() {
            let (got, len) = read_head(&mut s);
            assert_eq!(got, status, "{mode}: response {i}");
            let len = if asks[i].0 == "HEAD" {
                0
            } else {
                len.unwrap_or(0)
            };
            let mut b = vec![0u8; len];
            s.read_exact(&mut b).unwrap();
            if status != 404 {
                assert!(b == body, "{mode}: body {i} ({len} bytes)");
            }
        }
        let (status, err) = server.stop(libc::SIGTERM);
        assert!(status.success(), "{mode}: {status}: {err}");
        if mode == "overlap" {
            let sent = err
                .lines()
                .find_map(|l| l.strip_suffix(" bodies sent by sendfile"))
                .and_then(|n| n.parse::<u64>().ok());
            if cachestat_works(&dir.join("big.bin")) {
                // The two whole files and the two ranges; not the HEAD.
                assert_eq!(sent, Some(4), "{err}");
            } else {
                eprintln!("SKIPPED (partly): no cachestat here (Linux 6.5): bodies are read, not sent by sendfile");
            }
        }
    }
}

/// Whether `cachestat` answers for `path` here (Linux 6.5, a file the
/// caller could write): what `overlap serve` asks before `sendfile`.
fn cachestat_works(path: &Path) -> bool {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(path).unwrap();
    let range = [0u64, 4096];
    let mut st = [0u64; 5];
    // SAFETY: cachestat(2) (451) reads `range` and writes `st`, both live
    // and of the kernel's layout (two and five u64s); flags 0.
    let r = unsafe { libc::syscall(451, f.as_raw_fd(), range.as_ptr(), st.as_mut_ptr(), 0u32) };
    r == 0
}

/// `--read-size` changes the body's chunks, not the body: the file and a
/// range come back whole at the smallest size in each mode, and a size out
/// of range is refused before anything starts.
#[test]
fn read_size_changes_chunks_not_bodies() {
    for mode in MODES {
        let (dir, content) = site(&format!("chunks-{mode}"));
        // One permit for uncached reads (overlap's): still whole bodies.
        let server = Server::start(
            &dir,
            &[
                "--io",
                mode,
                "--read-size",
                "4096",
                "--max-uncached-reads",
                "1",
            ],
        );
        let r = request(server.addr, "GET", "/big.bin", &[]);
        assert_eq!(r.status, 200, "{mode}");
        assert!(r.body == content, "{mode}: the body is the file");
        let r = request(
            server.addr,
            "GET",
            "/big.bin",
            &[("Range", "bytes=4095-12289")],
        );
        assert_eq!(r.status, 206, "{mode}");
        assert!(r.body == content[4095..=12289], "{mode}: the range");
        let (status, err) = server.stop(libc::SIGTERM);
        assert!(status.success(), "{mode}: {status}: {err}");
    }
    let (dir, _) = site("chunks-refused");
    let out =
        run_bounded(
            overlap()
                .arg("serve")
                .arg(&dir)
                .args(["--port", "0", "--read-size", "100"]),
        );
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("--read-size"), "{err}");
}

#[test]
fn health_touches_no_file() {
    // The directory goes away after the start: /health still answers.
    let dir = fresh_dir("serve-health");
    std::fs::write(dir.join("f.txt"), b"f").unwrap();
    let server = Server::start(&dir, &[]);
    std::fs::remove_dir_all(&dir).unwrap();
    let r = request(server.addr, "GET", "/health", &[]);
    assert_eq!((r.status, &r.body[..]), (200, &b"ok\n"[..]));
    assert_eq!(request(server.addr, "GET", "/f.txt", &[]).status, 404);
    let (status, _) = server.stop(libc::SIGTERM);
    assert!(status.success());
}

#[test]
fn access_log_and_ctrl_c() {
    let (dir, _) = site("log");
    let server = Server::start(&dir, &["--access-log"]);
    assert_eq!(request(server.addr, "GET", "/index.html", &[]).status, 200);
    assert_eq!(request(server.addr, "GET", "/nope", &[]).status, 404);
    let (status, err) = server.stop(libc::SIGINT);
    assert!(status.success(), "{status}: {err}");
    assert!(err.contains("GET /index.html 200 "), "{err}");
    assert!(err.contains("GET /nope 404 "), "{err}");
    assert!(err.contains("Ctrl-C: shutting down"), "{err}");
}

#[test]
fn a_busy_port_is_a_clear_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let (dir, _) = site("busy");
    for mode in MODES {
        let out = run_bounded(
            overlap()
                .arg("serve")
                .arg(&dir)
                .args(["--port", &port, "--io", mode]),
        );
        assert!(!out.status.success(), "{mode}");
        let err = stderr(&out);
        assert!(
            err.contains(&format!(
                "cannot listen on 127.0.0.1:{port}: the port is in use"
            )),
            "{mode}: {err}"
        );
    }
}

#[test]
fn a_missing_directory_is_a_clear_error() {
    let base = fresh_dir("serve-missing");
    let missing = base.join("not-here");
    std::fs::write(base.join("file.txt"), b"x").unwrap();
    for mode in MODES {
        let out = run_bounded(
            overlap()
                .arg("serve")
                .arg(&missing)
                .args(["--port", "0", "--io", mode]),
        );
        assert!(!out.status.success(), "{mode}");
        assert_eq!(
            stderr(&out).trim(),
            format!("error: {}: no such directory", missing.display()),
            "{mode}"
        );
        let out = run_bounded(
            overlap()
                .arg("serve")
                .arg(base.join("file.txt"))
                .args(["--port", "0", "--io", mode]),
        );
        assert!(!out.status.success(), "{mode}");
        assert!(stderr(&out).contains("file.txt: not a directory"), "{mode}");
    }
}

/// Runs a command that should exit by itself, killed after `TIMEOUT`.
fn run_bounded(cmd: &mut Command) -> std::process::Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let end = Instant::now() + TIMEOUT;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > end {
            let _ = child.kill();
            panic!("still running after {TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// A FIFO, a socket and devices (`/dev/zero`, `/dev/null`, through links)
/// in the served directory.
fn special_files(dir: &Path) {
    let fifo = std::ffi::CString::new(dir.join("fifo").as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path that lives through the call.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    // The socket's file stays when the listener goes.
    drop(std::os::unix::net::UnixListener::bind(dir.join("socket")).unwrap());
    std::os::unix::fs::symlink("/dev/zero", dir.join("zero")).unwrap();
    std::os::unix::fs::symlink("/dev/null", dir.join("null")).unwrap();
}

/// A path, the request's headers, the status wanted.
type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], u16);

/// `HEAD` answers as `GET` does, status and headers (all but `Date`), for
/// every path: files, ranges, the index, a redirect, a miss, and special
/// files, which are 404s, answered at once.
#[test]
fn head_answers_as_get_for_every_path_in_each_io_mode() {
    for mode in MODES {
        let (dir, _) = site(&format!("head-{mode}"));
        special_files(&dir);
        let server = Server::start(&dir, &["--io", mode]);
        let range = [("Range", "bytes=10-99")];
        let cases: [Case; 11] = [
            ("/big.bin", &[], 200),
            ("/big.bin", &range, 206),
            ("/", &[], 200),
            ("/sub", &[], 307),
            ("/sub/a%20b.txt", &[], 200),
            ("/missing", &[], 404),
            ("/fifo", &[], 404),
            ("/socket", &[], 404),
            ("/zero", &[], 404),
            ("/null", &[], 404),
            ("/health", &[], 200),
        ];
        for (path, headers, want) in cases {
            let get = request(server.addr, "GET", path, headers);
            let head = request(server.addr, "HEAD", path, headers);
            let fields = |r: &Reply| {
                let mut h: Vec<_> = r
                    .headers
                    .iter()
                    .filter(|(k, _)| !k.eq_ignore_ascii_case("date"))
                    .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
                    .collect();
                h.sort();
                h
            };
            assert_eq!(head.status, want, "{mode}: HEAD {path}");
            assert_eq!(get.status, want, "{mode}: GET {path}");
            assert_eq!(fields(&head), fields(&get), "{mode}: {path}");
            assert!(head.body.is_empty(), "{mode}: HEAD {path} has no body");
        }
        let (status, err) = server.stop(libc::SIGTERM);
        assert!(status.success(), "{mode}: {status}: {err}");
    }
}

/// GETs of a FIFO, as many at once as the server has worker threads: each
/// is a 404, at once (never an open waiting for a writer on a worker or a
/// blocking-pool thread), and the server serves on.
#[test]
fn fifos_wedge_no_worker_in_any_io_mode() {
    for mode in MODES {
        let (dir, _) = site(&format!("fifo-{mode}"));
        special_files(&dir);
        let server = Server::start(&dir, &["--io", mode]);
        let addr = server.addr;
        let gets: Vec<_> = (0..2)
            .map(|_| std::thread::spawn(move || request(addr, "GET", "/fifo", &[]).status))
            .collect();
        for g in gets {
            assert_eq!(g.join().unwrap(), 404, "{mode}: GET /fifo");
        }
        assert_eq!(request(addr, "GET", "/fifo", &[]).status, 404, "{mode}");
        let r = request(addr, "GET", "/sub/a%20b.txt", &[]);
        assert_eq!((r.status, &r.body[..]), (200, &b"spaced\n"[..]), "{mode}");
        let (status, err) = server.stop(libc::SIGTERM);
        assert!(status.success(), "{mode}: {status}: {err}");
    }
}

/// The CPU time (user + system, in clock ticks) process `pid` has used.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // After the command name in parentheses: field 3 (state) on; utime
    // and stime are fields 14 and 15.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// Waits (bounded by `within`) for the peer to close `s`; how long it took.
/// Panics if it sends anything or stays open.
fn closed_within(s: &mut TcpStream, within: Duration) -> Duration {
    let start = Instant::now();
    s.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 4096];
    match s.read(&mut buf) {
        Ok(0) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Ok(n) => panic!("the server sent {n} bytes: {:?}", &buf[..n]),
        Err(e) => panic!("still open after {within:?} ({e})"),
    }
    start.elapsed()
}

const SILENT: usize = 300;
const NOFILE: u64 = 256;

/// 300 connections that send nothing, against a server allowed 256
/// descriptors and a 3 s header timeout: at the cap the server uses no
/// CPU (measured over a second), another client is still served, and
/// every silent connection is closed, none before the header timeout.
/// With the default cap (the descriptor limit's room: (256 - 64) / 3 = 64)
/// the rest wait in the listen backlog; with a cap above what the limit
/// allows, accepting fails with EMFILE and pauses instead of spinning.
fn silent_connections_against(extra: &[&str]) -> String {
    let (dir, _) = site(&format!("silent{}", extra.len()));
    let mut args = vec!["--header-timeout", "3"];
    args.extend_from_slice(extra);
    let server = Server::start_limited(&dir, &args, Some(NOFILE));
    let limits = server.lines.recv_timeout(TIMEOUT).unwrap_or_default();
    let start = Instant::now();
    // The first's close, timed from its connect on a thread of its own.
    let mut first = TcpStream::connect_timeout(&server.addr, TIMEOUT).unwrap();
    let first = std::thread::spawn(move || closed_within(&mut first, TIMEOUT));
    let mut silent: Vec<TcpStream> = (1..SILENT)
        .map(|i| {
            TcpStream::connect_timeout(&server.addr, TIMEOUT)
                .unwrap_or_else(|e| panic!("silent connection {i}: {e}"))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let before = cpu_ticks(server.pid());
    std::thread::sleep(Duration::from_secs(1));
    let spent = cpu_ticks(server.pid()) - before;
    let measured = start.elapsed();
    let addr = server.addr;
    let other = std::thread::spawn(move || request(addr, "GET", "/health", &[]));
    let first = first.join().unwrap();
    for s in silent.iter_mut() {
        let left = (start + TIMEOUT).saturating_duration_since(Instant::now());
        closed_within(s, left.max(Duration::from_millis(1)));
    }
    let r = other.join().unwrap();
    println!(
        "{extra:?}: server CPU at the cap {spent} ticks in 1 s; first silent connection closed after {first:?}, all {SILENT} after {:?}",
        start.elapsed()
    );
    assert_eq!(
        (r.status, &r.body[..]),
        (200, &b"ok\n"[..]),
        "another client"
    );
    assert!(
        first >= Duration::from_millis(2900),
        "the first silent connection was closed after {first:?}, before the 3 s header timeout"
    );
    // A spinning accept loop takes a whole CPU: 100 ticks a second.
    assert!(
        spent <= 10,
        "{spent} clock ticks of CPU in 1 s at the cap (until {measured:?} after the connects): accept spins"
    );
    let (status, err) = server.stop(libc::SIGTERM);
    assert!(status.success(), "{status}: {err}");
    format!("{limits}\n{err}")
}

#[test]
fn silent_connections_wait_in_the_backlog_and_time_out() {
    let out = silent_connections_against(&[]);
    assert!(out.contains("limits: 64 connections"), "{out}");
    assert!(
        out.contains("64 connections open (--max-connections)"),
        "{out}"
    );
    assert!(!out.contains("cannot accept"), "{out}");
}

#[test]
fn accept_pauses_at_the_descriptor_limit() {
    let out = silent_connections_against(&["--max-connections", "1000"]);
    assert!(
        out.contains("warning: --max-connections 1000 may need 3064 descriptors, more than RLIMIT_NOFILE (256) allows"),
        "{out}"
    );
    assert!(
        out.contains("warning: cannot accept a connection (Too many open files"),
        "{out}"
    );
    assert!(out.contains("accepting paused "), "{out}");
}

/// Reads one response with a `Content-Length` body from a kept-alive
/// connection; its status.
fn read_response(s: &mut TcpStream) -> u16 {
    let (status, len) = read_head(s);
    let mut body = vec![0u8; len.expect("a Content-Length")];
    s.read_exact(&mut body).expect("the body");
    status
}

/// Reads a response's head, a byte at a time (nothing of the body);
/// its status and `Content-Length`.
fn read_head(s: &mut TcpStream) -> (u16, Option<usize>) {
    let mut raw = Vec::new();
    let mut byte = [0u8; 1];
    while !raw.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut byte).expect("the response's head");
        raw.push(byte[0]);
    }
    let head = String::from_utf8(raw).unwrap();
    let len = head.lines().find_map(|l| {
        l.to_ascii_lowercase()
            .strip_prefix("content-length:")
            .map(|v| v.trim().parse().unwrap())
    });
    (head.split(' ').nth(1).unwrap().parse().unwrap(), len)
}

/// An idle kept-alive connection is closed after the keep-alive timeout
/// (1 s), not the header timeout (3 s), and a request before it passes
/// is served; a head sent a line every 400 ms is cut at the header
/// timeout, counted from the accept, though bytes keep coming.
#[test]
fn idle_and_slow_headers_are_closed_after_their_timeouts() {
    let (dir, _) = site("idle");
    let args = ["--header-timeout", "3", "--keepalive-timeout", "1"];
    let server = Server::start(&dir, &args);
    let mut s = TcpStream::connect_timeout(&server.addr, TIMEOUT).unwrap();
    s.set_read_timeout(Some(TIMEOUT)).unwrap();
    let req = format!("GET /index.html HTTP/1.1\r\nHost: {}\r\n\r\n", server.addr);
    s.write_all(req.as_bytes()).unwrap();
    assert_eq!(read_response(&mut s), 200);
    std::thread::sleep(Duration::from_millis(600));
    s.write_all(req.as_bytes()).unwrap();
    assert_eq!(
        read_response(&mut s),
        200,
        "a request within the keep-alive timeout"
    );
    let idle = closed_within(&mut s, TIMEOUT);
    assert!(
        idle >= Duration::from_millis(900) && idle < Duration::from_millis(2900),
        "an idle connection was closed after {idle:?}: not the 1 s keep-alive timeout"
    );

    let start = Instant::now();
    let mut slow = TcpStream::connect_timeout(&server.addr, TIMEOUT).unwrap();
    slow.set_write_timeout(Some(TIMEOUT)).unwrap();
    let mut lines = vec!["GET /index.html HTTP/1.1\r\n".to_owned()];
    lines.extend((0..20).map(|i| format!("X-Slow-{i}: a\r\n")));
    for line in &lines {
        if slow.write_all(line.as_bytes()).is_err() {
            break; // closed
        }
        std::thread::sleep(Duration::from_millis(400));
    }
    closed_within(&mut slow, TIMEOUT);
    let cut = start.elapsed();
    assert!(
        cut >= Duration::from_millis(2900) && cut < Duration::from_millis(6000),
        "a slow head was cut after {cut:?}: not the 3 s header timeout"
    );
    let (status, err) = server.stop(libc::SIGTERM);
    assert!(status.success(), "{status}: {err}");
}

/// A client that stops reading a large response is cut after the send
/// timeout (1 s without progress): when it reads again, the body ends
/// early, where the socket buffers held it.
#[test]
fn a_client_that_stops_reading_is_cut_after_the_send_timeout() {
    const LEN: u64 = 256 << 20;
    let dir = fresh_dir("serve-send");
    // Sparse: read from the page cache as zeros, no disk.
    std::fs::File::create(dir.join("huge.bin"))
        .unwrap()
        .set_len(LEN)
        .unwrap();
    let server = Server::start(&dir, &["--send-timeout", "1"]);
    let mut s = TcpStream::connect_timeout(&server.addr, TIMEOUT).unwrap();
    s.set_read_timeout(Some(TIMEOUT)).unwrap();
    let req = format!("GET /huge.bin HTTP/1.1\r\nHost: {}\r\n\r\n", server.addr);
    s.write_all(req.as_bytes()).unwrap();
    let mut first = [0u8; 1];
    s.read_exact(&mut first).unwrap();
    std::thread::sleep(Duration::from_secs(3));
    let mut got = 1u64;
    let mut buf = vec![0u8; 1 << 20];
    let end = loop {
        match s.read(&mut buf) {
            Ok(0) => break "end of stream".to_owned(),
            Ok(n) => got += n as u64,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break e.to_string(),
            Err(e) => panic!("after {got} bytes: {e} (still open?)"),
        }
    };
    assert!(
        got < LEN,
        "the whole {got}-byte response came after 3 s without reading ({end}): no send timeout"
    );
    let (status, err) = server.stop(libc::SIGTERM);
    assert!(status.success(), "{status}: {err}");
}

/// The timeouts take nginx's time values and refuse nonsense before
/// anything starts.
#[test]
fn timeout_flags_are_checked() {
    let (dir, _) = site("flags");
    for bad in ["0", "-1", "5 parsecs", "25h"] {
        let flag = format!("--send-timeout={bad}");
        let out = run_bounded(
            overlap()
                .arg("serve")
                .arg(&dir)
                .args(["--port", "0", &flag]),
        );
        assert!(!out.status.success(), "{bad}");
        assert!(
            stderr(&out).contains("--send-timeout"),
            "{bad}: {}",
            stderr(&out)
        );
    }
    let server = Server::start(
        &dir,
        &[
            "--header-timeout",
            "500ms",
            "--keepalive-timeout",
            "2m",
            "--send-timeout",
            "1.5",
            "--max-connections",
            "7",
        ],
    );
    let limits = server.lines.recv_timeout(TIMEOUT).unwrap();
    assert_eq!(
        limits,
        "limits: 7 connections; timeouts: header 500ms, keep-alive 120s, send 1.5s"
    );
    let (status, err) = server.stop(libc::SIGTERM);
    assert!(status.success(), "{status}: {err}");
}
