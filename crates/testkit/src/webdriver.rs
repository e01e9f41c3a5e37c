//! WebDriver on the real node: the BrowserConfig entry of the Chromium image
//! ([`crate::images::CHROMIUM`]) with chromedriver on 4444, a busybox stand-in for the seleniferous
//! sidecar, the capabilities of a headless Chromium session, and one WebDriver command, to
//! chromedriver in a pod or through a Selenium hub.

use std::net::IpAddr;
use std::time::Duration;

use serde_json::{Value, json};

use super::host;
use super::images::{BUSYBOX, CHROMIUM};

/// chromedriver's port in the Chromium image.
pub const PORT: u16 = 4444;

/// A sidecar that stands in for seleniferous: it runs `script` (busybox sh).
pub fn sidecar(script: &str) -> Value {
    json!({
        "name": "seleniferous",
        "image": BUSYBOX,
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", script],
        "ports": [{"containerPort": 4445}],
        "resources": {"requests": {"cpu": "10m", "memory": "8Mi"}},
    })
}

/// The Chromium entry: chromedriver on [`PORT`], shared memory for the browser, and a sidecar
/// running `sidecar_script`.
pub fn chromium(sidecar_script: &str) -> Value {
    json!({
        "image": CHROMIUM,
        "imagePullPolicy": "Never",
        "ports": [{"containerPort": PORT}],
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "2Gi"}},
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "512Mi"}}],
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
        "sidecars": [sidecar(sidecar_script)],
    })
}

/// What a client asks `POST /session` for: headless Chromium, as the image can run it.
pub fn headless_chrome() -> Value {
    json!({"capabilities": {"alwaysMatch": {
        "browserName": "chrome",
        "goog:chromeOptions": {"args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]},
    }}})
}

/// A WebDriver command to chromedriver at `ip` (blocking, at most `limit`); the answer's
/// `value`.
pub fn command(
    ip: IpAddr,
    method: &str,
    path: &str,
    body: Option<&Value>,
    limit: Duration,
) -> Result<Value, String> {
    let (status, answer) = request(ip, PORT, method, path, body, limit)?;
    if status != 200 {
        return Err(format!("{method} {path}: {status}: {answer}"));
    }
    Ok(answer["value"].clone())
}

/// A WebDriver request to `ip:port` (blocking, at most `limit`), as a Selenium client sends
/// it: the answer's status and JSON (a body that is no JSON as a JSON string), whatever the
/// status; `Err` only without an answer.
pub fn request(
    ip: IpAddr,
    port: u16,
    method: &str,
    path: &str,
    body: Option<&Value>,
    limit: Duration,
) -> Result<(u16, Value), String> {
    let body = body.map(Value::to_string);
    let (status, text) = host::http_request_at(ip, port, method, path, body.as_deref(), limit)
        .ok_or_else(|| format!("{method} {path}: no answer"))?;
    let answer = serde_json::from_str(&text).unwrap_or(Value::String(text));
    Ok((status, answer))
}
