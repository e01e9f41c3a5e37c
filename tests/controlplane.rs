//! The control-plane harness (`crates/testkit/src/controlplane.rs`) against stand-ins for `etcd`
//! and `kube-apiserver`: small Python programs that print the flags they got, answer etcd's
//! `/health`, and serve HTTPS with the generated certificate, checking the admin token. They
//! prove what can be proven without the real binaries: asset lookup, the flags, the serving
//! certificate (trusted through the kubeconfig's CA, valid for 127.0.0.1), the token and
//! impersonation in the kubeconfigs, the wait for `/readyz`, and a teardown that leaves no
//! process and no file. Skipped with a note when `python3` is missing.

use testkit as support;

use std::path::Path;
use std::process::Command;

use support::controlplane::{Assets, ControlPlane, ControlPlaneError, client_from};
use support::host::TempDir;

const FAKE_ETCD: &str = r#"#!/usr/bin/env python3
import http.server, sys
if "--help" in sys.argv:
    print("      --unsafe-no-fsync    Disables fsync, unsafe, will cause data loss.")
    sys.exit(0)
print("argv:", " ".join(sys.argv[1:]), flush=True)
flags = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
port = int(flags["listen-client-urls"].rsplit(":", 1)[1])
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'{"health":"true","reason":""}' if self.path == "/health" else b"{}"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
"#;

const FAKE_APISERVER: &str = r#"#!/usr/bin/env python3
import http.server, ssl, sys
print("argv:", " ".join(sys.argv[1:]), flush=True)
flags = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
token = open(flags["token-auth-file"]).read().split(",")[0]
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.headers.get("Authorization") != "Bearer " + token:
            code, body = 401, b"Unauthorized"
        elif self.path.startswith("/readyz"):
            code, body = 200, b"ok"
        elif self.path.startswith("/impersonated"):
            code, body = 200, (self.headers.get("Impersonate-User") or "").encode()
        else:
            code, body = 404, b"not found"
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", int(flags["secure-port"])), Handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(flags["tls-cert-file"], flags["tls-private-key-file"])
server.socket = context.wrap_socket(server.socket, server_side=True)
server.serve_forever()
"#;

fn has(program: &str, arg: &str) -> bool {
    Command::new(program)
        .arg(arg)
        .output()
        .is_ok_and(|o| o.status.success())
}

fn write_exec(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn openssl(args: &[&str]) -> String {
    let out = Command::new("openssl").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

async fn get(client: &kube::Client, path: &str) -> String {
    let request = http::Request::get(path).body(Vec::new()).unwrap();
    client.request_text(request).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_harness_starts_both_waits_for_readyz_over_tls_and_leaves_nothing_behind() {
    if !has("python3", "--version") {
        println!("python3 not installed: control-plane harness test skipped");
        return;
    }
    let assets_dir = TempDir::new("fake-assets");
    write_exec(&assets_dir.join("etcd"), FAKE_ETCD);
    write_exec(&assets_dir.join("kube-apiserver"), FAKE_APISERVER);
    let assets = Assets::find(assets_dir.path()).unwrap();
    let plane = ControlPlane::start(&assets).await.unwrap();

    let client = plane.client().await.unwrap();
    assert_eq!(get(&client, "/readyz").await, "ok");
    let operator = plane.dir().join("operator.kubeconfig");
    plane
        .write_kubeconfig(
            &operator,
            Some("system:serviceaccount:browser-controller:browser-controller"),
        )
        .unwrap();
    let as_operator = client_from(&operator).await.unwrap();
    assert_eq!(
        get(&as_operator, "/impersonated").await,
        "system:serviceaccount:browser-controller:browser-controller"
    );

    let file = |name: &str| plane.dir().join(name).display().to_string();
    if has("openssl", "version") {
        let verified = openssl(&["verify", "-CAfile", &file("ca.crt"), &file("apiserver.crt")]);
        assert!(verified.trim_end().ends_with("OK"), "{verified}");
        let san = openssl(&[
            "x509",
            "-in",
            &file("apiserver.crt"),
            "-noout",
            "-ext",
            "subjectAltName",
        ]);
        assert!(san.contains("DNS:localhost"), "{san}");
        assert!(san.contains("IP Address:127.0.0.1"), "{san}");
        // The service-account key pair: a private key and its public half, as PEM.
        openssl(&["pkey", "-in", &file("sa.key"), "-noout"]);
        openssl(&["pkey", "-pubin", "-in", &file("sa.pub"), "-noout"]);
    }

    let logs = plane.logs(10);
    for flag in [
        "--unsafe-no-fsync",
        "--listen-peer-urls=http://127.0.0.1:",
        "--initial-cluster=default=http://127.0.0.1:",
        "--etcd-servers=http://127.0.0.1:",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        "--endpoint-reconciler-type=none",
        "--authorization-mode=RBAC",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        "--service-account-key-file=",
        "--service-account-signing-key-file=",
        "--service-cluster-ip-range=10.0.0.0/24",
        "--allow-privileged=true",
        "--disable-admission-plugins=ServiceAccount",
        "--cert-dir=",
    ] {
        assert!(logs.contains(flag), "{flag} missing:\n{logs}");
    }
    assert!(!logs.contains("--insecure-port"), "{logs}");
    let tokens = std::fs::read_to_string(plane.dir().join("tokens.csv")).unwrap();
    assert!(
        tokens.trim_end().ends_with(",\"system:masters\""),
        "{tokens}"
    );

    let dir = plane.dir().to_path_buf();
    let pids = plane.pids();
    assert_eq!(pids.len(), 2);
    plane.stop();
    assert!(!dir.exists(), "{} left behind", dir.display());
    for pid in pids {
        // Killed and reaped: not even a zombie is left.
        assert!(!Path::new(&format!("/proc/{pid}")).exists(), "pid {pid}");
    }
}

#[test]
fn assets_without_kube_apiserver_are_an_error_naming_it() {
    let dir = TempDir::new("no-assets");
    let err = Assets::find(dir.path()).unwrap_err();
    assert!(matches!(
        err,
        ControlPlaneError::Missing("kube-apiserver", ..)
    ));
    assert!(
        err.to_string()
            .contains("kube-apiserver not found in $KUBEBUILDER_ASSETS")
    );
}
