//! TLS, on both sides of cra's connections, with rustls and its `ring` provider.
//!
//! * **The server** ([`server_config`]): `cra serve --tls-cert --tls-key` (or `[tls]`) serves
//!   HTTPS and WSS on its one port; with `--tls-client-ca` every client presents a certificate
//!   chaining to that CA (mutual TLS), and [`PeerCertificate`] carries its subject to
//!   authentication, which maps it to an actor through the keys file's `[[certificates]]`.
//!   The handshake runs under the listener's header-read timeout (`crate::listen`).
//! * **Clients** ([`ClientTls`], [`client_config`], [`http_client`]): every HTTPS or WSS
//!   connection cra opens (CLI commands, MCP bridges and executors, witnesses, the conformance
//!   runner) uses one rustls configuration: the system's roots, or only the CAs of `--ca-cert`,
//!   and a client certificate when one is given. reqwest is built without a crypto provider of
//!   its own, and builds a client only with a configuration given to it: the workspace's
//!   `clippy.toml` forbids building one any other way, because such a client panics.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock, RwLock};

use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::config::TlsConfig;

mod subject;

pub use subject::subject_of;

/// A TLS file or setting that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read, or holds nothing of the expected kind.
    #[error(
        "cannot read {what} {path}: {message}; expected a PEM file ({expected})",
        path = .path.display()
    )]
    Pem {
        /// What the file is for.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
        /// What the file should hold.
        expected: &'static str,
    },
    /// The files were read but rustls refuses them together.
    #[error("{what} cannot be used: {message}")]
    Unusable {
        /// What was being set up.
        what: &'static str,
        /// What rustls said.
        message: String,
    },
}

/// The subject of the certificate a client presented and the server verified (mutual TLS), as
/// RFC 4514 renders it; put in each request's extensions by the listener. `None` when the
/// certificate's subject could not be read (it then names no actor).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerCertificate {
    /// The subject, e.g. `CN=agent-7,O=Example`.
    pub subject: Option<String>,
}

/// The one crypto provider cra's TLS uses.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The server's TLS configuration for `tls`: its certificate chain and key, and the client CA
/// when mutual TLS is on. HTTP/1.1 is the one ALPN protocol offered.
pub fn server_config(tls: &TlsConfig) -> Result<Arc<ServerConfig>, TlsError> {
    let chain = certificates(&tls.cert, "the server certificate file")?;
    let key = private_key(&tls.key, "the server key file")?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(unusable("the TLS protocol versions"))?;
    let builder = match &tls.client_ca {
        Some(ca) => {
            let roots = root_store(ca, "the client CA file")?;
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                .build()
                .map_err(unusable("the client CA"))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(unusable("the server certificate and key"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// What cra's clients trust and present (`--ca-cert`, `--client-cert`, `--client-key`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientTls {
    /// PEM CA certificates a server's chain must lead to, instead of the system's roots.
    pub ca_cert: Option<PathBuf>,
    /// PEM certificate chain presented to servers that ask for one (mutual TLS).
    pub client_cert: Option<PathBuf>,
    /// The client certificate's private key.
    pub client_key: Option<PathBuf>,
}

impl ClientTls {
    /// True when nothing is set (the system's roots, no client certificate).
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }

    /// The rustls client configuration these settings describe.
    pub fn config(&self) -> Result<Arc<ClientConfig>, TlsError> {
        let builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(unusable("the TLS protocol versions"))?;
        let builder = match &self.ca_cert {
            Some(ca) => builder.with_root_certificates(root_store(ca, "the CA certificate file")?),
            None => {
                let verifier = rustls_platform_verifier::Verifier::new(provider())
                    .map_err(unusable("the system's root certificates"))?;
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(verifier))
            }
        };
        let mut config = match (&self.client_cert, &self.client_key) {
            (Some(cert), Some(key)) => builder
                .with_client_auth_cert(
                    certificates(cert, "the client certificate file")?,
                    private_key(key, "the client key file")?,
                )
                .map_err(unusable("the client certificate and key"))?,
            (None, None) => builder.with_no_client_auth(),
            _ => {
                return Err(TlsError::Unusable {
                    what: "a client certificate",
                    message: "give both --client-cert and --client-key, or neither".to_owned(),
                });
            }
        };
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

/// The process's client settings, once [`set_client_defaults`] has been called.
static CLIENT_DEFAULTS: RwLock<Option<Arc<ClientConfig>>> = RwLock::new(None);

/// Makes `tls` the settings of every client this process builds with [`client_config`] (the CLI
/// calls it with its global flags). Default settings leave the process as it was.
pub fn set_client_defaults(tls: &ClientTls) -> Result<(), TlsError> {
    if tls.is_default() {
        return Ok(());
    }
    let config = tls.config()?;
    *CLIENT_DEFAULTS.write().unwrap_or_else(|p| p.into_inner()) = Some(config);
    Ok(())
}

/// The client configuration of this process: the one [`set_client_defaults`] set, else the
/// system's roots (read once) and no client certificate. When the system's roots cannot be
/// loaded, it trusts nothing, and every HTTPS connection fails saying the certificate is unknown.
pub fn client_config() -> Arc<ClientConfig> {
    // Also the process's default, so that a client a dependency builds for itself (rmcp's
    // `StreamableHttpClientTransport::from_config`, which clippy cannot be told to refuse)
    // finds a provider instead of panicking, once any cra client has been built.
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let _ = CryptoProvider::install_default(rustls::crypto::ring::default_provider());
    });
    if let Some(c) = &*CLIENT_DEFAULTS.read().unwrap_or_else(|p| p.into_inner()) {
        return c.clone();
    }
    static SYSTEM: OnceLock<Arc<ClientConfig>> = OnceLock::new();
    SYSTEM
        .get_or_init(|| {
            ClientTls::default().config().unwrap_or_else(|e| {
                tracing::warn!(error = %e, "HTTPS connections will trust no certificate");
                // `builder()` takes the process's provider, which is ring: it is the one
                // provider rustls is built with here.
                let empty = ClientConfig::builder().with_root_certificates(RootCertStore::empty());
                Arc::new(empty.with_no_client_auth())
            })
        })
        .clone()
}

/// An HTTP client builder using this process's client configuration.
pub fn http_client() -> reqwest::ClientBuilder {
    http_client_with(&client_config())
}

/// An HTTP client builder using `config`.
#[allow(clippy::disallowed_methods)] // the one place clients are built
pub fn http_client_with(config: &ClientConfig) -> reqwest::ClientBuilder {
    reqwest::Client::builder().tls_backend_preconfigured(config.clone())
}

/// A blocking HTTP client builder using this process's client configuration.
#[allow(clippy::disallowed_methods)] // the one place blocking clients are built
pub fn blocking_http_client() -> reqwest::blocking::ClientBuilder {
    reqwest::blocking::Client::builder().tls_backend_preconfigured((*client_config()).clone())
}

/// Opens a WebSocket (`ws://`, or `wss://` with this process's client configuration).
pub async fn ws_connect<R>(
    request: R,
) -> Result<
    (
        tokio_tungstenite::WebSocketStream<
            tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
        >,
        tokio_tungstenite::tungstenite::handshake::client::Response,
    ),
    tokio_tungstenite::tungstenite::Error,
>
where
    R: tokio_tungstenite::tungstenite::client::IntoClientRequest + Unpin,
{
    let connector = tokio_tungstenite::Connector::Rustls(client_config());
    tokio_tungstenite::connect_async_tls_with_config(request, None, false, Some(connector)).await
}

/// A connection error in full: its message and each cause's (reqwest's own message stops at
/// "error sending request"), and, when a certificate was refused, what to do about it.
pub fn explain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let said = c.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        cause = c.source();
    }
    if text.contains("certificate") {
        text.push_str(
            " (the server's TLS certificate was not accepted: give its CA with --ca-cert FILE or CRA_CA_CERT)",
        );
    }
    text
}

/// Every certificate in the PEM file `path`, in order (at least one).
fn certificates(path: &Path, what: &'static str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let expected = "one or more CERTIFICATE blocks";
    let pem = |message: String| TlsError::Pem {
        what,
        path: path.to_owned(),
        message,
        expected,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| pem(pem_message(&e)))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem(pem_message(&e)))?;
    if certs.is_empty() {
        return Err(pem("it holds no certificate".to_owned()));
    }
    Ok(certs)
}

/// The first private key in the PEM file `path`.
fn private_key(path: &Path, what: &'static str) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| TlsError::Pem {
        what,
        path: path.to_owned(),
        message: pem_message(&e),
        expected: "a PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY block",
    })
}

/// A root store of every certificate in the PEM file `path`.
fn root_store(path: &Path, what: &'static str) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in certificates(path, what)? {
        roots.add(cert).map_err(|e| TlsError::Unusable {
            what,
            message: format!("{}: {e}", path.display()),
        })?;
    }
    Ok(roots)
}

/// A PEM reading error in words.
fn pem_message(e: &rustls_pki_types::pem::Error) -> String {
    match e {
        rustls_pki_types::pem::Error::Io(io) => io.to_string(),
        rustls_pki_types::pem::Error::NoItemsFound => "it holds no block of that kind".to_owned(),
        other => format!("{other:?}"),
    }
}

/// Maps a rustls error to [`TlsError::Unusable`] for `what`.
fn unusable<E: std::fmt::Display>(what: &'static str) -> impl Fn(E) -> TlsError {
    move |e| TlsError::Unusable {
        what,
        message: e.to_string(),
    }
}
