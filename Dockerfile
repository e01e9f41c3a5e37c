# Static build of browser-controller on a distroless, non-root base.
#   docker build -t <registry>/browser-controller:<tag> .

FROM rust:1-bookworm AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends musl-tools \
    && rm -rf /var/lib/apt/lists/*
RUN rustup target add x86_64-unknown-linux-musl
WORKDIR /src
COPY . .
RUN cargo build --locked --release --target x86_64-unknown-linux-musl --bin browser-controller

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /src/target/x86_64-unknown-linux-musl/release/browser-controller /browser-controller
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/browser-controller"]
