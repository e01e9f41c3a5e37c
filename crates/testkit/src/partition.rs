//! Network partitions between the operator and the API server, for tests: connections stay
//! open and go silent, as when a load balancer fails over or conntrack state is lost.
//!
//! - [`SilentProxy`] stands between the operator and the API server double: once cut, every
//!   connection through it (those open then and those made until the heal) stays open and
//!   forwards nothing, ever; after the heal, new connections work. No root needed.
//! - [`PacketDrop`] drops the packets of every connection a given uid makes to a port, in
//!   both directions, with `iptables` (the kernel sees a real partition: unanswered SYNs,
//!   retransmissions, keep-alive probes). Needs root and `iptables`; every rule it added is
//!   removed when it is dropped, a failed test included.

use std::net::SocketAddr;
use std::process::Command;

use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A TCP proxy that can be cut off.
pub struct SilentProxy {
    addr: SocketAddr,
    cut: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl SilentProxy {
    /// Forwards `127.0.0.1:<a free port>` to `target` until cut.
    pub async fn start(target: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let cut = watch::Sender::new(false);
        let cuts = cut.subscribe();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let cuts = cuts.clone();
                tokio::spawn(relay(client, target, cuts));
            }
        });
        Ok(Self { addr, cut, task })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every connection goes silent for good, and so does each new one until [`Self::heal`].
    pub fn cut(&self) {
        self.cut.send_replace(true);
    }

    pub fn heal(&self) {
        self.cut.send_replace(false);
    }
}

impl Drop for SilentProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn relay(mut client: TcpStream, target: SocketAddr, mut cuts: watch::Receiver<bool>) {
    if !*cuts.borrow_and_update() {
        if let Ok(mut upstream) = TcpStream::connect(target).await {
            tokio::select! {
                _ = tokio::io::copy_bidirectional(&mut client, &mut upstream) => return,
                _ = cuts.wait_for(|cut| *cut) => {}
            }
        } else {
            return;
        }
    }
    // Silent: whatever the client sends is swallowed, nothing comes back, until it closes.
    let mut sink = [0u8; 8192];
    while matches!(client.read(&mut sink).await, Ok(n) if n > 0) {}
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
