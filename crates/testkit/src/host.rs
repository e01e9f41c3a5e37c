//! Host helpers shared by the suites that run processes: temporary directories, free ports,
//! a plain HTTP GET, polling, and child processes that die with the test binary.

use std::io::{Read, Write};
use std::net::{IpAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// A directory under the system temp dir, removed when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    /// `bc-<tag>-<pid>-<n>`: unique per process and call.
    pub fn new(tag: &str) -> Self {
        use std::sync::atomic::{AtomicU32, Ordering};
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("bc-{tag}-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Removes the directories [`TempDir`] left behind for processes that no longer run (a test
/// binary killed with SIGKILL runs no destructors).
pub fn remove_stale_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with("bc-") {
            continue;
        }
        // bc-<tag>-<pid>-<n>
        let pid = name.rsplit('-').nth(1).and_then(|p| p.parse::<u32>().ok());
        if let Some(pid) = pid
            && pid != std::process::id()
            && !Path::new(&format!("/proc/{pid}")).exists()
        {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// `name` in a folder of `PATH`.
pub fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// The program the variable `var` names (when set and not empty), else `name` on `PATH`.
pub fn program(var: &str, name: &str) -> Option<PathBuf> {
    match std::env::var_os(var) {
        Some(path) if !path.is_empty() => Some(PathBuf::from(path)),
        _ => on_path(name),
    }
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A plain HTTP/1.1 GET on loopback; returns the whole response, head and body.
pub fn http_response(port: u16, path: &str) -> Option<String> {
    http_response_at(IpAddr::from([127, 0, 0, 1]), port, path)
}

/// A plain HTTP/1.1 GET to `ip`; returns the whole response, head and body.
pub fn http_response_at(ip: IpAddr, port: u16, path: &str) -> Option<String> {
    let mut stream = TcpStream::connect((ip, port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    Some(response)
}

/// A plain HTTP/1.1 request with a JSON body to `ip`, answered within `limit`; returns
/// (status, body).
pub fn http_request_at(
    ip: IpAddr,
    port: u16,
    method: &str,
    path: &str,
    body: Option<&str>,
    limit: Duration,
) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&(ip, port).into(), limit).ok()?;
    stream.set_read_timeout(Some(limit)).ok()?;
    let body = body.unwrap_or_default();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {ip}:{port}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
    // Some servers (chromedriver) keep the connection open: read the head, then the body's
    // Content-Length, else up to the end.
    let mut received = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(at) = received.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = stream.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        received.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&received[..head_end]).into_owned();
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    let length = head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse::<usize>().ok())?
    });
    let mut body = received[head_end..].to_vec();
    match length {
        Some(length) => {
            while body.len() < length {
                let n = stream.read(&mut chunk).ok()?;
                if n == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..n]);
            }
        }
        None => {
            stream.read_to_end(&mut body).ok()?;
        }
    }
    Some((status, String::from_utf8_lossy(&body).into_owned()))
}

/// A plain HTTP/1.1 GET on loopback; returns (status, body).
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    http_get_at(IpAddr::from([127, 0, 0, 1]), port, path)
}

/// A plain HTTP/1.1 GET to `ip`; returns (status, body).
pub fn http_get_at(ip: IpAddr, port: u16, path: &str) -> Option<(u16, String)> {
    let response = http_response_at(ip, port, path)?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n")?.1.to_string();
    Some((status, body))
}

/// Polls `check` every 20 ms until it holds; panics after `limit` with `what` and `context()`.
pub fn wait_until(
    what: &str,
    limit: Duration,
    mut check: impl FnMut() -> bool,
    context: impl Fn() -> String,
) {
    let deadline = Instant::now() + limit;
    while !check() {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; {}",
            context()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The child gets SIGKILL when the thread that spawned it ends, so an aborted test run
/// leaves no process behind. `PR_SET_PDEATHSIG` follows the spawning *thread*: spawn from a
/// thread that lives as long as the child should (the main thread or a runtime worker, never
/// Tokio's blocking pool, whose idle threads exit).
pub fn die_with_parent(command: &mut Command) -> &mut Command {
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// SIGKILL and reap; a child that already exited is only reaped.
pub fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Waits up to `limit` for the child to exit; `None` if it is still running.
pub fn wait_exit(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The last `lines` lines of a log file.
pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
