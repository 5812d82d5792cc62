# syntax=docker/dockerfile:1
#
# outbox-relay image: build with cargo on Debian bookworm, run on distroless (glibc, no shell)
# as the non-root user 65532, on a read-only root filesystem.
#
#   docker build -t outbox-relay:dev .
#   docker run --rm -p 8080:8080 \
#     -e DATABASE_URL=postgres://... -e REDIS_URL=redis://... \
#     -e OUTBOX__ADMIN__ADDR=0.0.0.0:8080 -e OUTBOX__ADMIN__TOKEN=... \
#     --read-only outbox-relay:dev            # `run` is the default command
#   docker run --rm -e DATABASE_URL=postgres://... outbox-relay:dev migrate
#
# Secrets may come from files instead (what the Kubernetes kit does): mount them and name
# them, e.g. -v ./secrets:/run/secrets:ro -e OUTBOX__ADMIN__TOKEN_FILE=/run/secrets/admin-token
# (every `*_FILE` setting: docs/configuration.md).
#
# Not built in this repository's CI (its machines have no Docker engine): scripts/k8s-check.sh
# lints this file (hadolint and structural checks) and checks the build context, nothing more.

# The build stage's Debian release must match the runtime's (bookworm = debian12): the binary
# links against the build stage's glibc, and a newer one (trixie) would not load on bookworm.
ARG RUST_VERSION=1.95
FROM rust:${RUST_VERSION}-slim-bookworm AS build
WORKDIR /src

# 1. Dependencies only, cached until the manifests or Cargo.lock change: build the locked
#    dependency graph against stub targets. (If the crate gains targets declared in
#    Cargo.toml with explicit paths, or workspace members, stub them here too.)
#    testkit/ and bench/ are workspace members the image does not build: cargo only needs
#    their manifests and a lib.rs to load the workspace.
COPY Cargo.toml Cargo.lock ./
COPY core/Cargo.toml core/
COPY consumer/Cargo.toml consumer/
COPY testkit/Cargo.toml testkit/
COPY bench/Cargo.toml bench/
RUN mkdir src core/src consumer/src testkit/src bench/src \
 && echo 'fn main() {}' > src/main.rs \
 && touch src/lib.rs core/src/lib.rs consumer/src/lib.rs testkit/src/lib.rs bench/src/lib.rs \
 && cargo build --release --locked \
 && rm -rf src core/src consumer/src testkit/src bench/src

# 2. The crate itself and the workspace's core/ and consumer/ crates (testkit/ and bench/ come
#    along for the workspace to load, unbuilt). build.rs, migrations/ (embedded at compile
#    time; the consumer crate includes the inbox's) and the UI's static assets (include_str!)
#    come with the sources; .dockerignore keeps the rest out.
COPY . .
# COPY keeps the sources' modification times, which may be older than the stubs' build:
# touch them so cargo rebuilds the crate rather than keep the stub.
RUN touch src/main.rs src/lib.rs core/src/lib.rs consumer/src/lib.rs \
 && cargo build --release --locked \
 && cp target/release/outbox-relay /outbox-relay

# Runtime: glibc, libgcc, CA certificates and tzdata; no shell, no package manager.
# Pin it by digest in production (gcr.io/distroless/cc-debian12:nonroot@sha256:...).
FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.title="outbox-relay" \
      org.opencontainers.image.description="Publishes a Postgres transactional outbox to Redis Streams" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /outbox-relay /usr/local/bin/outbox-relay
# distroless `nonroot`: uid/gid 65532. Numeric, so Kubernetes' runAsNonRoot can verify it.
USER 65532:65532
# The admin server (UI, API, /healthz, /readyz, /metrics). The binary's default admin.addr is
# 127.0.0.1:8080: set OUTBOX__ADMIN__ADDR=0.0.0.0:8080 (and admin.token, which a non-loopback
# address requires) to reach it from outside the container; k8s/base does so.
EXPOSE 8080
# Writes nothing to disk (logs go to stderr), so it runs with a read-only root filesystem.
# The benchmark is another binary (outbox-bench), not in this image.
ENTRYPOINT ["/usr/local/bin/outbox-relay"]
CMD ["run"]
