//! The operator under measurement: in this process on a Tokio runtime of its own (the
//! default; its requests recorded by its client), or a binary started as a separate process
//! against the same cluster (`--operator-binary`, or the Go controller with `--go-controller`),
//! read through `/proc` and its `/metrics`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use browser_controller::cli::Cli;
use browser_controller::link::Link;
use browser_controller::metrics::Metrics;
use browser_controller::operator;
use clap::Parser;
use futures::FutureExt;
use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::BenchError;
use crate::cluster::Backend;
use crate::flavour::Flavour;
use crate::measure::{self, Cpu, Memory};
use crate::requests::RequestLog;
use crate::support::host::{TempDir, die_with_parent, free_port, kill, tail};

/// How the operator is run.
pub enum Launch {
    /// On `runtime`, whose threads are named `threads`.
    InProcess {
        backend: Backend,
        runtime: Handle,
        threads: &'static str,
    },
    /// `binary` with `KUBECONFIG=kubeconfig`; its logs go to files in `logs`; it serves
    /// `/metrics` on loopback port `metrics_port`, or a free one when `None`.
    Binary {
        binary: PathBuf,
        kubeconfig: PathBuf,
        logs: TempDir,
        metrics_port: Option<u16>,
        flavour: Flavour,
    },
}

impl Launch {
    pub fn describe(&self) -> String {
        match self {
            Launch::InProcess { threads, .. } => {
                format!(
                    "browser-controller in this process, on a Tokio runtime of its own (threads `{threads}`)"
                )
            }
            Launch::Binary {
                binary,
                flavour: Flavour::Ours,
                ..
            } => format!("browser-controller, separate process {}", binary.display()),
            Launch::Binary {
                binary,
                flavour: Flavour::Go,
                ..
            } => format!(
                "the Go browser-controller, separate process {} (all namespaces, one reconcile at a time, 20 requests/s per kind)",
                binary.display()
            ),
        }
    }

    /// CPU of the operator before [`Operator::start`]: its threads' so far in this process;
    /// zero for a process not started yet.
    pub fn cpu_before_start(&self) -> std::io::Result<Cpu> {
        match self {
            Launch::InProcess { threads, .. } => Cpu::now(threads),
            Launch::Binary { .. } => Ok(Cpu {
                operator: Duration::ZERO,
                process: measure::process_cpu()?,
            }),
        }
    }
}

/// A running operator.
pub enum Operator {
    InProcess(InProcess),
    Process(Process),
}

pub struct InProcess {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), BenchError>>,
    metrics: Arc<Metrics>,
    log: Arc<RequestLog>,
    threads: &'static str,
}

pub struct Process {
    child: Child,
    metrics_port: u16,
    log: PathBuf,
    flavour: Flavour,
}

/// How long a started process may take until its `/metrics` answers.
const PROCESS_START_LIMIT: Duration = Duration::from_secs(60);
/// How long a stopped process may take to exit gracefully before it is killed: the
/// operator's default `--shutdown-timeout` (25 s; the Go controller's manager waits 30 s) and a
/// margin.
const PROCESS_STOP_LIMIT: Duration = Duration::from_secs(35);

impl Operator {
    /// Starts the operator with `flags` (besides its endpoints). A process is started from
    /// the calling thread, which must outlive it (see `die_with_parent`).
    pub async fn start(launch: &Launch, flags: &[String]) -> Result<Self, BenchError> {
        match launch {
            Launch::InProcess {
                backend,
                runtime,
                threads,
            } => InProcess::start(backend, runtime, threads, flags).map(Operator::InProcess),
            Launch::Binary {
                binary,
                kubeconfig,
                logs,
                metrics_port,
                flavour,
            } => Process::start(binary, kubeconfig, logs, *metrics_port, flags, *flavour)
                .await
                .map(Operator::Process),
        }
    }

    /// An error when the operator has stopped on its own.
    pub fn check(&mut self) -> Result<(), BenchError> {
        match self {
            Operator::InProcess(op) => op.check(),
            Operator::Process(op) => op.check(),
        }
    }

    /// The operator's metrics text.
    pub async fn metrics(&self) -> Result<String, BenchError> {
        match self {
            Operator::InProcess(op) => Ok(op.metrics.encode()?),
            Operator::Process(op) => op.scrape().await,
        }
    }

    /// Which operator this is.
    pub fn flavour(&self) -> Flavour {
        match self {
            Operator::InProcess(_) => Flavour::Ours,
            Operator::Process(op) => op.flavour,
        }
    }

    /// Reconciles of Browsers run, and running now.
    pub async fn reconciles(&self) -> Result<(f64, f64), BenchError> {
        Ok(self.flavour().reconciles(&self.metrics().await?))
    }

    /// How often to poll the metrics: a process pays for each scrape.
    pub fn poll_interval(&self) -> Duration {
        match self {
            Operator::InProcess(_) => Duration::from_millis(5),
            Operator::Process(_) => Duration::from_millis(50),
        }
    }

    /// CPU time of the operator and of this process so far.
    pub fn cpu(&self) -> std::io::Result<Cpu> {
        match self {
            Operator::InProcess(op) => Cpu::now(op.threads),
            Operator::Process(op) => Ok(Cpu {
                operator: measure::pid_cpu(&op.child.id().to_string())?,
                process: measure::process_cpu()?,
            }),
        }
    }

    /// RSS and peak RSS of the operator's process; `None` in this process, where both are
    /// mostly the benchmark's.
    pub fn memory(&self) -> std::io::Result<Option<Memory>> {
        match self {
            Operator::InProcess(_) => Ok(None),
            Operator::Process(op) => measure::process_memory(&op.child.id().to_string()).map(Some),
        }
    }

    /// Every request the operator's client sent; only known in this process.
    pub fn log(&self) -> Option<&RequestLog> {
        match self {
            Operator::InProcess(op) => Some(&op.log),
            Operator::Process(_) => None,
        }
    }

    pub async fn stop(self) -> Result<(), BenchError> {
        match self {
            Operator::InProcess(op) => op.stop().await,
            Operator::Process(op) => op.stop().await,
        }
    }
}

impl InProcess {
    fn start(
        backend: &Backend,
        runtime: &Handle,
        threads: &'static str,
        flags: &[String],
    ) -> Result<Self, BenchError> {
        let mut argv = vec![
            "browser-controller".to_string(),
            "--metrics-addr=0".to_string(),
            "--health-probe-bind-address=0".to_string(),
        ];
        argv.extend_from_slice(flags);
        let args = Cli::try_parse_from(argv)
            .map_err(|e| BenchError::Flags(e.to_string()))?
            .run;
        let metrics = Arc::new(Metrics::new());
        let log = Arc::new(RequestLog::default());
        let (stop, stopped) = oneshot::channel::<()>();
        let backend = backend.clone();
        let (task_metrics, task_log) = (metrics.clone(), log.clone());
        let task = runtime.spawn(async move {
            // Built here so that the client's own task runs on the operator's runtime.
            let client = backend.operator_client(task_log)?;
            let stop = async move {
                let _ = stopped.await;
            };
            operator::run_with_client(client, Link::new(), args, task_metrics, stop)
                .await
                .map_err(BenchError::Operator)
        });
        Ok(InProcess {
            stop: Some(stop),
            task,
            metrics,
            log,
            threads,
        })
    }

    fn check(&mut self) -> Result<(), BenchError> {
        match (&mut self.task).now_or_never() {
            None => Ok(()),
            Some(Ok(Ok(()))) => Err(BenchError::OperatorExited("the task returned".into())),
            Some(Ok(Err(e))) => Err(e),
            Some(Err(e)) => Err(BenchError::Join(e)),
        }
    }

    async fn stop(mut self) -> Result<(), BenchError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match tokio::time::timeout(Duration::from_secs(60), &mut self.task).await {
            Ok(result) => result?,
            Err(_) => Err(BenchError::Timeout {
                what: "the operator to stop".into(),
                state: "still running after 60s".into(),
            }),
        }
    }
}

impl Process {
    async fn start(
        binary: &Path,
        kubeconfig: &Path,
        logs: &TempDir,
        metrics_port: Option<u16>,
        flags: &[String],
        flavour: Flavour,
    ) -> Result<Self, BenchError> {
        let metrics_port = metrics_port.unwrap_or_else(free_port);
        let log = logs.join(&format!("operator-{metrics_port}.log"));
        // Appended to: with --metrics-port every restart has the same port.
        let out = std::fs::File::options()
            .create(true)
            .append(true)
            .open(&log)?;
        let err = out.try_clone()?;
        let child = die_with_parent(
            Command::new(binary)
                .arg(format!("--metrics-addr=127.0.0.1:{metrics_port}"))
                .arg("--health-probe-bind-address=0")
                .args(flags)
                .env("KUBECONFIG", kubeconfig)
                .stdin(Stdio::null())
                .stdout(Stdio::from(out))
                .stderr(Stdio::from(err)),
        )
        .spawn()
        .map_err(|e| BenchError::Fixture(format!("starting {}: {e}", binary.display())))?;
        let mut process = Process {
            child,
            metrics_port,
            log,
            flavour,
        };
        let deadline = Instant::now() + PROCESS_START_LIMIT;
        while process.scrape().await.is_err() {
            process.check()?;
            if Instant::now() >= deadline {
                return Err(BenchError::Timeout {
                    what: format!("{} to serve /metrics", binary.display()),
                    state: process.log_tail(),
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(process)
    }

    fn log_tail(&self) -> String {
        format!("last lines of its log:\n{}", tail(&self.log, 20))
    }

    fn check(&mut self) -> Result<(), BenchError> {
        match self.child.try_wait()? {
            None => Ok(()),
            Some(status) => Err(BenchError::OperatorExited(format!(
                "{status}; {}",
                self.log_tail()
            ))),
        }
    }

    /// `GET /metrics` over HTTP/1.0 (so that the body comes whole, not chunked), on the
    /// blocking pool.
    async fn scrape(&self) -> Result<String, BenchError> {
        let port = self.metrics_port;
        let response = tokio::task::spawn_blocking(move || -> std::io::Result<String> {
            let mut stream = TcpStream::connect(("127.0.0.1", port))?;
            stream.set_read_timeout(Some(Duration::from_secs(10)))?;
            stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
            let mut response = String::new();
            stream.read_to_string(&mut response)?;
            Ok(response)
        })
        .await??;
        match response.split_once("\r\n\r\n") {
            Some((head, body)) if head.starts_with("HTTP/1.") && head.contains(" 200 ") => {
                Ok(body.to_string())
            }
            _ => Err(std::io::Error::other(format!(
                "/metrics answered {}",
                response.lines().next().unwrap_or("nothing")
            ))
            .into()),
        }
    }

    /// SIGTERM and the operator's own graceful stop; SIGKILL after [`PROCESS_STOP_LIMIT`].
    async fn stop(mut self) -> Result<(), BenchError> {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            // SAFETY: signalling our own child process, which has not been reaped yet.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        }
        let deadline = Instant::now() + PROCESS_STOP_LIMIT;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return if status.success() {
                    Ok(())
                } else {
                    Err(BenchError::OperatorExited(format!(
                        "stopping it: {status}; {}",
                        self.log_tail()
                    )))
                };
            }
            if Instant::now() >= deadline {
                kill(&mut self.child);
                return Err(BenchError::Timeout {
                    what: "the operator process to stop after SIGTERM".into(),
                    state: self.log_tail(),
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // Stopped already (reaped), or left behind by an error: never outlive the benchmark.
        kill(&mut self.child);
    }
}
