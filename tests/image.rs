//! The Dockerfile, read without Docker: pinned bases, one file for every platform, the build
//! command CI runs (`.ci/build-static`), the dependency-cache layer, the labels. CI builds the
//! image's binary itself with that command (`.ci/run`).

use std::path::Path;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap()
}

/// The Dockerfile's instructions, continuation lines joined, comments dropped.
fn instructions() -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in read("Dockerfile").lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && current.is_empty()) {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(part) => {
                current.push_str(part);
                current.push(' ');
            }
            None => {
                current.push_str(trimmed);
                out.push(std::mem::take(&mut current));
            }
        }
    }
    out
}

/// Default of a build argument: `ARG NAME=value`.
fn arg(name: &str) -> Option<String> {
    instructions().iter().find_map(|i| {
        i.strip_prefix(&format!("ARG {name}="))
            .map(|v| v.trim_matches('"').to_string())
    })
}

/// The image of each stage, build arguments resolved.
fn bases() -> Vec<String> {
    instructions()
        .iter()
        .filter_map(|i| i.strip_prefix("FROM "))
        .map(|from| {
            let image = from
                .split_whitespace()
                .find(|w| !w.starts_with("--"))
                .unwrap();
            match image.strip_prefix("${").and_then(|v| v.strip_suffix('}')) {
                Some(name) => arg(name).unwrap_or_else(|| panic!("ARG {name} has no default")),
                None => image.to_string(),
            }
        })
        .collect()
}

/// `key = "value"` of the package in Cargo.toml.
fn package(key: &str) -> String {
    let manifest = read("Cargo.toml");
    manifest
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{key} = ")))
        .map(|v| v.trim_matches('"').to_string())
        .unwrap_or_else(|| panic!("Cargo.toml has no {key}"))
}

#[test]
fn base_images_are_pinned_by_tag_and_digest() {
    let bases = bases();
    assert_eq!(bases.len(), 2, "{bases:?}");
    for image in &bases {
        let (name, digest) = image.split_once("@sha256:").expect("pinned by digest");
        assert_eq!(digest.len(), 64, "{image}");
        assert!(digest.bytes().all(|b| b.is_ascii_hexdigit()), "{image}");
        let tag = name.rsplit_once(':').map(|(_, t)| t).unwrap_or_default();
        assert!(!tag.is_empty() && !tag.contains('/'), "no tag: {image}");
        assert_ne!(tag, "latest", "{image}");
    }
    assert!(bases[0].contains("/rust:1."), "{}", bases[0]);
    assert!(
        bases[1].starts_with("gcr.io/distroless/static-debian12:nonroot@"),
        "{}",
        bases[1]
    );
}

#[test]
fn one_dockerfile_cross_compiles_for_every_platform_with_the_ci_command() {
    let instructions = instructions();
    let header = read("Dockerfile");
    assert!(
        header.contains("docker buildx build --platform linux/amd64,linux/arm64"),
        "the documented build"
    );
    let build_stage = instructions
        .iter()
        .find(|i| i.starts_with("FROM ") && i.ends_with(" AS build"))
        .unwrap();
    assert!(
        build_stage.starts_with("FROM --platform=$BUILDPLATFORM "),
        "{build_stage}"
    );
    assert!(instructions.iter().any(|i| i == "ARG TARGETARCH"));
    let builds: Vec<&String> = instructions
        .iter()
        .filter(|i| i.starts_with("RUN ") && i.contains("build-static"))
        .collect();
    assert_eq!(builds.len(), 2, "dependency layer and binary: {builds:?}");
    for build in &builds {
        assert!(
            build.contains(".ci/build-static \"$TARGETARCH\""),
            "{build}"
        );
        assert!(
            !build.contains("cargo "),
            "cargo only through the script: {build}"
        );
    }
    // Every platform of the documented build is one the script knows.
    let script = read(".ci/build-static");
    for arch in ["amd64", "arm64"] {
        assert!(
            script.contains(&format!("\n    {arch}) target=")),
            "{arch} missing"
        );
    }
    let rustup = instructions
        .iter()
        .find(|i| i.starts_with("RUN rustup target add"))
        .unwrap();
    for target in ["x86_64-unknown-linux-musl", "aarch64-unknown-linux-musl"] {
        assert!(rustup.contains(target), "{rustup}");
        assert!(script.contains(target), "{target}");
    }
}

#[test]
fn dependencies_are_built_in_a_layer_of_their_own() {
    let instructions = instructions();
    let position = |prefix: &str| {
        instructions
            .iter()
            .position(|i| i.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix}"))
    };
    let manifests = position("COPY Cargo.toml Cargo.lock");
    let sources = position("COPY src src");
    let first_build = instructions
        .iter()
        .position(|i| i.contains("build-static \"$TARGETARCH\""))
        .unwrap();
    assert!(manifests < first_build && first_build < sources);
    assert!(
        !instructions.iter().any(|i| i.starts_with("COPY . ")),
        "copying everything would rebuild every dependency on any change"
    );
    // The placeholders cover every target Cargo.toml declares, or cargo refuses the manifest.
    let placeholders = &instructions[first_build];
    let manifest = read("Cargo.toml");
    let mut declared = Vec::new();
    let mut section = "";
    for line in manifest.lines() {
        if line.starts_with('[') {
            section = line;
        } else if let Some(path) = line.strip_prefix("path = ") {
            declared.push(path.trim_matches('"').to_string());
        } else if let Some(name) = line.strip_prefix("name = ") {
            let name = name.trim_matches('"');
            match section {
                "[[bench]]" => declared.push(format!("benches/{name}.rs")),
                "[[test]]" => declared.push(format!("tests/{name}.rs")),
                _ => {}
            }
        }
    }
    assert!(declared.len() >= 4, "{declared:?}");
    for path in &declared {
        assert!(
            placeholders.contains(path.as_str()),
            "no placeholder for {path}"
        );
    }
    // Only the placeholder sources go before the real ones come: cargo wants the others to
    // exist for the real build too.
    let removed: Vec<&str> = placeholders
        .split("rm -rf ")
        .skip(1)
        .flat_map(|rest| {
            rest.split("&&")
                .next()
                .unwrap_or_default()
                .split_whitespace()
        })
        .collect();
    // Each workspace member the same way: its manifest with the top one, a placeholder
    // library, its sources after the dependencies' build.
    let members: Vec<String> = manifest
        .lines()
        .find_map(|l| l.strip_prefix("members = "))
        .map(|list| {
            list.trim_matches(['[', ']'])
                .split(',')
                .map(|m| m.trim().trim_matches('"').to_string())
                .filter(|m| !m.is_empty())
                .collect()
        })
        .unwrap_or_default();
    assert!(!members.is_empty(), "Cargo.toml names no workspace members");
    // Sources come for the members the binary is built from (its path dependencies); the
    // others keep their placeholders.
    let dependencies = manifest
        .split("\n[dependencies]\n")
        .nth(1)
        .and_then(|rest| rest.split("\n[").next())
        .unwrap_or_default();
    let mut expected_removed = vec!["src".to_string()];
    for member in &members {
        let copy_manifest = position(&format!("COPY {member}/Cargo.toml {member}/Cargo.toml"));
        assert!(copy_manifest < first_build, "{member}");
        assert!(
            placeholders.contains(&format!("{member}/src/lib.rs")),
            "no placeholder library for {member}"
        );
        let copied = instructions
            .iter()
            .position(|i| i == &format!("COPY {member}/src {member}/src"));
        if dependencies.contains(&format!("path = \"{member}\"")) {
            assert!(copied.is_some_and(|c| first_build < c), "{member}");
            expected_removed.push(format!("{member}/src"));
        } else {
            assert_eq!(copied, None, "{member} is not needed by the binary");
        }
    }
    assert!(
        expected_removed.len() > 1,
        "the binary builds on no workspace member"
    );
    assert_eq!(removed, expected_removed, "{placeholders}");
}

#[test]
fn labels_name_the_source_version_and_licence() {
    let labels: String = instructions()
        .iter()
        .filter_map(|i| i.strip_prefix("LABEL "))
        .collect();
    for key in [
        "org.opencontainers.image.source=\"${SOURCE}\"",
        "org.opencontainers.image.revision=\"${REVISION}\"",
        "org.opencontainers.image.version=\"${VERSION}\"",
    ] {
        assert!(labels.contains(key), "{key}: {labels}");
    }
    assert_eq!(arg("VERSION"), Some(package("version")));
    assert!(labels.contains(&format!(
        "org.opencontainers.image.licenses=\"{}\"",
        package("license")
    )));
    assert!(labels.contains(&format!(
        "org.opencontainers.image.description=\"{}\"",
        package("description")
    )));
}

#[test]
fn the_image_runs_the_binary_as_the_non_root_user() {
    let instructions = instructions();
    let runtime: Vec<&String> = instructions
        .iter()
        .skip_while(|i| !i.starts_with("FROM ${RUNTIME_IMAGE}"))
        .collect();
    assert!(
        runtime.contains(&&"COPY --from=build /browser-controller /browser-controller".to_string())
    );
    assert!(runtime.contains(&&"USER 65532:65532".to_string()));
    assert!(runtime.contains(&&"ENTRYPOINT [\"/browser-controller\"]".to_string()));
}

/// `MAJOR.MINOR` of a Rust version (`1.95.0` → (1, 95)); a Docker tag such as `1.91-bookworm`
/// counts by its version.
fn rust_release(version: &str) -> (u32, u32) {
    let mut parts = version
        .split(['.', '-'])
        .map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

#[test]
fn the_pinned_toolchain_and_the_image_meet_the_crates_minimum() {
    let toolchain = read("rust-toolchain.toml");
    let pinned = toolchain
        .lines()
        .find_map(|l| l.strip_prefix("channel = "))
        .map(|v| v.trim_matches('"').to_string())
        .expect("rust-toolchain.toml pins a channel");
    // A release, not a moving channel: builds are reproducible.
    assert_eq!(pinned.split('.').count(), 3, "{pinned}");
    let minimum = rust_release(&package("rust-version"));
    assert!(rust_release(&pinned) >= minimum, "{pinned} < {minimum:?}");
    let image = arg("RUST_IMAGE").expect("the Dockerfile names its Rust image");
    let tag = image
        .split(':')
        .nth(1)
        .and_then(|t| t.split('@').next())
        .unwrap_or_default();
    assert!(rust_release(tag) >= minimum, "{image}");
    // The README names the pin.
    assert!(read("README.md").contains(&format!("pins {pinned}")));
    // CI links the same release when rustup cannot download it: it reads the same file.
    assert!(read(".ci/run").contains("rust-toolchain.toml"));
}
