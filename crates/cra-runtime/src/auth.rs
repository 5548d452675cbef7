//! Who is calling: API keys (`Authorization: Bearer <key>`) from a TOML keys file, and optional
//! JWTs (HS256 or RS256 with a configured key), and with mutual TLS the subject of the client
//! certificate (`[[certificates]]`). Each credential maps to an [`Actor`] with roles.
//!
//! Keys are compared in constant time (SHA-256 of the presented token against SHA-256 of every
//! stored key, all of them, with `subtle`), and never logged: logs and rate-limit buckets use a
//! short fingerprint of the key's hash.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

use cra_wire::Token;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::{ConditionallySelectable, ConstantTimeEq};

use crate::config::JwtConfig;
use crate::error::ApiError;

/// Name of the keys file created in the data directory on first start.
pub const DEFAULT_KEYS_FILE: &str = "api-keys.toml";

/// What an actor may do (the issue's five roles). `admin` implies every other role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Opens its own sessions, resolves and executes in them, reads its own traces.
    Agent,
    /// Reads and tests atlases.
    Author,
    /// Reads every trace and session.
    Auditor,
    /// Reads everything, decides approvals, streams all sessions.
    Operator,
    /// Everything.
    Admin,
}

impl Role {
    /// The wire spelling (as the keys file and JWT claims write it).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Agent => "agent",
            Role::Author => "author",
            Role::Auditor => "auditor",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }
}

/// The kind of actor behind a credential.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ActorType {
    /// An AI agent.
    Agent,
    /// A person.
    Human,
    /// A script or service.
    Script,
}

impl ActorType {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ActorType::Agent => "agent",
            ActorType::Human => "human",
            ActorType::Script => "script",
        }
    }
}

/// The authenticated caller.
#[derive(Clone, PartialEq, Eq)]
pub struct Actor {
    /// The actor id (compared with `requester.agent_id` and `created_by.id`).
    pub id: String,
    /// Agent, human or script.
    pub actor_type: ActorType,
    /// Granted roles.
    pub roles: BTreeSet<Role>,
    /// A fingerprint of the credential (never the credential): keys rate limits and log lines.
    pub key_fingerprint: String,
    /// The atlas id namespaces an author may install atlases in (`com.example` grants
    /// `com.example` and every id under `com.example.`; `*` grants every id). Admins need none.
    pub atlas_namespaces: Vec<String>,
}

impl fmt::Debug for Actor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Actor")
            .field("id", &self.id)
            .field("actor_type", &self.actor_type)
            .field("roles", &self.roles)
            .field("key", &self.key_fingerprint)
            .finish()
    }
}

impl Actor {
    /// The person or script at this machine's shell, acting as `id` through a front door in
    /// this process (the CLI's local mode). Whoever can open the data directory can change
    /// anything in it, so the actor is an admin; the rules that name actors (who deposited a
    /// package, who started a session, who may close a review) still apply to `id`.
    pub fn local(id: impl Into<String>, actor_type: ActorType) -> Self {
        Self {
            id: id.into(),
            actor_type,
            roles: BTreeSet::from([Role::Admin]),
            key_fingerprint: "local".to_owned(),
            atlas_namespaces: Vec::new(),
        }
    }

    /// The actor a keys-file entry (`[[keys]]` or `[[certificates]]`) grants, known to logs
    /// and rate limits by `key_fingerprint`.
    fn granted(
        id: &str,
        actor_type: ActorType,
        roles: &[Role],
        atlas_namespaces: &[String],
        key_fingerprint: String,
    ) -> Self {
        Self {
            id: id.to_owned(),
            actor_type,
            roles: roles.iter().copied().collect(),
            key_fingerprint,
            atlas_namespaces: atlas_namespaces.to_vec(),
        }
    }

    /// True when the actor may install the atlas `atlas_id`: an operator (who deploys atlases)
    /// or admin always, an author when one of their namespaces grants it.
    pub(crate) fn grants_atlas(&self, atlas_id: &str) -> bool {
        self.has(Role::Operator)
            || self
                .atlas_namespaces
                .iter()
                .any(|ns| namespace_grants(ns, atlas_id))
    }

    /// The actor as TRACE events name it: its id and type.
    pub fn event_ref(&self) -> cra_carp::events::ActorRef<'_> {
        cra_carp::events::ActorRef::of(&self.id, self.actor_type.as_str())
    }

    /// True when the actor holds `role` (or is admin).
    pub fn has(&self, role: Role) -> bool {
        self.roles.contains(&Role::Admin) || self.roles.contains(&role)
    }

    /// True when the actor holds any of `roles` (or is admin).
    pub(crate) fn has_any(&self, roles: &[Role]) -> bool {
        roles.iter().any(|r| self.has(*r))
    }

    /// May read every session and trace (auditor, operator, admin).
    pub(crate) fn reads_all(&self) -> bool {
        self.has_any(&[Role::Auditor, Role::Operator])
    }

    /// Fails with 403 `forbidden` unless the actor holds one of `roles`.
    pub(crate) fn require(&self, roles: &[Role], what: &str) -> Result<(), ApiError> {
        if self.has_any(roles) {
            Ok(())
        } else {
            let names: Vec<&str> = roles.iter().map(|r| r.as_str()).collect();
            Err(ApiError::forbidden(format!(
                "{what} needs the role {} (or admin); ask an administrator for a key with it",
                names.join(" or ")
            )))
        }
    }
}

/// One entry of the keys file.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyEntry {
    /// The secret bearer token.
    pub token: String,
    /// The actor the key authenticates.
    pub actor_id: String,
    /// agent | human | script.
    pub actor_type: ActorType,
    /// Granted roles.
    pub roles: Vec<Role>,
    /// For authors: the atlas id namespaces they may install atlases in ([`namespace_grants`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub atlas_namespaces: Vec<String>,
    /// When the key stops authenticating (RFC 3339 with an offset, a TOML date-time or a
    /// string); absent, it never expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Expiry>,
    /// A revoked key is refused from the next request after the file is reloaded; it stays in
    /// the file so that the record says which key it was and its token is never issued again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub revoked: bool,
}

/// A key's expiry time, read from a TOML date-time (`2027-01-01T00:00:00Z`) or a string holding
/// one; it must name its offset (a local time would mean a different instant on each machine).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Expiry(pub time::OffsetDateTime);

impl fmt::Debug for Expiry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_string())
    }
}

impl fmt::Display for Expiry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&cra_wire::clock::format_timestamp(self.0))
    }
}

impl Serialize for Expiry {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for Expiry {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            DateTime(toml::value::Datetime),
            Text(String),
        }
        let text = match Written::deserialize(deserializer)? {
            Written::DateTime(d) => d.to_string(),
            Written::Text(t) => t,
        };
        cra_wire::clock::parse_rfc3339(&text).map(Expiry).map_err(|_| {
            serde::de::Error::custom(format!(
                "expires_at `{text}` is not an RFC 3339 time with an offset; write e.g. 2027-01-01T00:00:00Z"
            ))
        })
    }
}

impl fmt::Debug for KeyEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyEntry")
            .field("token", &"<redacted>")
            .field("actor_id", &self.actor_id)
            .field("actor_type", &self.actor_type)
            .field("roles", &self.roles)
            .field("atlas_namespaces", &self.atlas_namespaces)
            .field("expires_at", &self.expires_at)
            .field("revoked", &self.revoked)
            .finish()
    }
}

/// One client certificate subject of the keys file (mutual TLS, `specs/http.md`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CertificateEntry {
    /// The certificate's subject as RFC 4514 writes it, e.g. `CN=agent-7,O=Example` (what
    /// `openssl x509 -noout -subject -nameopt RFC2253` prints).
    pub subject: String,
    /// The actor a certificate with this subject authenticates.
    pub actor_id: String,
    /// agent | human | script.
    pub actor_type: ActorType,
    /// Granted roles.
    pub roles: Vec<Role>,
    /// For authors: the atlas id namespaces they may install atlases in.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub atlas_namespaces: Vec<String>,
}

/// The keys file: `[[keys]] token, actor_id, actor_type, roles`, and for mutual TLS
/// `[[certificates]] subject, actor_id, actor_type, roles`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeysFile {
    /// Every key.
    #[serde(default)]
    pub keys: Vec<KeyEntry>,
    /// Every client certificate subject that names an actor.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub certificates: Vec<CertificateEntry>,
}

/// A keys file or JWT key that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum AuthSetupError {
    /// The file could not be read or written.
    #[error("keys file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a valid keys file.
    #[error(
        "keys file {path} is not valid ({message}); expected [[keys]] entries with token, actor_id, actor_type and roles"
    )]
    Parse {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        message: String,
    },
    /// A key is unusable.
    #[error("keys file {path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The JWT settings are unusable.
    #[error("jwt: {0}")]
    Jwt(String),
}

/// True when the namespace `ns` grants the atlas id `atlas_id`: `*` grants every id, `a.b`
/// grants `a.b` and every id starting with `a.b.` (never `a.bc`).
pub fn namespace_grants(ns: &str, atlas_id: &str) -> bool {
    ns == "*"
        || atlas_id
            .strip_prefix(ns)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
}

/// Why `id` cannot be a credential's actor id, if it cannot: actor ids follow the agent id rules
/// (1 to 128 printable ASCII characters, no spaces), and the ids cra records as itself (a
/// project's audit chain `project:<id>`, the operator audit chain's `cra-operator`) belong to no
/// key and no token: an actor with one could read, and write into, chains that are not theirs.
pub fn actor_id_problem(id: &str) -> Option<String> {
    if !crate::service::sessions::is_id(id) {
        let max = crate::service::sessions::MAX_ID_LEN;
        return Some(format!(
            "must be 1 to {max} printable ASCII characters without spaces"
        ));
    }
    if id.starts_with(PROJECT_ACTOR_PREFIX) || id == cra_store::retention::OPERATOR_AGENT {
        return Some(format!(
            "`{id}` is an id cra records as itself (`{PROJECT_ACTOR_PREFIX}<project>` for a project's audit chain, `{}` for the operator audit chain); choose another",
            cra_store::retention::OPERATOR_AGENT
        ));
    }
    None
}

/// The prefix of a project's actor id in its audit chain (`project:<project_id>`).
pub const PROJECT_ACTOR_PREFIX: &str = "project:";

impl KeysFile {
    /// Reads and checks a keys file.
    pub fn load(path: &Path) -> Result<Self, AuthSetupError> {
        let text = std::fs::read_to_string(path).map_err(|source| AuthSetupError::Io {
            path: path.to_owned(),
            source,
        })?;
        let file: KeysFile = toml::from_str(&text).map_err(|e| AuthSetupError::Parse {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        let mut seen = BTreeSet::new();
        for (i, k) in file.keys.iter().enumerate() {
            if k.token.len() < 16 {
                return Err(AuthSetupError::Invalid {
                    path: path.to_owned(),
                    message: format!(
                        "key #{} (actor `{}`) is shorter than 16 characters; use a long random token",
                        i + 1,
                        k.actor_id
                    ),
                });
            }
            if let Some(problem) = actor_id_problem(&k.actor_id) {
                return Err(AuthSetupError::Invalid {
                    path: path.to_owned(),
                    message: format!("key #{}'s actor_id {problem}", i + 1),
                });
            }
            if !seen.insert(fingerprint(&k.token)) {
                return Err(AuthSetupError::Invalid {
                    path: path.to_owned(),
                    message: format!("key #{} repeats an earlier token", i + 1),
                });
            }
        }
        file.check_certificates(path)?;
        Ok(file)
    }

    /// Every `[[certificates]]` entry names a usable actor, and no subject twice.
    fn check_certificates(&self, path: &Path) -> Result<(), AuthSetupError> {
        let invalid = |message: String| AuthSetupError::Invalid {
            path: path.to_owned(),
            message,
        };
        let mut seen = BTreeSet::new();
        for (i, c) in self.certificates.iter().enumerate() {
            if c.subject.trim().is_empty() {
                return Err(invalid(format!(
                    "certificate #{}'s subject is empty; write it as `openssl x509 -noout -subject -nameopt RFC2253 -in CERT` prints it",
                    i + 1
                )));
            }
            if let Some(problem) = actor_id_problem(&c.actor_id) {
                return Err(invalid(format!(
                    "certificate #{}'s actor_id {problem}",
                    i + 1
                )));
            }
            if !seen.insert(c.subject.as_str()) {
                return Err(invalid(format!(
                    "certificate #{} repeats the subject `{}`",
                    i + 1,
                    c.subject
                )));
            }
        }
        Ok(())
    }

    /// Creates `path` (mode 0600) holding one new admin key, and returns the file.
    pub(crate) fn create_admin(path: &Path) -> Result<Self, AuthSetupError> {
        let io = |source| AuthSetupError::Io {
            path: path.to_owned(),
            source,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let file = KeysFile {
            keys: vec![KeyEntry {
                token: new_token(),
                actor_id: "admin".to_owned(),
                actor_type: ActorType::Human,
                roles: vec![Role::Admin],
                atlas_namespaces: Vec::new(),
                expires_at: None,
                revoked: false,
            }],
            certificates: Vec::new(),
        };
        let text = toml::to_string(&file).map_err(|e| AuthSetupError::Invalid {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        let mut f = opts.open(path).map_err(io)?;
        f.write_all(b"# Created by `cra serve` on first start: one admin key. Keep it secret.\n")
            .and_then(|()| f.write_all(text.as_bytes()))
            .and_then(|()| f.sync_all())
            .map_err(io)?;
        Ok(file)
    }
}

/// The first admin key of `<data>/api-keys.toml`, for client commands talking to a local server.
pub fn local_admin_token(data: &Path) -> Option<String> {
    let file = KeysFile::load(&data.join(DEFAULT_KEYS_FILE)).ok()?;
    file.keys
        .into_iter()
        .find(|k| k.roles.contains(&Role::Admin) && !k.revoked)
        .map(|k| k.token)
}

/// A new random bearer token (`cra_` + 64 hex characters).
pub fn new_token() -> String {
    use rand::RngCore;
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format!("cra_{}", hex::encode(bytes))
}

/// A short, non-reversible name for a credential (first 12 hex of its SHA-256).
pub fn fingerprint(token: &str) -> String {
    let d = Sha256::digest(token.as_bytes());
    hex::encode(&d[..6])
}

/// Claims cra reads from a JWT.
#[derive(Debug, Deserialize)]
struct Claims {
    sub: String,
    #[serde(default)]
    actor_type: Option<ActorType>,
    #[serde(default)]
    roles: Vec<Role>,
    #[serde(default)]
    atlas_namespaces: Vec<String>,
}

struct JwtVerifier {
    key: DecodingKey,
    validation: Validation,
}

/// Whether a key still authenticates: not revoked, and not past its expiry.
#[derive(Debug, Clone, Copy)]
struct Validity {
    expires_at: Option<time::OffsetDateTime>,
    revoked: bool,
}

impl Validity {
    /// Why the key `fingerprint` no longer authenticates at `now`, if it does not.
    fn refusal(&self, fingerprint: &str, now: time::OffsetDateTime) -> Option<ApiError> {
        let why = if self.revoked {
            format!("the API key {fingerprint} was revoked")
        } else {
            let at = self.expires_at.filter(|at| *at <= now)?;
            format!(
                "the API key {fingerprint} expired at {}",
                cra_wire::clock::format_timestamp(at)
            )
        };
        Some(ApiError::new(
            Token::Unauthenticated,
            format!("{why}; ask an administrator for a new key"),
        ))
    }
}

/// Turns `Authorization` headers, and client certificates' subjects, into actors.
pub struct Authenticator {
    keys: Vec<([u8; 32], Actor, Validity)>,
    certificates: BTreeMap<String, Actor>,
    jwt: Option<JwtVerifier>,
}

impl fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Authenticator")
            .field("keys", &self.keys.len())
            .field("jwt", &self.jwt.is_some())
            .finish()
    }
}

impl Authenticator {
    /// An authenticator for `keys` and, optionally, JWTs.
    pub fn new(file: &KeysFile, jwt: Option<&JwtConfig>) -> Result<Self, AuthSetupError> {
        let keys = file
            .keys
            .iter()
            .map(|k| {
                let digest: [u8; 32] = Sha256::digest(k.token.as_bytes()).into();
                let key = fingerprint(&k.token);
                let actor = Actor::granted(
                    &k.actor_id,
                    k.actor_type,
                    &k.roles,
                    &k.atlas_namespaces,
                    key,
                );
                let validity = Validity {
                    expires_at: k.expires_at.map(|e| e.0),
                    revoked: k.revoked,
                };
                (digest, actor, validity)
            })
            .collect();
        let certificates = file
            .certificates
            .iter()
            .map(|c| {
                let key = fingerprint(&format!("certificate {}", c.subject));
                let actor = Actor::granted(
                    &c.actor_id,
                    c.actor_type,
                    &c.roles,
                    &c.atlas_namespaces,
                    key,
                );
                (c.subject.clone(), actor)
            })
            .collect();
        let jwt = jwt.map(build_jwt).transpose()?;
        Ok(Self {
            keys,
            certificates,
            jwt,
        })
    }

    /// The actor for a request: its `Authorization` header when it has one, else the client
    /// certificate the connection presented (mutual TLS), else 401 `unauthenticated`.
    pub fn authenticate_request(
        &self,
        header: Option<&str>,
        peer: Option<&crate::tls::PeerCertificate>,
        now: time::OffsetDateTime,
    ) -> Result<Actor, ApiError> {
        match (header, peer) {
            (None, Some(peer)) => self.authenticate_certificate(peer),
            _ => self.authenticate(header, now),
        }
    }

    /// The actor a verified client certificate's subject names in `[[certificates]]`.
    fn authenticate_certificate(
        &self,
        peer: &crate::tls::PeerCertificate,
    ) -> Result<Actor, ApiError> {
        let Some(subject) = &peer.subject else {
            return Err(ApiError::new(
                Token::Unauthenticated,
                "the client certificate's subject could not be read, so it names no actor; send `Authorization: Bearer <api key or JWT>`",
            ));
        };
        match self.certificates.get(subject) {
            Some(actor) => {
                tracing::debug!(actor = %actor.id, subject = %subject, "authenticated by certificate");
                Ok(actor.clone())
            }
            None => {
                tracing::info!(subject = %subject, "client certificate names no actor");
                Err(ApiError::new(
                    Token::Unauthenticated,
                    format!(
                        "the client certificate's subject `{subject}` is in no [[certificates]] entry of the keys file; add it there, or send `Authorization: Bearer <api key or JWT>`"
                    ),
                ))
            }
        }
    }

    /// The actor for an `Authorization` header value at `now`, or 401 `unauthenticated` (also
    /// for a revoked key or one past its expiry). Both outcomes are logged with the credential's
    /// fingerprint only (never the credential): a refusal at `info`, a success at `debug`.
    pub fn authenticate(
        &self,
        header: Option<&str>,
        now: time::OffsetDateTime,
    ) -> Result<Actor, ApiError> {
        let result = self.identify(header, now);
        match &result {
            Ok(actor) => tracing::debug!(
                actor = %actor.id,
                key = %actor.key_fingerprint,
                "authenticated"
            ),
            Err(e) => {
                let key = header
                    .and_then(bearer_token)
                    .map_or_else(|| "none".to_owned(), fingerprint);
                tracing::info!(key = %key, reason = %e.body.message, "credentials refused");
            }
        }
        result
    }

    fn identify(&self, header: Option<&str>, now: time::OffsetDateTime) -> Result<Actor, ApiError> {
        let Some(header) = header else {
            return Err(ApiError::new(
                Token::Unauthenticated,
                "no credentials: send `Authorization: Bearer <api key or JWT>`",
            ));
        };
        let token = bearer_token(header).ok_or_else(|| {
            ApiError::new(
                Token::Unauthenticated,
                "the Authorization header is not `Bearer <token>`",
            )
        })?;
        let presented: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        // Every key is compared, whatever matched before, and the match is selected without a
        // branch, so timing says nothing about which key (if any) was close.
        let mut found = u64::MAX;
        for (i, (digest, _, _)) in self.keys.iter().enumerate() {
            found.conditional_assign(&(i as u64), digest.ct_eq(&presented));
        }
        if let Some((_, actor, validity)) =
            usize::try_from(found).ok().and_then(|i| self.keys.get(i))
        {
            return match validity.refusal(&actor.key_fingerprint, now) {
                Some(refused) => Err(refused),
                None => Ok(actor.clone()),
            };
        }
        if let Some(jwt) = &self.jwt
            && token.split('.').count() == 3
        {
            return verify_jwt(jwt, token);
        }
        Err(ApiError::new(
            Token::Unauthenticated,
            "the bearer token is not a known API key or valid JWT",
        ))
    }
}

/// The token of a `Bearer <token>` header value.
fn bearer_token(header: &str) -> Option<&str> {
    header
        .strip_prefix("Bearer ")
        .or_else(|| header.strip_prefix("bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

fn build_jwt(cfg: &JwtConfig) -> Result<JwtVerifier, AuthSetupError> {
    let (alg, key) = match cfg.algorithm.as_str() {
        "HS256" => {
            let secret = match (&cfg.secret, &cfg.secret_file) {
                (Some(s), None) => s.clone().into_bytes(),
                (None, Some(p)) => std::fs::read(p).map_err(|e| {
                    AuthSetupError::Jwt(format!("cannot read secret_file {}: {e}", p.display()))
                })?,
                _ => {
                    return Err(AuthSetupError::Jwt(
                        "HS256 needs exactly one of `secret` or `secret_file`".into(),
                    ));
                }
            };
            if secret.len() < 32 {
                return Err(AuthSetupError::Jwt(
                    "the HS256 secret must be at least 32 bytes".into(),
                ));
            }
            (Algorithm::HS256, DecodingKey::from_secret(&secret))
        }
        "RS256" => {
            let path = cfg
                .public_key_file
                .as_ref()
                .ok_or_else(|| AuthSetupError::Jwt("RS256 needs `public_key_file` (PEM)".into()))?;
            let pem = std::fs::read(path)
                .map_err(|e| AuthSetupError::Jwt(format!("cannot read {}: {e}", path.display())))?;
            let key = DecodingKey::from_rsa_pem(&pem).map_err(|e| {
                AuthSetupError::Jwt(format!("{} is not an RSA public key: {e}", path.display()))
            })?;
            (Algorithm::RS256, key)
        }
        other => {
            return Err(AuthSetupError::Jwt(format!(
                "algorithm `{other}` is not supported; use HS256 or RS256"
            )));
        }
    };
    let mut validation = Validation::new(alg);
    validation.algorithms = vec![alg];
    validation.validate_exp = true;
    // jsonwebtoken ignores `nbf` unless told: a token that is not yet valid must be refused.
    validation.validate_nbf = true;
    validation.leeway = 0;
    // jsonwebtoken checks `iss` and `aud` only when a token carries them: a configured issuer or
    // audience must also make the claim required, or a token without it would pass.
    let mut required = vec!["exp", "sub"];
    if let Some(iss) = &cfg.issuer {
        validation.set_issuer(&[iss]);
        required.push("iss");
    }
    match &cfg.audience {
        Some(aud) => {
            validation.set_audience(&[aud]);
            required.push("aud");
        }
        None => validation.validate_aud = false,
    }
    validation.set_required_spec_claims(&required);
    Ok(JwtVerifier { key, validation })
}

fn verify_jwt(jwt: &JwtVerifier, token: &str) -> Result<Actor, ApiError> {
    let data = jsonwebtoken::decode::<Claims>(token, &jwt.key, &jwt.validation).map_err(|e| {
        use jsonwebtoken::errors::ErrorKind;
        let why = match e.kind() {
            ErrorKind::ExpiredSignature => "the token has expired",
            ErrorKind::ImmatureSignature => "the token is not valid yet (`nbf` is in the future)",
            ErrorKind::InvalidAlgorithm => "the token's algorithm is not the one configured",
            ErrorKind::InvalidSignature => "the token's signature does not verify",
            ErrorKind::MissingRequiredClaim(_) => {
                "the token lacks a required claim (exp, sub, and iss or aud when configured)"
            }
            _ => "the token is not a valid JWT",
        };
        ApiError::new(Token::Unauthenticated, format!("{why}; obtain a new token"))
    })?;
    if let Some(problem) = actor_id_problem(&data.claims.sub) {
        return Err(ApiError::new(
            Token::Unauthenticated,
            format!("the token's `sub` claim {problem}; obtain a token for another subject"),
        ));
    }
    Ok(Actor {
        id: data.claims.sub,
        actor_type: data.claims.actor_type.unwrap_or(ActorType::Agent),
        roles: data.claims.roles.into_iter().collect(),
        key_fingerprint: fingerprint(token),
        atlas_namespaces: data.claims.atlas_namespaces,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test's "now".
    fn test_now() -> time::OffsetDateTime {
        cra_wire::clock::parse_rfc3339("2026-03-02T10:00:00Z").unwrap()
    }

    fn keys() -> KeysFile {
        KeysFile {
            keys: vec![KeyEntry {
                token: "agent-key-0123456789".into(),
                actor_id: "ops-bot".into(),
                actor_type: ActorType::Agent,
                roles: vec![Role::Agent],
                atlas_namespaces: Vec::new(),
                expires_at: None,
                revoked: false,
            }],
            certificates: vec![CertificateEntry {
                subject: "CN=agent-7,O=Example".into(),
                actor_id: "cert-bot".into(),
                actor_type: ActorType::Agent,
                roles: vec![Role::Agent],
                atlas_namespaces: Vec::new(),
            }],
        }
    }

    #[test]
    fn a_client_certificate_names_its_actor_and_a_bearer_token_takes_precedence() {
        let a = Authenticator::new(&keys(), None).unwrap();
        let peer = |s: Option<&str>| crate::tls::PeerCertificate {
            subject: s.map(str::to_owned),
        };
        let known = peer(Some("CN=agent-7,O=Example"));
        let actor = a
            .authenticate_request(None, Some(&known), test_now())
            .unwrap();
        assert_eq!(actor.id, "cert-bot");
        let by_key = a
            .authenticate_request(
                Some("Bearer agent-key-0123456789"),
                Some(&known),
                test_now(),
            )
            .unwrap();
        assert_eq!(by_key.id, "ops-bot");
        assert_ne!(actor.key_fingerprint, by_key.key_fingerprint);
        // Subjects compare exactly: another order or spacing is another subject.
        for other in [
            peer(Some("O=Example,CN=agent-7")),
            peer(Some("CN=agent-7, O=Example")),
            peer(None),
        ] {
            let e = a
                .authenticate_request(None, Some(&other), test_now())
                .unwrap_err();
            assert_eq!(e.status(), 401, "{other:?}");
        }
        let e = a
            .authenticate_request(None, Some(&peer(Some("CN=nobody"))), test_now())
            .unwrap_err();
        assert!(e.body.message.contains("`CN=nobody`"), "{}", e.body.message);
        assert_eq!(
            a.authenticate_request(None, None, test_now())
                .unwrap_err()
                .status(),
            401
        );
    }

    #[test]
    fn api_keys_authenticate_and_refuse() {
        let a = Authenticator::new(&keys(), None).unwrap();
        let actor = a
            .authenticate(Some("Bearer agent-key-0123456789"), test_now())
            .unwrap();
        assert_eq!(actor.id, "ops-bot");
        assert!(actor.has(Role::Agent) && !actor.has(Role::Operator));
        for bad in [
            None,
            Some("agent-key-0123456789"),
            Some("Bearer nope"),
            Some("Bearer "),
        ] {
            let e = a.authenticate(bad, test_now()).unwrap_err();
            assert_eq!(e.status(), 401, "{bad:?}");
        }
    }

    /// Invariant: a revoked key, and a key at or past its expiry, authenticate nobody, and the
    /// refusal says which key and why (by fingerprint, never the key).
    #[test]
    fn a_revoked_or_expired_key_is_refused_and_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("keys.toml");
        std::fs::write(
            &p,
            r#"
[[keys]]
token = "expiring-key-0123456789"
actor_id = "temp-bot"
actor_type = "agent"
roles = ["agent"]
expires_at = 2026-03-02T11:00:00Z

[[keys]]
token = "quoted-expiry-0123456789"
actor_id = "temp-bot-2"
actor_type = "agent"
roles = ["agent"]
expires_at = "2026-03-02T12:00:00+01:00"

[[keys]]
token = "revoked-key-0123456789"
actor_id = "gone-bot"
actor_type = "agent"
roles = ["agent"]
revoked = true
"#,
        )
        .unwrap();
        let file = KeysFile::load(&p).unwrap();
        let a = Authenticator::new(&file, None).unwrap();
        let at = |t: &str| cra_wire::clock::parse_rfc3339(t).unwrap();
        let bearer = |t: &str| format!("Bearer {t}");
        let key = bearer("expiring-key-0123456789");
        assert_eq!(
            a.authenticate(Some(&key), test_now()).unwrap().id,
            "temp-bot"
        );
        let second_before = at("2026-03-02T10:59:59Z");
        assert!(a.authenticate(Some(&key), second_before).is_ok());
        for after in ["2026-03-02T11:00:00Z", "2027-01-01T00:00:00Z"] {
            let e = a.authenticate(Some(&key), at(after)).unwrap_err();
            assert_eq!(e.status(), 401);
            assert!(
                e.body
                    .message
                    .contains("expired at 2026-03-02T11:00:00.000000Z")
                    && e.body
                        .message
                        .contains(&fingerprint("expiring-key-0123456789")),
                "{}",
                e.body.message
            );
        }
        // An offset other than Z is the same instant (11:00Z).
        let quoted = bearer("quoted-expiry-0123456789");
        assert!(a.authenticate(Some(&quoted), second_before).is_ok());
        assert!(
            a.authenticate(Some(&quoted), at("2026-03-02T11:00:00Z"))
                .is_err()
        );
        let e = a
            .authenticate(Some(&bearer("revoked-key-0123456789")), test_now())
            .unwrap_err();
        assert!(e.body.message.contains("was revoked"), "{}", e.body.message);
        assert!(!e.body.message.contains("revoked-key-0123456789"));
    }

    #[test]
    fn an_expiry_without_an_offset_is_refused_at_load() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("keys.toml");
        for expiry in ["2027-01-01T00:00:00", "\"next year\"", "2027-01-01"] {
            std::fs::write(
                &p,
                format!(
                    "[[keys]]\ntoken = \"some-key-0123456789\"\nactor_id = \"a\"\nactor_type = \"agent\"\nroles = [\"agent\"]\nexpires_at = {expiry}\n"
                ),
            )
            .unwrap();
            let e = KeysFile::load(&p).unwrap_err().to_string();
            assert!(e.contains("RFC 3339"), "{expiry}: {e}");
        }
    }

    #[test]
    fn a_namespace_grants_itself_and_ids_under_it_only() {
        assert!(namespace_grants("com.example", "com.example"));
        assert!(namespace_grants("com.example", "com.example.payments"));
        assert!(!namespace_grants("com.example", "com.examples"));
        assert!(!namespace_grants("com.example", "com"));
        assert!(!namespace_grants("com.example.payments", "com.example"));
        assert!(namespace_grants("*", "anything.at.all"));
    }

    #[test]
    fn debug_output_never_shows_a_key() {
        let k = keys();
        assert!(!format!("{k:?}").contains("agent-key-0123456789"));
        let a = Authenticator::new(&k, None).unwrap();
        let actor = a
            .authenticate(Some("Bearer agent-key-0123456789"), test_now())
            .unwrap();
        assert!(!format!("{actor:?}").contains("agent-key"));
    }

    #[test]
    fn admin_file_is_created_private() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("d").join(DEFAULT_KEYS_FILE);
        let f = KeysFile::create_admin(&p).unwrap();
        assert_eq!(KeysFile::load(&p).unwrap(), f);
        assert!(f.keys[0].roles.contains(&Role::Admin));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&p).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert!(KeysFile::create_admin(&p).is_err(), "never overwrites");
    }

    #[test]
    fn short_or_repeated_keys_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("k.toml");
        std::fs::write(
            &p,
            "[[keys]]\ntoken=\"short\"\nactor_id=\"a\"\nactor_type=\"agent\"\nroles=[\"agent\"]\n",
        )
        .unwrap();
        assert!(KeysFile::load(&p).unwrap_err().to_string().contains("16"));
    }

    /// `[[certificates]]` entries are checked at start as keys are: a blank subject, an actor id
    /// breaking the id rules and a repeated subject each stop the start, naming the entry.
    #[test]
    fn certificate_entries_are_checked_as_keys_are() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("k.toml");
        let entry = |subject: &str, actor: &str| {
            format!(
                "[[certificates]]\nsubject=\"{subject}\"\nactor_id=\"{actor}\"\nactor_type=\"agent\"\nroles=[\"agent\"]\n"
            )
        };
        for (text, says) in [
            (entry(" ", "bot"), "certificate #1's subject is empty"),
            (entry("CN=a", "project:p"), "certificate #1's actor_id"),
            (
                entry("CN=a", "bot") + &entry("CN=a", "other"),
                "certificate #2 repeats the subject `CN=a`",
            ),
        ] {
            std::fs::write(&p, &text).unwrap();
            let e = KeysFile::load(&p).unwrap_err().to_string();
            assert!(e.contains(says), "{text}: {e}");
        }
        std::fs::write(&p, entry("CN=a", "bot") + &entry("CN=b", "bot")).unwrap();
        assert_eq!(KeysFile::load(&p).unwrap().certificates.len(), 2);
    }

    /// Issue 29, item 10: on `fda2190` a key could claim `project:<id>`, the actor of a
    /// project's audit chain, or `cra-operator`, and read those chains as its own.
    #[test]
    fn keys_file_actor_ids_follow_the_id_rules_and_claim_no_reserved_id() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("k.toml");
        for (actor, says) in [
            ("project:proj-1", "records as itself"),
            ("cra-operator", "records as itself"),
            ("two words", "printable ASCII"),
            ("", "printable ASCII"),
        ] {
            let key = format!(
                "[[keys]]\ntoken=\"0123456789abcdef0\"\nactor_id=\"{actor}\"\nactor_type=\"agent\"\nroles=[\"agent\"]\n"
            );
            std::fs::write(&p, key).unwrap();
            let e = KeysFile::load(&p).unwrap_err().to_string();
            assert!(e.contains(says) && e.contains("key #1"), "{actor}: {e}");
        }
    }

    #[test]
    fn jwt_subjects_follow_the_id_rules_and_claim_no_reserved_id() {
        let a = jwt_auth();
        let secret = b"0123456789abcdef0123456789abcdef";
        let long = "x".repeat(129);
        for sub in [
            "project:proj-1",
            "cra-operator",
            "has space",
            "",
            long.as_str(),
        ] {
            let claims = serde_json::json!({"sub": sub, "roles": ["agent"], "exp": now() + 600});
            let t = sign(Algorithm::HS256, secret, claims);
            let e = a
                .authenticate(Some(&format!("Bearer {t}")), test_now())
                .unwrap_err();
            assert_eq!(e.status(), 401, "{sub}");
            assert!(
                e.body.message.contains("`sub`"),
                "{sub}: {}",
                e.body.message
            );
        }
    }

    fn jwt_auth() -> Authenticator {
        let cfg = JwtConfig {
            algorithm: "HS256".into(),
            secret: Some("0123456789abcdef0123456789abcdef".into()),
            secret_file: None,
            public_key_file: None,
            issuer: None,
            audience: None,
        };
        Authenticator::new(&KeysFile::default(), Some(&cfg)).unwrap()
    }

    fn now() -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    }

    fn sign(alg: Algorithm, secret: &[u8], claims: serde_json::Value) -> String {
        jsonwebtoken::encode(
            &jsonwebtoken::Header::new(alg),
            &claims,
            &jsonwebtoken::EncodingKey::from_secret(secret),
        )
        .unwrap()
    }

    #[test]
    fn jwt_hs256_maps_claims_to_an_actor() {
        let a = jwt_auth();
        let t = sign(
            Algorithm::HS256,
            b"0123456789abcdef0123456789abcdef",
            serde_json::json!({"sub": "ci-bot", "roles": ["agent", "author"], "exp": now() + 600}),
        );
        let actor = a
            .authenticate(Some(&format!("Bearer {t}")), test_now())
            .unwrap();
        assert_eq!(actor.id, "ci-bot");
        assert!(actor.has(Role::Author) && !actor.has(Role::Admin));
    }

    /// Invariant: a configured issuer or audience is required, not only checked when present:
    /// a token that leaves the claim out is refused (jsonwebtoken alone would accept it).
    #[test]
    fn a_configured_issuer_or_audience_is_required_of_every_token() {
        let secret = "0123456789abcdef0123456789abcdef";
        let cfg = JwtConfig {
            algorithm: "HS256".into(),
            secret: Some(secret.into()),
            secret_file: None,
            public_key_file: None,
            issuer: Some("https://idp.example".into()),
            audience: Some("cra".into()),
        };
        let a = Authenticator::new(&KeysFile::default(), Some(&cfg)).unwrap();
        let token = |claims: serde_json::Value| {
            let t = sign(Algorithm::HS256, secret.as_bytes(), claims);
            a.authenticate(Some(&format!("Bearer {t}")), test_now())
        };
        let exp = now() + 600;
        let full = serde_json::json!({"sub": "ci-bot", "exp": exp, "iss": "https://idp.example", "aud": "cra"});
        assert!(token(full.clone()).is_ok());
        for (drop, why) in [("iss", "no issuer"), ("aud", "no audience")] {
            let mut claims = full.clone();
            claims.as_object_mut().unwrap().remove(drop);
            let e = token(claims).unwrap_err();
            assert_eq!(e.status(), 401, "{why}");
        }
        for (claim, other) in [("iss", "https://evil.example"), ("aud", "someone-else")] {
            let mut claims = full.clone();
            claims[claim] = other.into();
            assert!(token(claims).is_err(), "{claim} = {other}");
        }
    }

    #[test]
    fn jwt_refuses_expired_wrong_algorithm_wrong_key_and_none() {
        use base64::Engine;
        let a = jwt_auth();
        let secret = b"0123456789abcdef0123456789abcdef";
        let expired = sign(
            Algorithm::HS256,
            secret,
            serde_json::json!({"sub": "x", "exp": now() - 10}),
        );
        let wrong_alg = sign(
            Algorithm::HS384,
            secret,
            serde_json::json!({"sub": "x", "exp": now() + 600}),
        );
        let wrong_key = sign(
            Algorithm::HS256,
            b"another-secret-another-secret-xx",
            serde_json::json!({"sub": "x", "exp": now() + 600}),
        );
        let no_exp = sign(Algorithm::HS256, secret, serde_json::json!({"sub": "x"}));
        let not_yet = sign(
            Algorithm::HS256,
            secret,
            serde_json::json!({"sub": "x", "nbf": now() + 600, "exp": now() + 1200}),
        );
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let none = format!(
            "{}.{}.",
            b64.encode(br#"{"alg":"none","typ":"JWT"}"#),
            b64.encode(format!(r#"{{"sub":"x","exp":{}}}"#, now() + 600))
        );
        for (name, t) in [
            ("expired", expired),
            ("wrong alg", wrong_alg),
            ("wrong key", wrong_key),
            ("no exp", no_exp),
            ("not yet valid", not_yet),
            ("none", none),
        ] {
            let e = a
                .authenticate(Some(&format!("Bearer {t}")), test_now())
                .unwrap_err();
            assert_eq!(e.status(), 401, "{name}");
        }
    }
}
