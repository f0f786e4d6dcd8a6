//! `overlap serve`, run as the built binary on a free port, for each
//! `--io`: a file, a range, a 404, `HEAD`, `/health`, the index, the access
//! log, a clean stop on SIGTERM and on SIGINT; and its errors for a busy
//! port, a missing directory and a file given as the directory. The client
//! is plain HTTP/1.1 over `std::net::TcpStream`, every step bounded in time.

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
        let mut child = overlap()
            .arg("serve")
            .arg(dir)
            .args(["--port", "0", "--threads", "2"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run overlap serve");
        // The first line says where it listens; read it on a thread so that
        // a server that never says it cannot hang the test.
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let mut server = Server {
            child: Some(child),
            addr: "0.0.0.0:0".parse().unwrap(),
        };
        let line = rx.recv_timeout(TIMEOUT).expect("the server said nothing");
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
