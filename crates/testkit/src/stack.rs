//! The Selenosis stack beside a real node: browser-service, the hub (selenosis) and browser-ui
//! as host processes on free loopback ports, and the seleniferous sidecar's image packed from
//! its static binary. The binaries are given, as the node's are, one folder per set of
//! versions that builds together: `$E2E_STACK_ASSETS` names the single-group set (API group
//! `selenosis.io`), `$E2E_STACK_SPLIT_ASSETS` the split-group set of the selenosis Helm chart
//! 2.x (`browser.selenosis.io`, `browserconfig.selenosis.io`). Each folder holds `selenosis`,
//! `browser-service` and `seleniferous`, and where it was built `browser-ui` with its front
//! end in `browser-ui-static/`; `$E2E_GO_CONTROLLER` names the Go browser-controller's binary,
//! which scenarios run in the operator's place. Nothing here builds them.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use super::host::{self, free_port, kill, tail};
use super::images::{self, ImageConfig, ImageError};

/// The folder of the single-group set's binaries.
pub const STACK_ASSETS: &str = "E2E_STACK_ASSETS";
/// The folder of the split-group set's binaries.
pub const STACK_SPLIT_ASSETS: &str = "E2E_STACK_SPLIT_ASSETS";
/// The Go browser-controller's binary.
pub const GO_CONTROLLER: &str = "E2E_GO_CONTROLLER";
/// The sets of versions of the stack that build together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StackSet {
    /// API group `selenosis.io`: hub v2.0.5, browser-service v0.0.4, browser-ui v0.0.4.
    SingleGroup,
    /// The selenosis Helm chart 2.x's split groups: hub v2.0.8, browser-service v0.0.7.
    SplitGroups,
}

impl StackSet {
    /// The variable naming the set's folder.
    pub const fn variable(self) -> &'static str {
        match self {
            StackSet::SingleGroup => STACK_ASSETS,
            StackSet::SplitGroups => STACK_SPLIT_ASSETS,
        }
    }

    /// Tag of the set's seleniferous image.
    pub const fn seleniferous(self) -> &'static str {
        match self {
            StackSet::SingleGroup => "localhost/seleniferous:e2e",
            StackSet::SplitGroups => "localhost/seleniferous:e2e-split",
        }
    }
}
/// Where seleniferous listens in the pod, and the port the hub dials (`PROXY_PORT`).
pub const SIDECAR_PORT: u16 = 4445;
/// The longest wait for a component to answer its health check.
const READY_LIMIT: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum StackError {
    #[error("{0}")]
    Missing(String),
    #[error("{what}: {detail}")]
    Failed { what: String, detail: String },
    #[error(transparent)]
    Image(#[from] ImageError),
}

fn failed(what: impl Into<String>, detail: impl ToString) -> StackError {
    StackError::Failed {
        what: what.into(),
        detail: detail.to_string(),
    }
}

/// One set's binaries.
#[derive(Clone, Debug)]
pub struct StackAssets {
    pub set: StackSet,
    pub dir: PathBuf,
    pub selenosis: PathBuf,
    pub browser_service: PathBuf,
    pub seleniferous: PathBuf,
    /// browser-ui and its front end, where the set has them.
    pub ui: Option<(PathBuf, PathBuf)>,
}

impl StackAssets {
    /// `None` when the set's variable is not set; an error naming what is missing otherwise.
    pub fn from_env(set: StackSet) -> Result<Option<Self>, StackError> {
        let variable = set.variable();
        let Some(dir) = std::env::var_os(variable).filter(|d| !d.is_empty()) else {
            return Ok(None);
        };
        let dir = PathBuf::from(dir);
        let find = |name: &str| {
            let path = dir.join(name);
            path.is_file().then_some(path).ok_or_else(|| {
                StackError::Missing(format!(
                    "{name} not found in ${variable} ({})",
                    dir.display()
                ))
            })
        };
        let (ui, ui_static) = (dir.join("browser-ui"), dir.join("browser-ui-static"));
        let ui =
            (ui.is_file() && ui_static.join("index.html").is_file()).then_some((ui, ui_static));
        Ok(Some(Self {
            set,
            selenosis: find("selenosis")?,
            browser_service: find("browser-service")?,
            seleniferous: find("seleniferous")?,
            ui,
            dir,
        }))
    }
}

/// The Go browser-controller's binary: `None` when [`GO_CONTROLLER`] is not set.
pub fn go_controller() -> Result<Option<PathBuf>, StackError> {
    let Some(path) = std::env::var_os(GO_CONTROLLER).filter(|p| !p.is_empty()) else {
        return Ok(None);
    };
    let path = PathBuf::from(path);
    if path.is_file() {
        Ok(Some(path))
    } else {
        Err(StackError::Missing(format!(
            "${GO_CONTROLLER}: no file {}",
            path.display()
        )))
    }
}

/// The seleniferous image as its own Dockerfile makes it: the static binary alone, run as
/// user 65532, packed into a tarball in `cache` for the node to import.
pub fn seleniferous_image(assets: &StackAssets, cache: &Path) -> Result<PathBuf, StackError> {
    let root = cache.join("seleniferous-rootfs");
    let _ = std::fs::remove_dir_all(&root);
    for dir in ["etc", "tmp"] {
        std::fs::create_dir_all(root.join(dir)).map_err(|e| failed("seleniferous root", e))?;
    }
    std::fs::copy(&assets.seleniferous, root.join("seleniferous"))
        .map_err(|e| failed(format!("copy {}", assets.seleniferous.display()), e))?;
    let tag = assets.set.seleniferous();
    std::fs::write(
        root.join("etc/passwd"),
        "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
    )
    .map_err(|e| failed("passwd", e))?;
    let out = cache.join(format!(
        "seleniferous-{}.tar",
        tag.rsplit(':').next().unwrap_or("e2e")
    ));
    images::pack(
        &root,
        tag,
        &ImageConfig {
            entrypoint: Some(&["/seleniferous"]),
            ..ImageConfig::default()
        },
        &out,
    )?;
    let _ = std::fs::remove_dir_all(&root);
    Ok(out)
}

/// A component of the stack running as a host process, its output in a log file.
pub struct Component {
    name: &'static str,
    child: Option<Child>,
    port: u16,
    log: PathBuf,
}

impl Component {
    /// Starts `binary` with `args` and `env`, listening on `port`, logging to `log`, and
    /// waits until `health` answers 200.
    fn start(
        name: &'static str,
        binary: &Path,
        args: &[String],
        env: &[(&str, String)],
        port: u16,
        health: &str,
        log: PathBuf,
    ) -> Result<Self, StackError> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(|e| failed(format!("{name} log"), e))?;
        let err = file
            .try_clone()
            .map_err(|e| failed(format!("{name} log"), e))?;
        let mut command = std::process::Command::new(binary);
        command
            .args(args)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(std::process::Stdio::null())
            .stdout(file)
            .stderr(err);
        let child = host::die_with_parent(&mut command)
            .spawn()
            .map_err(|e| failed(format!("start {name}"), e))?;
        let mut component = Self {
            name,
            child: Some(child),
            port,
            log,
        };
        let deadline = Instant::now() + READY_LIMIT;
        loop {
            // By the answer's length: chromedriver keeps connections open.
            let answer =
                host::http_request_at(LOOPBACK, port, "GET", health, None, Duration::from_secs(5));
            if answer.is_some_and(|(code, _)| code == 200) {
                return Ok(component);
            }
            let exited = component
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || Instant::now() > deadline {
                let why = match exited {
                    Some(status) => format!("exited: {status}"),
                    None => format!("no 200 from {health} within {READY_LIMIT:?}"),
                };
                return Err(failed(name, format!("{why}\n{}", component.logs(20))));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The component's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `lines` lines of its log, headed by its name.
    pub fn logs(&self, lines: usize) -> String {
        format!(
            "--- {} (last {lines} lines) ---\n{}",
            self.name,
            tail(&self.log, lines)
        )
    }
}

impl Drop for Component {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            kill(&mut child);
        }
    }
}

/// browser-service on a free loopback port with `kubeconfig`'s identity; the components
/// started beside it log into the same folder, their files named `<prefix>.<component>.log`.
pub struct Stack {
    pub assets: StackAssets,
    pub service: Component,
    logs: PathBuf,
    prefix: String,
}

impl Stack {
    /// Starts browser-service; it serves once its Browser cache is filled, which needs the
    /// kinds installed in the group it was built for.
    pub fn start(
        assets: StackAssets,
        kubeconfig: &Path,
        logs: &Path,
        prefix: &str,
    ) -> Result<Self, StackError> {
        let log = |name: &str| logs.join(format!("{prefix}.{name}.log"));
        let port = free_port();
        let service = Component::start(
            "browser-service",
            &assets.browser_service,
            &[
                format!("--kubeconfig={}", kubeconfig.display()),
                format!("--listen=127.0.0.1:{port}"),
            ],
            &[],
            port,
            "/healthz",
            log("browser-service"),
        )?;
        Ok(Self {
            assets,
            service,
            logs: logs.to_path_buf(),
            prefix: prefix.to_string(),
        })
    }

    fn log(&self, name: &str) -> PathBuf {
        self.logs.join(format!("{}.{name}.log", self.prefix))
    }

    /// A hub for `namespace` (the hub serves one), giving a Browser `startup_timeout` to run.
    pub fn hub(&self, namespace: &str, startup_timeout: Duration) -> Result<Component, StackError> {
        let port = free_port();
        Component::start(
            "selenosis",
            &self.assets.selenosis,
            &[],
            &[
                ("LISTEN_ADDR", format!("127.0.0.1:{port}")),
                ("BROWSER_SERVICE_URL", self.service.url()),
                ("NAMESPACE", namespace.to_string()),
                ("PROXY_PORT", SIDECAR_PORT.to_string()),
                (
                    "BROWSER_STARTUP_TIMEOUT",
                    format!("{}s", startup_timeout.as_secs()),
                ),
            ],
            port,
            "/status",
            self.log("selenosis"),
        )
    }

    /// browser-ui for the sessions of `namespace`, with `hub` as its Selenosis; `None` when
    /// the set has none.
    pub fn ui(&self, namespace: &str, hub: &Component) -> Option<Result<Component, StackError>> {
        let (ui, ui_static) = self.assets.ui.as_ref()?;
        let port = free_port();
        Some(Component::start(
            "browser-ui",
            ui,
            &[],
            &[
                ("LISTEN_ADDR", format!("127.0.0.1:{port}")),
                ("BROWSER_SERVICE_URL", self.service.url()),
                ("SELENOSIS_URL", hub.url()),
                ("BROWSER_NAMESPACE", namespace.to_string()),
                ("UI_STATIC_PATH", ui_static.display().to_string()),
            ],
            port,
            "/health",
            self.log("browser-ui"),
        ))
    }
}

/// A page served over HTTP on every address of the host, for browsers in pods to load; the
/// server answers every request with `html` until dropped.
pub struct Page {
    pub port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Page {
    pub fn serve(html: &str) -> Self {
        use std::io::{Read, Write};
        use std::sync::atomic::{AtomicBool, Ordering};
        let listener =
            std::net::TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0)).expect("a port for the page");
        let port = listener.local_addr().expect("its address").port();
        listener.set_nonblocking(true).expect("non-blocking");
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let response = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{html}",
            html.len()
        );
        let thread = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((mut stream, _)) => {
                            let _ = stream.set_nonblocking(false);
                            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                            let mut request = [0u8; 4096];
                            let _ = stream.read(&mut request);
                            let _ = stream.write_all(response.as_bytes());
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(20)),
                    }
                }
            })
        };
        Self {
            port,
            stop,
            thread: Some(thread),
        }
    }

    /// The page's address as a pod reaches it: the host's own address on its default route.
    pub fn url(&self) -> String {
        format!("http://{}:{}/", super::node::host_ip(), self.port)
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Loopback, where the hub and browser-ui listen.
pub const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// Where headless Chromium keeps the pages it rendered: beside the image cache, kept after the
/// run so that a person can look at them.
pub fn screenshots_dir() -> PathBuf {
    std::env::temp_dir().join("browser-controller-e2e-screenshots")
}

/// Renders `url` in the host's headless Chromium, driven by its chromedriver (Debian's
/// `chromium` and `chromium-driver`): waits until the page's DOM contains each of `wanted`
/// (the page draws what it fetched), saves a screenshot to `png`, and returns the DOM.
pub fn render_page(url: &str, wanted: &[&str], png: &Path) -> Result<String, StackError> {
    use base64::Engine;
    if let Some(dir) = png.parent() {
        std::fs::create_dir_all(dir).map_err(|e| failed("screenshot folder", e))?;
    }
    let port = free_port();
    let _driver = Component::start(
        "chromedriver",
        Path::new("chromedriver"),
        &[format!("--port={port}")],
        &[],
        port,
        "/status",
        png.with_extension("chromedriver.log"),
    )?;
    let limit = Duration::from_secs(60);
    let send = |method: &str, path: &str, body: Option<serde_json::Value>| {
        let (status, answer) =
            super::webdriver::request(LOOPBACK, port, method, path, body.as_ref(), limit)
                .map_err(|e| failed("chromedriver", e))?;
        if status == 200 {
            Ok(answer["value"].clone())
        } else {
            Err(failed(
                format!("chromedriver {method} {path}"),
                format!("{status}: {answer}"),
            ))
        }
    };
    let mut capabilities = super::webdriver::headless_chrome();
    if let Some(args) =
        capabilities.pointer_mut("/capabilities/alwaysMatch/goog:chromeOptions/args")
        && let Some(args) = args.as_array_mut()
    {
        args.push("--window-size=1280,800".into());
    }
    let session = send("POST", "/session", Some(capabilities))?;
    let id = session["sessionId"]
        .as_str()
        .ok_or_else(|| failed("chromedriver", format!("no session id: {session}")))?
        .to_string();
    send(
        "POST",
        &format!("/session/{id}/url"),
        Some(serde_json::json!({"url": url})),
    )?;
    let deadline = Instant::now() + limit;
    let dom = loop {
        let dom = send("GET", &format!("/session/{id}/source"), None)?;
        let dom = dom.as_str().unwrap_or_default().to_string();
        if wanted.iter().all(|w| dom.contains(w)) || Instant::now() > deadline {
            break dom;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    let shot = send("GET", &format!("/session/{id}/screenshot"), None)?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(shot.as_str().unwrap_or_default())
        .map_err(|e| failed("screenshot", e))?;
    std::fs::write(png, bytes).map_err(|e| failed("screenshot", e))?;
    let _ = send("DELETE", &format!("/session/{id}"), None);
    Ok(dom)
}
