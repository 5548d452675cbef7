# `cra serve` in a container: a release build on Debian bookworm, run as an unprivileged user
# from a slim image. Its data directory is the volume /var/lib/cra (the first start writes the
# admin key to /var/lib/cra/api-keys.toml). It runs in /etc/cra, so it loads every atlas under
# /etc/cra/atlases (mount yours there), as `cra serve` does from ./atlases. On PostgreSQL, pass
# the URL in CRA_POSTGRES_URL and drop --data.
#
#   docker build -t cra .
#   docker run -p 8421:8421 -v cra-data:/var/lib/cra -v "$PWD/atlases:/etc/cra/atlases:ro" cra
#
# No image is built in this project's CI: its machines run no Docker engine and reach no image
# registry. What CI does check (cra-cli's `packaging` tests): the command below, run in a folder
# laid out as /etc/cra is, loads the atlas put in its atlases folder and answers /v1/health, on
# the port EXPOSE names, writing its key into the volume; the builder's Rust is at least the
# workspace's rust-version.

FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p cra-cli --bin cra

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /var/lib/cra --shell /usr/sbin/nologin cra \
    && mkdir -p /var/lib/cra /etc/cra/atlases \
    && chown cra /var/lib/cra
COPY --from=build /src/target/release/cra /usr/local/bin/cra
COPY LICENSE THIRD-PARTY.md /usr/share/doc/cra/
USER cra
WORKDIR /etc/cra
VOLUME /var/lib/cra
EXPOSE 8421
ENTRYPOINT ["cra"]
CMD ["serve", "--addr", "0.0.0.0:8421", "--data", "/var/lib/cra"]
