# syntax=docker/dockerfile:1
# The operator image: a static (musl) browser-controller on a distroless, non-root base, for
# linux/amd64 and linux/arm64 from this one file:
#
#   docker buildx build --platform linux/amd64,linux/arm64 \
#     --build-arg SOURCE=<URL of this repository> --build-arg REVISION=$(git rev-parse HEAD) \
#     -t <registry>/browser-controller:<tag> --push .
#
# The build stage runs on the builder's own platform and cross-compiles for TARGETARCH with
# .ci/build-static, the same command CI runs without Docker; no emulation is needed. Base
# images are pinned by tag and digest (multi-platform index): a rebuild of a commit gets the
# same bases. To move them, look up the tag's current digest (e.g. `crane digest <image:tag>`).

ARG RUST_IMAGE=docker.io/library/rust:1.91-bookworm@sha256:c1e5f19e773b7878c3f7a805dd00a495e747acbdc76fb2337a4ebf0418896b33
ARG RUNTIME_IMAGE=gcr.io/distroless/static-debian12:nonroot@sha256:afa5c872c891853ca7fcf1f12c3edb23f7eeef36189728842dd51042ff57f7ab

FROM --platform=$BUILDPLATFORM ${RUST_IMAGE} AS build
# C compilers for ring and mimalloc: musl-gcc for the builder's own architecture, Debian's
# cross gcc for the other one.
RUN apt-get update \
    && apt-get install -y --no-install-recommends musl-tools gcc-aarch64-linux-gnu gcc-x86-64-linux-gnu \
    && rm -rf /var/lib/apt/lists/*
RUN rustup target add x86_64-unknown-linux-musl aarch64-unknown-linux-musl
WORKDIR /src
COPY .ci/build-static .ci/build-static
# Dependencies first, from the manifests alone (with placeholder sources for the targets
# Cargo.toml declares, which cargo wants to exist; those of benches and tests stay): this
# layer is rebuilt only when Cargo.toml or Cargo.lock change.
# Every workspace member's manifest is needed to read the workspace; the test kit's sources
# never are (only the tests use it), so it keeps its placeholder.
COPY Cargo.toml Cargo.lock ./
COPY crates/core/Cargo.toml crates/core/Cargo.toml
COPY crates/testkit/Cargo.toml crates/testkit/Cargo.toml
ARG TARGETARCH
RUN mkdir -p src benches tests crates/core/src crates/testkit/src \
    && echo 'fn main() {}' > src/main.rs \
    && touch src/lib.rs crates/core/src/lib.rs crates/testkit/src/lib.rs \
    && echo 'fn main() {}' > benches/provision.rs \
    && echo 'fn main() {}' > benches/session.rs \
    && echo 'fn main() {}' > benches/soak.rs \
    && echo 'fn main() {}' > tests/e2e.rs \
    && .ci/build-static "$TARGETARCH" \
    && rm -rf src crates/core/src
COPY src src
COPY crates/core/src crates/core/src
# Copied files keep their old modification times: touched, so that cargo does not take the
# placeholders' build for the real one.
RUN touch src/main.rs src/lib.rs crates/core/src/lib.rs \
    && .ci/build-static "$TARGETARCH" /browser-controller

FROM ${RUNTIME_IMAGE}
ARG SOURCE=""
ARG REVISION=""
# Kept equal to Cargo.toml's version and licence by tests/image.rs.
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="browser-controller" \
      org.opencontainers.image.description="Kubernetes operator that runs Selenium-compatible browsers as ephemeral Pods for the Selenosis stack" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.revision="${REVISION}"
COPY --from=build /browser-controller /browser-controller
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/browser-controller"]
