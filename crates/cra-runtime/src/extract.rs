//! Request extractors that turn every way a body or query can be wrong (not JSON, duplicate keys,
//! wrong type, missing field, wrong content type, too large) into the one error body, with the
//! JSON pointer of the offending value wherever one exists.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use cra_wire::Token;
use cra_wire::json::{JsonError, parse_input};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::ApiError;
use crate::state::AppState;

/// A JSON body deserialised into `T` after the strict parse.
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

/// A JSON body kept as a value (for inputs that a protocol crate validates itself).
#[derive(Debug)]
pub struct RawJson(pub Value);

/// Escapes one reference token of a JSON pointer (RFC 6901).
pub(crate) fn escape_pointer_token(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// True when `content_type` names JSON (`application/json`, optionally with parameters, or any
/// `application/*+json`).
fn is_json_content_type(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// Reads and strictly parses the body of `req`, refusing anything over `limit` bytes or slower
/// than `timeout` ([`read_body`]).
pub(crate) async fn read_json_body(
    req: Request,
    limit: usize,
    timeout: std::time::Duration,
) -> Result<Value, ApiError> {
    let content_type = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    match content_type {
        Some(ct) if is_json_content_type(&ct) => {}
        Some(ct) => {
            return Err(ApiError::new(
                Token::UnsupportedMediaType,
                format!("the body is `{ct}`; send it as `Content-Type: application/json`"),
            ));
        }
        None => {
            return Err(ApiError::new(
                Token::UnsupportedMediaType,
                "the request has no Content-Type; send the body as `Content-Type: application/json`",
            ));
        }
    }
    let bytes = read_body(req, limit, timeout).await?;
    parse_body_bytes(&bytes)
}

/// Reads the whole body of `req` within `timeout`, refusing (413) anything over `limit` bytes:
/// before reading when `Content-Length` declares more, else as soon as more arrives; a body
/// still arriving at the timeout is 408 `request_timeout` (a client sending a byte a minute must
/// not hold a request open).
pub(crate) async fn read_body(
    req: Request,
    limit: usize,
    timeout: std::time::Duration,
) -> Result<Bytes, ApiError> {
    tokio::time::timeout(timeout, read_body_within(req, limit))
        .await
        .unwrap_or_else(|_| {
            Err(ApiError::new(
                Token::RequestTimeout,
                format!(
                    "the request body did not arrive within {} ms; send it at once",
                    timeout.as_millis()
                ),
            ))
        })
}

/// [`read_body`] without its timeout.
async fn read_body_within(req: Request, limit: usize) -> Result<Bytes, ApiError> {
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large(limit));
    }
    axum::body::to_bytes(req.into_body(), limit)
        .await
        .map_err(|e| {
            if is_length_limit(&e) {
                too_large(limit)
            } else {
                ApiError::new(
                    Token::InvalidRequest,
                    format!("the request body could not be read: {e}"),
                )
            }
        })
}

/// Refuses, before any route runs, a request whose path is not UTF-8 once percent-decoded (no
/// route could read its parameters), with the one error body rather than the path extractor's
/// plain-text answer.
pub(crate) async fn require_utf8_path(req: Request, next: axum::middleware::Next) -> Response {
    if std::str::from_utf8(&percent_decode_bytes(req.uri().path(), false)).is_err() {
        return ApiError::new(
            Token::InvalidRequest,
            "the request path is not UTF-8 once percent-decoded; percent-encode UTF-8 bytes only",
        )
        .into_response();
    }
    next.run(req).await
}

/// True when reading stopped because the body passed the limit.
fn is_length_limit(e: &axum::Error) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if err.to_string().contains("length limit exceeded") {
            return true;
        }
        cur = err.source();
    }
    false
}

fn too_large(limit: usize) -> ApiError {
    ApiError::new(
        Token::PayloadTooLarge,
        format!("the request body is larger than the limit of {limit} bytes; send less"),
    )
}

/// Strictly parses a body already read.
pub(crate) fn parse_body_bytes(bytes: &[u8]) -> Result<Value, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::field(
            Token::InvalidRequest,
            "",
            "the body is empty; send a JSON object",
        ));
    }
    parse_input(bytes).map_err(|e| json_error(&e))
}

/// The error body of a document [`cra_wire::json`] refused, at the pointer it names (for a
/// duplicate key, the key's own pointer).
pub(crate) fn json_error(e: &JsonError) -> ApiError {
    match e {
        JsonError::DuplicateKey { pointer, key } => ApiError::field(
            Token::InvalidRequest,
            format!("{pointer}/{}", escape_pointer_token(key)),
            e.to_string(),
        ),
        JsonError::TooDeep { pointer, .. } | JsonError::NotFinite { pointer, .. } => {
            ApiError::field(Token::InvalidRequest, pointer.clone(), e.to_string())
        }
        JsonError::Syntax { .. } => ApiError::field(Token::InvalidRequest, "", e.to_string()),
    }
}

/// Deserialises `value` into `T`, reporting the JSON pointer of the first offending value.
pub(crate) fn from_value<T: DeserializeOwned>(value: Value) -> Result<T, ApiError> {
    if !value.is_object() {
        return Err(ApiError::field(
            Token::InvalidRequest,
            "",
            format!("expected a JSON object, found {}", json_kind(&value)),
        ));
    }
    serde_path_to_error::deserialize::<_, T>(value).map_err(|e| {
        let mut pointer = String::new();
        for seg in e.path().iter() {
            use serde_path_to_error::Segment;
            match seg {
                Segment::Seq { index } => pointer.push_str(&format!("/{index}")),
                Segment::Map { key } => {
                    pointer.push('/');
                    pointer.push_str(&escape_pointer_token(key));
                }
                Segment::Enum { variant } => {
                    pointer.push('/');
                    pointer.push_str(&escape_pointer_token(variant));
                }
                Segment::Unknown => {}
            }
        }
        let message = e.inner().to_string();
        if let Some(field) = missing_field_name(&message) {
            pointer.push('/');
            pointer.push_str(&escape_pointer_token(field));
        }
        ApiError::field(Token::InvalidRequest, pointer, message)
    })
}

/// The field named by serde's "missing field `x`" message.
fn missing_field_name(message: &str) -> Option<&str> {
    let rest = message.strip_prefix("missing field `")?;
    rest.split('`').next()
}

/// "a string", "an array", ... for messages.
pub(crate) fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

impl<T: DeserializeOwned> FromRequest<AppState> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let value = read_json_body(
            req,
            state.config.limits.max_body_bytes,
            state.config.limits.body_timeout(),
        )
        .await?;
        from_value(value).map(JsonBody)
    }
}

impl FromRequest<AppState> for RawJson {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let value = read_json_body(
            req,
            state.config.limits.max_body_bytes,
            state.config.limits.body_timeout(),
        )
        .await?;
        if !value.is_object() {
            return Err(ApiError::field(
                Token::InvalidRequest,
                "",
                format!("expected a JSON object, found {}", json_kind(&value)),
            ));
        }
        Ok(RawJson(value))
    }
}

/// Query parameters deserialised into `T`; a bad query is a 400 `invalid_request` naming the
/// parameter.
#[derive(Debug)]
pub(crate) struct QueryParams<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for QueryParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let query = parts.uri.query().unwrap_or("");
        let pairs = parse_query(query);
        let mut obj = serde_json::Map::new();
        for (k, v) in pairs {
            obj.insert(k, Value::String(v));
        }
        let value = Value::Object(obj);
        serde_path_to_error::deserialize::<_, T>(value)
            .map(QueryParams)
            .map_err(|e| {
                let param = e.path().to_string();
                let message = e.inner().to_string();
                let param = missing_field_name(&message)
                    .map(str::to_owned)
                    .unwrap_or(param);
                ApiError::new(
                    Token::InvalidRequest,
                    format!("query parameter `{param}`: {message}"),
                )
            })
    }
}

/// The whole number a query parameter holds (`0` when absent); 400 `invalid_request` naming the
/// parameter otherwise. Query values arrive as text, so numeric members are read here.
pub(crate) fn query_u64(name: &str, value: Option<&str>) -> Result<u64, ApiError> {
    match value {
        None => Ok(0),
        Some(v) => v.parse::<u64>().map_err(|_| {
            ApiError::new(
                Token::InvalidRequest,
                format!("query parameter `{name}`: `{v}` is not a non-negative integer"),
            )
        }),
    }
}

/// Decodes an `application/x-www-form-urlencoded` query (last occurrence of a name wins).
pub(crate) fn parse_query(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    String::from_utf8_lossy(&percent_decode_bytes(s, true)).into_owned()
}

/// Decodes `%XX` escapes (and, in a query, `+` as a space) into bytes, which may not be UTF-8.
fn percent_decode_bytes(s: &str, plus_is_space: bool) -> Vec<u8> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 3;
                    }
                    Err(_) => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Inner {
        n: u32,
    }
    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Outer {
        name: String,
        items: Vec<Inner>,
    }

    #[test]
    fn pointers_locate_the_bad_value() {
        let cases = [
            (r#"{"name":1,"items":[]}"#, "/name"),
            (r#"{"name":"a","items":[{"n":1},{"n":"x"}]}"#, "/items/1/n"),
            (r#"{"items":[]}"#, "/name"),
            (r#"{"name":"a","items":[{}]}"#, "/items/0/n"),
            (r#"[1]"#, ""),
        ];
        for (body, pointer) in cases {
            let v = parse_body_bytes(body.as_bytes()).unwrap();
            let e = from_value::<Outer>(v).unwrap_err();
            assert_eq!(e.body.details.unwrap().errors[0].pointer, pointer, "{body}");
        }
    }

    #[test]
    fn broken_json_and_empty_bodies_are_invalid_requests() {
        for body in ["", "  ", "{", "{\"a\":}", "nul"] {
            let e = parse_body_bytes(body.as_bytes()).unwrap_err();
            assert_eq!(e.token(), Some(Token::InvalidRequest), "{body}");
        }
    }

    #[test]
    fn query_decoding() {
        assert_eq!(
            parse_query("a=1&b=x%2Fy+z&c"),
            vec![
                ("a".into(), "1".into()),
                ("b".into(), "x/y z".into()),
                ("c".into(), "".into())
            ]
        );
        assert_eq!(parse_query("a=%zz%4"), vec![("a".into(), "%zz%4".into())]);
    }

    #[test]
    fn content_types() {
        assert!(is_json_content_type("application/json"));
        assert!(is_json_content_type("Application/JSON; charset=utf-8"));
        assert!(is_json_content_type("application/carp+json"));
        assert!(!is_json_content_type("text/plain"));
    }
}
