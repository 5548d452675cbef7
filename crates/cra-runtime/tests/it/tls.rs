//! Issue 29, item 12: HTTPS and WSS (`crate::tls`), mutual TLS with certificate subjects mapped
//! to actors, and the subject rendering checked against OpenSSL's. On `fda2190` the server spoke
//! plain HTTP only. The certificates come from `tools/make-test-pki.sh` (openssl).

use std::path::{Path, PathBuf};
use std::process::Command;

use cra_runtime::config::TlsConfig;
use cra_runtime::tls::ClientTls;
use futures::StreamExt;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::support::*;

/// A fresh PKI from `tools/make-test-pki.sh`, in its own directory.
struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/make-test-pki.sh");
        let out = Command::new("bash")
            .arg(script)
            .arg(dir.path())
            .output()
            .expect("bash runs");
        assert!(
            out.status.success(),
            "make-test-pki.sh (needs openssl): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Self { dir }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The server's `[tls]`, with the client CA when `mutual`.
    fn server(&self, mutual: bool) -> TlsConfig {
        TlsConfig {
            cert: self.file("server.pem"),
            key: self.file("server.key"),
            client_ca: mutual.then(|| self.file("ca.pem")),
        }
    }

    /// A client trusting the test CA and presenting the certificate `name` (if any).
    fn client(&self, name: Option<&str>) -> reqwest::Client {
        let tls = ClientTls {
            ca_cert: Some(self.file("ca.pem")),
            client_cert: name.map(|n| self.file(&format!("{n}.pem"))),
            client_key: name.map(|n| self.file(&format!("{n}.key"))),
        };
        cra_runtime::tls::http_client_with(&tls.config().unwrap())
            .build()
            .unwrap()
    }
}

/// The keys file of the tests, with `[[certificates]]` naming the client certificate's subject.
fn keys_with_certificates(dir: &Path) -> PathBuf {
    let path = dir.join("keys-tls.toml");
    let certificates = r#"
[[certificates]]
subject = "CN=agent-7,O=Example"
actor_id = "cert-bot"
actor_type = "agent"
roles = ["agent"]
"#;
    std::fs::write(&path, format!("{KEYS_TOML}{certificates}")).unwrap();
    path
}

#[tokio::test]
async fn https_serves_the_api_and_a_client_checks_the_servers_certificate() {
    let pki = Pki::new();
    let tls = pki.server(false);
    let mut s = TestServer::start_with(|c| c.tls = Some(tls)).await;
    assert!(s.base.starts_with("https://127.0.0.1:"), "{}", s.base);
    // On the test's runtime: the server is served by the same thread.
    let curl = tokio::process::Command::new("curl")
        .args(["-sS", "--cacert"])
        .arg(pki.file("ca.pem"))
        .arg(s.url("/v1/health"))
        .output()
        .await
        .expect("curl runs (.ci/install installs it)");
    let health: serde_json::Value = serde_json::from_slice(&curl.stdout).unwrap();
    assert_eq!(health["status"], "ok", "curl over HTTPS");
    s.http = pki.client(None);
    let (st, body) = s.get(Some(OPERATOR), "/metrics").await;
    assert_eq!(st, 200, "{body}");
    let session = s.open_session(AGENT, "ops-bot").await;
    assert_eq!(s.event_types(&session).await, ["session.started"]);

    // A client that does not trust the test CA refuses the server.
    let system_roots = cra_runtime::tls::http_client().build().unwrap();
    let refused = system_roots.get(s.url("/v1/health")).send().await;
    assert!(refused.is_err(), "an unknown CA is not trusted");
    // Plain HTTP to the TLS port gets no HTTP answer.
    let plain = s.base.replacen("https://", "http://", 1);
    let refused = system_roots.get(format!("{plain}/v1/health")).send().await;
    assert!(refused.is_err(), "plain HTTP is not served on the TLS port");
    s.stop().await;
}

#[tokio::test]
async fn a_wss_stream_delivers_a_sessions_events() {
    let pki = Pki::new();
    let tls = pki.server(false);
    let mut s = TestServer::start_with(|c| c.tls = Some(tls)).await;
    s.http = pki.client(None);
    let session = s.open_session(AGENT, "ops-bot").await;
    let mut req = s
        .ws_url(&format!("session_id={session}"))
        .into_client_request()
        .unwrap();
    assert_eq!(req.uri().scheme_str(), Some("wss"));
    req.headers_mut()
        .insert("authorization", format!("Bearer {AGENT}").parse().unwrap());
    let config = ClientTls {
        ca_cert: Some(pki.file("ca.pem")),
        ..ClientTls::default()
    }
    .config()
    .unwrap();
    let connector = tokio_tungstenite::Connector::Rustls(config);
    let (mut ws, _) =
        tokio_tungstenite::connect_async_tls_with_config(req, None, false, Some(connector))
            .await
            .unwrap();
    let first = loop {
        match ws.next().await.unwrap().unwrap() {
            tokio_tungstenite::tungstenite::Message::Text(t) => {
                break serde_json::from_str::<serde_json::Value>(t.as_str()).unwrap();
            }
            _ => continue,
        }
    };
    assert_eq!(first["event_type"], "session.started", "{first}");
    s.stop().await;
}

#[tokio::test]
async fn mutual_tls_requires_a_certificate_of_the_ca_and_maps_its_subject_to_an_actor() {
    let pki = Pki::new();
    let tls = pki.server(true);
    let keys = keys_with_certificates(pki.dir.path());
    let mut s = TestServer::start_with(|c| {
        c.tls = Some(tls);
        c.api_keys = Some(keys);
    })
    .await;

    // No certificate, or one of another CA: the handshake fails, whatever the bearer token.
    for client in [pki.client(None), pki.client(Some("stranger"))] {
        let refused = client
            .get(s.url("/v1/traces"))
            .bearer_auth(ADMIN)
            .send()
            .await;
        assert!(refused.is_err(), "a client without the CA's certificate");
    }

    // The mapped certificate authenticates as its actor, with no bearer token.
    s.http = pki.client(Some("client"));
    let session = s.open_session_without_key("cert-bot").await;
    let events = s.events(&session).await;
    assert_eq!(events[0]["event_type"], "session.started");
    assert_eq!(
        events[0]["payload"]["actor"]["id"], "cert-bot",
        "{}",
        events[0]
    );
    // Acting as another agent is refused as for a key of that actor.
    let (st, _) = s
        .post(
            None,
            "/v1/sessions",
            &serde_json::json!({"agent_id": "ops-bot", "goal": "g"}),
        )
        .await;
    assert_eq!(st, 403);
    // A bearer token on the same connection decides who is calling.
    let (st, body) = s.get(Some(OPERATOR), "/metrics").await;
    assert_eq!(st, 200, "{body}");

    // curl, a TLS client we did not write, agrees: the certificate authenticates, no
    // certificate gets no answer.
    let curl = |with_cert: bool| {
        let mut cmd = tokio::process::Command::new("curl");
        cmd.args(["-sS", "-o", "/dev/null", "-w", "%{http_code}", "--cacert"])
            .arg(pki.file("ca.pem"));
        if with_cert {
            cmd.arg("--cert")
                .arg(pki.file("client.pem"))
                .arg("--key")
                .arg(pki.file("client.key"));
        }
        cmd.arg(s.url("/v1/traces"));
        cmd.output()
    };
    let by_cert = curl(true)
        .await
        .expect("curl runs (.ci/install installs it)");
    assert_eq!(String::from_utf8_lossy(&by_cert.stdout), "200");
    let without = curl(false).await.unwrap();
    assert!(!without.status.success(), "curl without a certificate");

    // A certificate of the CA whose subject names no actor: 401 naming the subject.
    s.http = pki.client(Some("nobody"));
    let got = s.get(None, "/v1/traces").await;
    assert_error(&got, 401, "unauthenticated");
    let message = got.1["message"].as_str().unwrap();
    assert!(message.contains("`CN=nobody,O=Example`"), "{message}");
    s.stop().await;
}

impl TestServer {
    /// Opens a session for `agent_id` authenticated by the client certificate alone.
    async fn open_session_without_key(&self, agent_id: &str) -> String {
        let (st, body) = self
            .post(
                None,
                "/v1/sessions",
                &serde_json::json!({"agent_id": agent_id, "goal": "test mutual TLS"}),
            )
            .await;
        assert_eq!(st, 201, "{body}");
        body["session_id"].as_str().unwrap().to_owned()
    }
}

#[tokio::test]
async fn unusable_tls_files_stop_the_start_naming_the_file() {
    let pki = Pki::new();
    let cases = [
        (
            TlsConfig {
                cert: pki.file("missing.pem"),
                key: pki.file("server.key"),
                client_ca: None,
            },
            "missing.pem",
        ),
        (
            TlsConfig {
                cert: pki.file("server.key"),
                key: pki.file("server.key"),
                client_ca: None,
            },
            "server.key",
        ),
        (
            TlsConfig {
                cert: pki.file("server.pem"),
                key: pki.file("client.key"),
                client_ca: None,
            },
            "the server certificate and key",
        ),
        (
            TlsConfig {
                client_ca: Some(pki.file("server.key")),
                ..pki.server(false)
            },
            "client CA",
        ),
    ];
    for (tls, named) in cases {
        let e = cra_runtime::tls::server_config(&tls)
            .unwrap_err()
            .to_string();
        assert!(e.contains(named), "{e}");
    }
}

#[test]
fn unusable_client_tls_files_are_refused_naming_the_file() {
    let pki = Pki::new();
    let missing = ClientTls {
        ca_cert: Some(pki.file("missing-ca.pem")),
        ..ClientTls::default()
    };
    let e = missing.config().unwrap_err().to_string();
    assert!(e.contains("missing-ca.pem"), "{e}");
    let half = ClientTls {
        client_cert: Some(pki.file("client.pem")),
        ..ClientTls::default()
    };
    let e = half.config().unwrap_err().to_string();
    assert!(e.contains("--client-key"), "{e}");
    let mismatched = ClientTls {
        client_cert: Some(pki.file("client.pem")),
        client_key: Some(pki.file("nobody.key")),
        ..ClientTls::default()
    };
    let e = mismatched.config().unwrap_err().to_string();
    assert!(e.contains("the client certificate and key"), "{e}");
}

/// The handshake runs under the header-read timeout: a connection that opens TCP and never
/// starts TLS is closed, and the server goes on serving.
#[tokio::test]
async fn a_connection_that_never_completes_its_handshake_is_closed_at_the_header_timeout() {
    use tokio::io::AsyncReadExt;
    let pki = Pki::new();
    let tls = pki.server(false);
    let mut s = TestServer::start_with(|c| {
        c.tls = Some(tls);
        c.limits.header_read_timeout_ms = 200;
    })
    .await;
    let addr = s.base.trim_start_matches("https://");
    let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut buf = [0u8; 64];
    let closed = tokio::time::timeout(std::time::Duration::from_secs(10), silent.read(&mut buf));
    assert!(
        matches!(closed.await.expect("the server closes it"), Ok(0) | Err(_)),
        "the server sent nothing and closed"
    );
    s.http = pki.client(None);
    let (st, _) = s.get(Some(OPERATOR), "/metrics").await;
    assert_eq!(st, 200);
    s.stop().await;
}

/// The subject `openssl x509 -nameopt RFC2253` prints for a self-signed certificate of `subj`
/// (an `openssl req -subj` argument), and the certificate's DER. Files are made in `dir`.
fn openssl_subject(dir: &Path, subj: &str, multivalue: bool) -> (String, Vec<u8>) {
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let curve = "ec_paramgen_curve:P-256";
    run(&[
        "genpkey",
        "-algorithm",
        "EC",
        "-pkeyopt",
        curve,
        "-out",
        "k.pem",
    ]);
    let mut req = vec!["req", "-x509", "-new", "-key", "k.pem", "-days", "1"];
    req.extend(["-subj", subj, "-out", "c.pem"]);
    if multivalue {
        req.push("-multivalue-rdn");
    }
    run(&req);
    let printed = run(&[
        "x509", "-noout", "-subject", "-nameopt", "RFC2253", "-in", "c.pem",
    ]);
    run(&["x509", "-in", "c.pem", "-outform", "DER", "-out", "c.der"]);
    let subject = printed.trim_end().trim_start_matches("subject=").to_owned();
    (subject, std::fs::read(dir.join("c.der")).unwrap())
}

#[test]
fn certificate_subjects_render_as_openssl_prints_them_in_rfc_2253_form() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("/O=Example/CN=agent-7", false),
        ("/C=DE/ST=Berlin/L=Berlin/O=Acme, Inc./OU=R+D/CN=ops", false),
        (
            "/DC=org/DC=example/OU=agents/CN=a \"quoted\" <b>; c\\d",
            false,
        ),
        ("/O=Example/CN=#leading hash", false),
        ("/O=Example/CN= leading space", false),
        ("/O=Example/CN=agent-9+UID=u9", true),
        ("/CN=only", false),
    ];
    for (subj, multivalue) in cases {
        let (printed, der) = openssl_subject(dir.path(), subj, multivalue);
        assert_eq!(
            cra_runtime::tls::subject_of(&der).as_deref(),
            Some(printed.as_str()),
            "-subj {subj}"
        );
    }
}
