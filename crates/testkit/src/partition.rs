//! Network partitions between the operator and the API server, for tests: connections stay
//! open and go silent, as when a load balancer fails over or conntrack state is lost.
//!
//! - [`SilentProxy`] stands between the operator and the API server: once cut, every
//!   connection through it (those open then and those made until the heal) stays open and
//!   forwards nothing, ever; after the heal, new connections work. It can also hold every
//!   chunk of bytes for a while (a slow API server). No root needed.
//! - [`PacketDrop`] drops the packets of every connection a given uid makes to a port, in
//!   both directions, with `iptables` (the kernel sees a real partition: unanswered SYNs,
//!   retransmissions, keep-alive probes). Needs root and `iptables`; every rule it added is
//!   removed when it is dropped, a failed test included.

use std::net::SocketAddr;
use std::process::Command;

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A TCP proxy that can be cut off or slowed down.
pub struct SilentProxy {
    addr: SocketAddr,
    cut: watch::Sender<bool>,
    delay: watch::Sender<Duration>,
    task: tokio::task::JoinHandle<()>,
}

impl SilentProxy {
    /// Forwards `127.0.0.1:<a free port>` to `target` until cut.
    pub async fn start(target: SocketAddr) -> std::io::Result<Self> {
        Self::listen(target, false).await
    }

    /// [`Self::start`], and every connection can be slowed down ([`Self::slow`]). Bytes then
    /// pass chunk by chunk through a queue, which costs time even unslowed: only for callers
    /// that slow it.
    pub async fn start_slowable(target: SocketAddr) -> std::io::Result<Self> {
        Self::listen(target, true).await
    }

    async fn listen(target: SocketAddr, slowable: bool) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let cut = watch::Sender::new(false);
        let delay = watch::Sender::new(Duration::ZERO);
        let (cuts, delays) = (cut.subscribe(), delay.subscribe());
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let delays = slowable.then(|| delays.clone());
                tokio::spawn(relay(client, target, cuts.clone(), delays));
            }
        });
        Ok(Self {
            addr,
            cut,
            delay,
            task,
        })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every connection goes silent for good, and so does each new one until [`Self::heal`].
    pub fn cut(&self) {
        self.cut.send_replace(true);
    }

    pub fn heal(&self) {
        self.cut.send_replace(false);
    }

    /// Passes every chunk of bytes on this long after it came, both ways (`ZERO`: at once), as
    /// a slow or distant API server answers.
    pub fn slow(&self, delay: Duration) {
        self.delay.send_replace(delay);
    }
}

impl Drop for SilentProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn relay(
    mut client: TcpStream,
    target: SocketAddr,
    mut cuts: watch::Receiver<bool>,
    delays: Option<watch::Receiver<Duration>>,
) {
    if !*cuts.borrow_and_update() {
        let Ok(mut upstream) = TcpStream::connect(target).await else {
            return;
        };
        match delays {
            None => tokio::select! {
                _ = tokio::io::copy_bidirectional(&mut client, &mut upstream) => return,
                _ = cuts.wait_for(|cut| *cut) => {}
            },
            Some(delays) => {
                let (mut from_client, mut to_client) = client.split();
                let (mut from_upstream, mut to_upstream) = upstream.split();
                let ahead = forward(&mut from_client, &mut to_upstream, delays.clone());
                let back = forward(&mut from_upstream, &mut to_client, delays);
                tokio::select! {
                    _ = async { tokio::join!(ahead, back) } => return,
                    _ = cuts.wait_for(|cut| *cut) => {}
                }
            }
        }
    }
    // Silent: whatever the client sends is swallowed, nothing comes back, until it closes.
    let mut sink = [0u8; 8192];
    while matches!(client.read(&mut sink).await, Ok(n) if n > 0) {}
}

/// Copies `from` to `to` until either side closes, each chunk the current delay after it
/// arrived: latency, not less bandwidth (chunks read meanwhile follow at their own time).
async fn forward(
    from: &mut (impl AsyncRead + Unpin),
    to: &mut (impl AsyncWrite + Unpin),
    delays: watch::Receiver<Duration>,
) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    let read = async move {
        let mut chunk = [0u8; 16 * 1024];
        loop {
            match from.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let due = tokio::time::Instant::now() + *delays.borrow();
                    if tx.send((due, chunk[..n].to_vec())).is_err() {
                        break;
                    }
                }
            }
        }
    };
    let write = async {
        while let Some((due, bytes)) = rx.recv().await {
            // Unslowed bytes go on at once: even a timer that is already due costs a tick.
            if due > tokio::time::Instant::now() {
                tokio::time::sleep_until(due).await;
            }
            if to.write_all(&bytes).await.is_err() {
                break;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(read, write);
}

/// iptables rules that partition one uid's connections to one port.
pub struct PacketDrop {
    mark: String,
    port: u16,
    uid: u32,
    cut: bool,
}

/// Whether this process may change the packet filter (root with `iptables` installed).
pub fn packet_filter_available() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not root".into());
    }
    match Command::new("iptables")
        .args(["-w", "-S", "OUTPUT"])
        .output()
    {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => Err(format!(
            "iptables -S failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) => Err(format!("iptables: {e}")),
    }
}

fn iptables(args: &[&str]) -> Result<(), String> {
    let out = Command::new("iptables")
        .arg("-w")
        .args(args)
        .output()
        .map_err(|e| format!("iptables: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "iptables {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl PacketDrop {
    /// Marks every connection `uid` opens to `127.0.0.1:port` from now on (its packets flow
    /// until [`Self::cut`]). `mark` must be unique among concurrent users.
    pub fn new(uid: u32, port: u16, mark: u32) -> Result<Self, String> {
        let this = Self {
            mark: format!("{mark:#x}"),
            port,
            uid,
            cut: false,
        };
        Self::run(this.marking("-A"))?;
        Ok(this)
    }

    fn marking(&self, op: &str) -> Vec<String> {
        let (uid, port) = (self.uid.to_string(), self.port.to_string());
        [
            "-t",
            "mangle",
            op,
            "OUTPUT",
            "-o",
            "lo",
            "-p",
            "tcp",
            "-d",
            "127.0.0.1",
            "--dport",
            &port,
            "-m",
            "owner",
            "--uid-owner",
            &uid,
            "-j",
            "CONNMARK",
            "--set-mark",
            &self.mark,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    fn dropping(&self, op: &str, chain: &str) -> Vec<String> {
        let interface = if chain == "INPUT" { "-i" } else { "-o" };
        [
            op, chain, interface, "lo", "-m", "connmark", "--mark", &self.mark, "-j", "DROP",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    fn run(args: Vec<String>) -> Result<(), String> {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        iptables(&args)
    }

    /// Drops the marked connections' packets both ways; open connections stay open.
    pub fn cut(&mut self) -> Result<(), String> {
        Self::run(self.dropping("-I", "OUTPUT"))?;
        Self::run(self.dropping("-I", "INPUT"))?;
        self.cut = true;
        Ok(())
    }

    pub fn heal(&mut self) -> Result<(), String> {
        if self.cut {
            Self::run(self.dropping("-D", "OUTPUT"))?;
            Self::run(self.dropping("-D", "INPUT"))?;
            self.cut = false;
        }
        Ok(())
    }
}

impl Drop for PacketDrop {
    fn drop(&mut self) {
        if let Err(e) = self.heal() {
            eprintln!("warning: restoring the packet filter: {e}");
        }
        if let Err(e) = Self::run(self.marking("-D")) {
            eprintln!("warning: restoring the packet filter: {e}");
        }
    }
}
