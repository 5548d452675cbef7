//! `cra serve`: runs the runtime (HTTP API, WebSocket streams) until Ctrl-C or SIGTERM, then
//! shuts down gracefully (every acknowledged write is already durable; in-flight requests finish).

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use cra_runtime::config::{LogFormat, RuntimeConfig};
use cra_runtime::server::{StartNotice, shutdown_signal};

use crate::exit::Exit;

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormatArg {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// `cra serve` options. Flags override the `--config` file.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Listen address; `127.0.0.1:0` picks a free port (the real one is printed).
    #[arg(long)]
    pub addr: Option<String>,
    /// Data directory of the embedded store (default ./cra-data).
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// MiB of pages the embedded store keeps in memory (default 64).
    #[arg(long, value_name = "MIB")]
    pub redb_cache_mib: Option<usize>,
    /// Use PostgreSQL at this URL instead of the embedded store.
    #[arg(long, env = "CRA_POSTGRES_URL")]
    pub postgres: Option<String>,
    /// An atlas directory or packed archive to load (repeatable; default: every atlas under ./atlases).
    #[arg(long = "atlas")]
    pub atlases: Vec<PathBuf>,
    /// Reload atlases when their files change (the last good version stays on failure).
    #[arg(long)]
    pub watch: bool,
    /// Let a directory atlas replace the stored atlas with the same id and version but other
    /// content (without it such a start fails: a published version never changes).
    #[arg(long)]
    pub replace_atlases: bool,
    /// A TOML configuration file.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Log line format.
    #[arg(long, value_enum)]
    pub log_format: Option<LogFormatArg>,
    /// The API keys file (default: `<data>/api-keys.toml`, created with an admin key on first start).
    #[arg(long)]
    pub api_keys: Option<PathBuf>,
    /// Serve HTTPS and WSS with this PEM certificate chain (with --tls-key; or `[tls]`).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Require client certificates chaining to the CAs in this PEM file (mutual TLS); the keys
    /// file's `[[certificates]]` map their subjects to actors.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
    /// Tests only: let admins set the server's clock (POST /v1/conformance/clock).
    #[arg(long)]
    pub test_clock: bool,
    /// Export spans to this OpenTelemetry collector (OTLP over HTTP, protobuf; `/v1/traces`
    /// is added); `[otlp]` sets the rest.
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
}

impl ServeArgs {
    /// The configuration these flags describe.
    pub fn to_config(&self) -> Result<RuntimeConfig, String> {
        let mut c = match &self.config {
            Some(p) => RuntimeConfig::from_file(p).map_err(|e| e.to_string())?,
            None => RuntimeConfig::default(),
        };
        if let Some(a) = &self.addr {
            c.addr = a.clone();
        }
        if let Some(d) = &self.data {
            c.data = d.clone();
        }
        if let Some(p) = &self.postgres {
            c.postgres = Some(p.clone());
        }
        if let Some(m) = self.redb_cache_mib {
            c.redb_cache_mib = m;
        }
        if !self.atlases.is_empty() {
            c.atlases = self.atlases.clone();
        }
        if let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) {
            c.tls = Some(cra_runtime::config::TlsConfig {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: self.tls_client_ca.clone(),
            });
        }
        c.watch |= self.watch;
        c.replace_atlases |= self.replace_atlases;
        c.test_clock |= self.test_clock;
        if let Some(f) = self.log_format {
            c.log_format = match f {
                LogFormatArg::Text => LogFormat::Text,
                LogFormatArg::Json => LogFormat::Json,
            };
        }
        if let Some(k) = &self.api_keys {
            c.api_keys = Some(k.clone());
        }
        if let Some(url) = &self.otlp_endpoint {
            match &mut c.otlp {
                Some(o) => o.endpoint = url.clone(),
                None => c.otlp = Some(cra_runtime::config::OtlpConfig::to(url)),
            }
        }
        Ok(c)
    }
}

/// Runs the server in the foreground.
pub fn run(args: ServeArgs) -> Exit {
    let config = match args.to_config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cra serve: {e}");
            return Exit::CouldNotRun;
        }
    };
    cra_runtime::server::init_logging(config.log_format);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cra serve: cannot start the async runtime: {e}");
            return Exit::CouldNotRun;
        }
    };
    rt.block_on(async move {
        // Built on a blocking thread: opening the PostgreSQL backend connects synchronous clients,
        // which block on a runtime of their own and must not run on an async worker.
        let built = tokio::task::spawn_blocking(move || {
            cra_runtime::build_runtime(
                config,
                Arc::new(cra_wire::SystemClock),
                Arc::new(cra_wire::UuidV7Ids),
            )
        })
        .await;
        let (state, notices) = match built {
            Ok(Ok(x)) => x,
            Ok(Err(e)) => {
                eprintln!("cra serve: {e}");
                return Exit::CouldNotRun;
            }
            Err(e) => {
                eprintln!("cra serve: the start-up task failed: {e}");
                return Exit::CouldNotRun;
            }
        };
        for n in &notices {
            match n {
                StartNotice::AdminKeyCreated(p) => println!(
                    "cra serve: created an admin API key in {} (mode 0600); `cra` client commands read it for a local server",
                    p.display()
                ),
                StartNotice::Info(m) => println!("cra serve: {m}"),
            }
        }
        let server = match cra_runtime::start(state, shutdown_signal()).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("cra serve: {e}");
                return Exit::CouldNotRun;
            }
        };
        println!("cra serve: listening on {}", server.url());
        match server.wait().await {
            Ok(()) => {
                // Said last, to whoever still reads: a closed standard output (the reader
                // gone first) is no reason to fail a clean stop.
                let _ = writeln!(
                    std::io::stdout(),
                    "cra serve: stopped; every acknowledged write is on disk"
                );
                Exit::Success
            }
            Err(e) => {
                eprintln!("cra serve: {e}");
                Exit::CouldNotRun
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::RuntimeConfig;
    use crate::{Cli, Command};

    fn config(args: &[&str]) -> RuntimeConfig {
        let cli = Cli::try_parse_from(args).expect("the arguments parse");
        let Command::Serve(serve) = cli.command else {
            panic!("not `cra serve`");
        };
        serve.to_config().expect("a configuration")
    }

    #[test]
    fn flags_override_the_defaults() {
        // Compared field by field: `--postgres` may come from the environment.
        let (c, default) = (config(&["cra", "serve"]), RuntimeConfig::default());
        assert_eq!((c.addr, c.data), (default.addr, default.data));
        assert_eq!(c.redb_cache_mib, default.redb_cache_mib);
        let c = config(&[
            "cra",
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--data",
            "/tmp/d",
            "--redb-cache-mib",
            "8",
            "--watch",
        ]);
        assert_eq!(c.addr, "127.0.0.1:0");
        assert_eq!(c.data, std::path::PathBuf::from("/tmp/d"));
        assert_eq!(c.redb_cache_mib, 8);
        assert!(c.watch);
    }

    #[test]
    fn tls_flags_come_as_a_certificate_and_key_pair() {
        let c = config(&[
            "cra",
            "serve",
            "--tls-cert",
            "s.pem",
            "--tls-key",
            "s.key",
            "--tls-client-ca",
            "ca.pem",
        ]);
        let tls = c.tls.expect("[tls] from the flags");
        assert_eq!(tls.cert, std::path::PathBuf::from("s.pem"));
        assert_eq!(tls.key, std::path::PathBuf::from("s.key"));
        assert_eq!(tls.client_ca, Some(std::path::PathBuf::from("ca.pem")));
        for half in [
            &["cra", "serve", "--tls-cert", "s.pem"][..],
            &["cra", "serve", "--tls-key", "s.key"],
            &["cra", "serve", "--tls-client-ca", "ca.pem"],
        ] {
            assert!(Cli::try_parse_from(half).is_err(), "{half:?}");
        }
    }
}
