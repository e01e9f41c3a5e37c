//! Container images for the real node, made on this machine from local root filesystems (no
//! registry): a busybox image from Debian's static busybox, a Chromium + chromedriver image
//! from Debian's packages in a `debootstrap` root, and, where a geckodriver binary is given
//! (`$E2E_GECKODRIVER`), a Firefox ESR + geckodriver image likewise. Each is packed as a
//! docker-archive tarball (what `ctr images import` reads) and kept in a cache folder, so that
//! only the first run pays for it (a browser: a few minutes and about 1 GB).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;

/// The cache folder of built image tarballs (default under the system's temp folder).
pub const IMAGE_CACHE: &str = "E2E_IMAGE_CACHE";

/// Tag of the busybox image.
pub const BUSYBOX: &str = "localhost/busybox:e2e";
/// Tag of the same files sleeping for good: the node's pod sandbox image, and the pause
/// container of pre-pull pods.
pub const PAUSE: &str = "localhost/pause:e2e";
/// Tag of the Chromium + chromedriver image.
pub const CHROMIUM: &str = "localhost/chromium-driver:e2e";
/// Tag of the Firefox ESR + geckodriver image.
pub const FIREFOX: &str = "localhost/firefox-driver:e2e";
/// The geckodriver binary the Firefox image is made with (`cargo install geckodriver`).
pub const GECKODRIVER: &str = "E2E_GECKODRIVER";

/// Where Debian's static busybox is.
const BUSYBOX_BINARY: &str = "/bin/busybox";
const DEBIAN_MIRROR: &str = "http://deb.debian.org/debian";

#[derive(Debug, thiserror::Error)]
#[error("{what}: {detail}")]
pub struct ImageError {
    pub what: String,
    pub detail: String,
}

fn failed(what: impl Into<String>, detail: impl ToString) -> ImageError {
    ImageError {
        what: what.into(),
        detail: detail.to_string(),
    }
}

/// Runs `command`; an error carries its stderr.
fn run(what: &str, command: &mut Command) -> Result<String, ImageError> {
    let out = command.output().map_err(|e| failed(what, e))?;
    if !out.status.success() {
        return Err(failed(
            what,
            format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn sha256_hex(path: &Path) -> Result<String, ImageError> {
    let out = run("sha256sum", Command::new("sha256sum").arg(path))?;
    out.split_whitespace()
        .next()
        .map(str::to_string)
        .ok_or_else(|| failed("sha256sum", "no digest"))
}

/// The image settings that matter here.
#[derive(Default)]
pub struct ImageConfig<'a> {
    pub entrypoint: Option<&'a [&'a str]>,
    pub cmd: Option<&'a [&'a str]>,
    pub env: &'a [&'a str],
    /// `USER`, as `uid:gid`.
    pub user: Option<&'a str>,
    pub exposed_ports: &'a [u16],
}

/// Packs `rootfs` into the docker-archive tarball `out`, tagged `tag`.
pub fn pack(rootfs: &Path, tag: &str, config: &ImageConfig, out: &Path) -> Result<(), ImageError> {
    let work = out.with_extension("work");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).map_err(|e| failed("image work folder", e))?;
    let layer = work.join("layer.tar");
    run(
        "tar of the root filesystem",
        Command::new("tar")
            .args(["--numeric-owner", "--xattrs", "--sort=name", "-C"])
            .arg(rootfs)
            .arg("-cf")
            .arg(&layer)
            .arg("."),
    )?;
    let diff_id = sha256_hex(&layer)?;
    let mut env = vec!["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"];
    env.extend_from_slice(config.env);
    let mut image_config = json!({"Env": env, "WorkingDir": "/"});
    if let Some(entrypoint) = config.entrypoint {
        image_config["Entrypoint"] = json!(entrypoint);
    }
    if let Some(cmd) = config.cmd {
        image_config["Cmd"] = json!(cmd);
    }
    if let Some(user) = config.user {
        image_config["User"] = json!(user);
    }
    if !config.exposed_ports.is_empty() {
        let ports: serde_json::Map<String, serde_json::Value> = config
            .exposed_ports
            .iter()
            .map(|p| (format!("{p}/tcp"), json!({})))
            .collect();
        image_config["ExposedPorts"] = json!(ports);
    }
    let image = json!({
        "architecture": "amd64",
        "os": "linux",
        "config": image_config,
        "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{diff_id}")]},
    });
    let config_path = work.join("config.json");
    std::fs::write(&config_path, image.to_string()).map_err(|e| failed("image config", e))?;
    let config_name = format!("{}.json", sha256_hex(&config_path)?);
    std::fs::rename(&config_path, work.join(&config_name))
        .map_err(|e| failed("image config", e))?;
    std::fs::create_dir_all(work.join(&diff_id)).map_err(|e| failed("layer folder", e))?;
    std::fs::rename(&layer, work.join(&diff_id).join("layer.tar"))
        .map_err(|e| failed("layer", e))?;
    let manifest = json!([{
        "Config": config_name,
        "RepoTags": [tag],
        "Layers": [format!("{diff_id}/layer.tar")],
    }]);
    std::fs::write(work.join("manifest.json"), manifest.to_string())
        .map_err(|e| failed("manifest", e))?;
    let partial = out.with_extension("part");
    run(
        "tar of the image",
        Command::new("tar")
            .arg("-C")
            .arg(&work)
            .arg("-cf")
            .arg(&partial)
            .args(["manifest.json", &config_name, &diff_id]),
    )?;
    std::fs::rename(&partial, out).map_err(|e| failed("image tarball", e))?;
    let _ = std::fs::remove_dir_all(&work);
    Ok(())
}

/// A root filesystem of busybox and its applets.
fn busybox_rootfs(root: &Path) -> Result<(), ImageError> {
    let _ = std::fs::remove_dir_all(root);
    for dir in [
        "bin", "sbin", "usr/bin", "usr/sbin", "etc", "tmp", "root", "proc", "sys", "dev",
    ] {
        std::fs::create_dir_all(root.join(dir)).map_err(|e| failed("busybox root", e))?;
    }
    std::fs::copy(BUSYBOX_BINARY, root.join("bin/busybox"))
        .map_err(|e| failed(format!("copy {BUSYBOX_BINARY}"), e))?;
    let applets = run(
        "busybox --list-full",
        Command::new(BUSYBOX_BINARY).arg("--list-full"),
    )?;
    for applet in applets.lines().filter(|a| *a != "bin/busybox") {
        let path = root.join(applet);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| failed("applet folder", e))?;
        }
        let _ = std::os::unix::fs::symlink("/bin/busybox", &path);
    }
    std::fs::write(
        root.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
    )
    .map_err(|e| failed("passwd", e))?;
    std::fs::write(root.join("etc/group"), "root:x:0:\nnogroup:x:65534:\n")
        .map_err(|e| failed("group", e))?;
    Ok(())
}

/// The image tarballs of the node, built where missing.
pub struct ImageSet {
    pub busybox: PathBuf,
    pub pause: PathBuf,
    pub chromium: PathBuf,
}

/// The cache folder: [`IMAGE_CACHE`], else one under the temp folder shared by runs.
pub fn cache_dir() -> PathBuf {
    std::env::var_os(IMAGE_CACHE)
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("browser-controller-e2e-images"))
}

/// Builds what the cache lacks: busybox at once, Chromium with `debootstrap` (minutes).
pub fn build(cache: &Path) -> Result<ImageSet, ImageError> {
    std::fs::create_dir_all(cache).map_err(|e| failed("image cache", e))?;
    let (busybox, pause) = (cache.join("busybox.tar"), cache.join("pause.tar"));
    if !busybox.is_file() || !pause.is_file() {
        let root = cache.join("busybox-rootfs");
        busybox_rootfs(&root)?;
        pack(
            &root,
            BUSYBOX,
            &ImageConfig {
                entrypoint: None,
                cmd: Some(&["sh"]),
                ..ImageConfig::default()
            },
            &busybox,
        )?;
        pack(
            &root,
            PAUSE,
            &ImageConfig {
                entrypoint: Some(&["/bin/sleep", "2147483647"]),
                ..ImageConfig::default()
            },
            &pause,
        )?;
        let _ = std::fs::remove_dir_all(&root);
    }
    let chromium = cache.join("chromium.tar");
    if !chromium.is_file() {
        build_chromium(cache, &chromium)?;
    }
    Ok(ImageSet {
        busybox,
        pause,
        chromium,
    })
}

/// Debian's Chromium and chromedriver in a minimal `debootstrap` root.
fn build_chromium(cache: &Path, out: &Path) -> Result<(), ImageError> {
    let packages = "chromium chromium-driver fonts-dejavu-core ca-certificates";
    let root = debian_root(cache, "chromium-rootfs", packages)?;
    pack(
        &root,
        CHROMIUM,
        &ImageConfig {
            entrypoint: Some(&["/usr/bin/chromedriver"]),
            cmd: Some(&["--port=4444", "--allowed-ips=", "--allowed-origins=*"]),
            env: &["HOME=/tmp"],
            ..ImageConfig::default()
        },
        out,
    )
}

/// What starts the Firefox image. seleniferous forwards to `localhost:BROWSER_PORT` but sends
/// `Host: localhost` without the port, and geckodriver refuses a Host whose port is not the one
/// it listens on: it listens on port 80 (the port a Host without one means), and socat takes
/// port 4444 there.
const FIREFOX_DRIVER: &str = "#!/bin/sh
socat TCP-LISTEN:4444,fork,reuseaddr TCP:127.0.0.1:80 &
exec /usr/local/bin/geckodriver --host 127.0.0.1 --port 80 --allow-hosts localhost
";

/// The Firefox image, made with the geckodriver binary `$E2E_GECKODRIVER` names; `None`
/// without it.
pub fn firefox(cache: &Path) -> Result<Option<PathBuf>, ImageError> {
    let Some(geckodriver) = std::env::var_os(GECKODRIVER).filter(|g| !g.is_empty()) else {
        return Ok(None);
    };
    let out = cache.join("firefox.tar");
    if out.is_file() {
        return Ok(Some(out));
    }
    let packages = "firefox-esr socat fonts-dejavu-core ca-certificates";
    let root = debian_root(cache, "firefox-rootfs", packages)?;
    let bin = root.join("usr/local/bin");
    std::fs::copy(&geckodriver, bin.join("geckodriver"))
        .map_err(|e| failed(format!("copy {}", PathBuf::from(&geckodriver).display()), e))?;
    std::fs::write(bin.join("firefox-driver"), FIREFOX_DRIVER)
        .map_err(|e| failed("firefox-driver", e))?;
    run(
        "chmod",
        Command::new("chmod")
            .arg("+x")
            .arg(bin.join("geckodriver"))
            .arg(bin.join("firefox-driver")),
    )?;
    pack(
        &root,
        FIREFOX,
        &ImageConfig {
            entrypoint: Some(&["/usr/local/bin/firefox-driver"]),
            env: &["HOME=/tmp", "MOZ_HEADLESS=1"],
            ..ImageConfig::default()
        },
        &out,
    )?;
    Ok(Some(out))
}

/// The major version of the Firefox in the Firefox image made in `cache`, if it was made.
/// geckodriver matches a session's `browserVersion` against the Firefox it starts, as a
/// version requirement: `140` matches every 140.x, a word such as `esr` matches nothing.
pub fn firefox_version(cache: &Path) -> Option<String> {
    let ini = cache.join("firefox-rootfs/usr/lib/firefox-esr/application.ini");
    let text = std::fs::read_to_string(ini).ok()?;
    let version = text
        .lines()
        .find_map(|line| line.strip_prefix("Version="))?;
    version.split('.').next().map(str::to_string)
}

/// A minimal `debootstrap` root in `cache/name` with Debian's `packages` installed (the
/// bootstrap is kept between runs).
fn debian_root(cache: &Path, name: &str, packages: &str) -> Result<PathBuf, ImageError> {
    let root = cache.join(name);
    let done = root.join(".debootstrap-done");
    if !done.is_file() {
        let _ = std::fs::remove_dir_all(&root);
        run(
            "debootstrap",
            Command::new("debootstrap")
                .args(["--variant=minbase", "bookworm"])
                .arg(&root)
                .arg(DEBIAN_MIRROR),
        )?;
        std::fs::write(&done, "").map_err(|e| failed("debootstrap marker", e))?;
    }
    let _ = std::fs::copy("/etc/resolv.conf", root.join("etc/resolv.conf"));
    // No service starts inside the chroot.
    let policy = root.join("usr/sbin/policy-rc.d");
    std::fs::write(&policy, "#!/bin/sh\nexit 101\n").map_err(|e| failed("policy-rc.d", e))?;
    run("chmod", Command::new("chmod").arg("+x").arg(&policy))?;
    let proc_dir = root.join("proc");
    run(
        "mount /proc in the chroot",
        Command::new("mount")
            .args(["-t", "proc", "proc"])
            .arg(&proc_dir),
    )?;
    let script = format!(
        "export DEBIAN_FRONTEND=noninteractive; apt-get update -q && apt-get install -y -q --no-install-recommends {packages} && apt-get clean && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin"
    );
    let installed = run(
        &format!("apt-get install {packages}"),
        Command::new("chroot")
            .arg(&root)
            .args(["/bin/sh", "-c", &script]),
    );
    let _ = Command::new("umount").arg(&proc_dir).status();
    installed?;
    let _ = std::fs::remove_file(&policy);
    // The runtime mounts the pod's own.
    let _ = std::fs::write(root.join("etc/resolv.conf"), "");
    Ok(root)
}

/// Tag of the operator's image made by [`operator`].
pub const OPERATOR: &str = "localhost/browser-controller:e2e";

/// The static (musl) operator binary the image is made from: `$E2E_OPERATOR_BINARY`, else
/// what `.ci/build-static amd64` leaves in the workspace's target folder, if it is there.
pub fn operator_binary() -> Option<PathBuf> {
    std::env::var_os("E2E_OPERATOR_BINARY")
        .filter(|b| !b.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            let built = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../target/x86_64-unknown-linux-musl/release/browser-controller");
            built.is_file().then_some(built)
        })
}

/// The operator's image as the Dockerfile's final stage lays it out, from the static
/// `binary`: `/browser-controller` as the entrypoint, user 65532:65532, ports 8080 and 8081,
/// and what its distroless base brings that the operator may read (the CA bundle, `passwd`
/// and `group` with `nonroot`, a world-writable `/tmp`). The base itself cannot be pulled here.
pub fn operator(binary: &Path, out: &Path) -> Result<(), ImageError> {
    let root = out.with_extension("rootfs");
    let _ = std::fs::remove_dir_all(&root);
    for dir in ["etc/ssl/certs", "tmp", "home/nonroot"] {
        std::fs::create_dir_all(root.join(dir)).map_err(|e| failed("operator root", e))?;
    }
    std::fs::copy(binary, root.join("browser-controller"))
        .map_err(|e| failed(format!("copy {}", binary.display()), e))?;
    let _ = std::fs::copy(
        "/etc/ssl/certs/ca-certificates.crt",
        root.join("etc/ssl/certs/ca-certificates.crt"),
    );
    std::fs::write(
        root.join("etc/passwd"),
        "root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
    )
    .map_err(|e| failed("passwd", e))?;
    std::fs::write(
        root.join("etc/group"),
        "root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n",
    )
    .map_err(|e| failed("group", e))?;
    run(
        "chmod",
        Command::new("chmod").arg("1777").arg(root.join("tmp")),
    )?;
    run(
        "chown",
        Command::new("chown")
            .arg("65532:65532")
            .arg(root.join("home/nonroot")),
    )?;
    let packed = pack(
        &root,
        OPERATOR,
        &ImageConfig {
            entrypoint: Some(&["/browser-controller"]),
            user: Some("65532:65532"),
            exposed_ports: &[8080, 8081],
            ..ImageConfig::default()
        },
        out,
    );
    let _ = std::fs::remove_dir_all(&root);
    packed
}
