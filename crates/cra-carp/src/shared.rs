//! Reference-counted text and JSON for resolution members that are copied from the compiled
//! atlas into every resolution (names, descriptions, schemas, context text). Cloning one is one
//! counter increment, not a deep copy, which keeps a resolve at 100 actions within microseconds.
//! On the wire they are plain strings and JSON values.
//!
//! The compiled atlas also keeps the TRACE canonical text of each ([`SharedStr::with_canonical`],
//! [`SharedJson::with_canonical`]), computed once, so that writing a resolution's canonical form
//! copies those texts instead of escaping the same context files and walking the same schemas
//! on every resolve. Other serializers see the plain values.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::sync::Arc;

use cra_wire::canonical::CanonicalText;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// Serializes `value` through its kept canonical text when there is one (see the module
/// documentation), as itself otherwise.
fn serialize_kept<T, S>(
    canonical: Option<&CanonicalText>,
    value: &T,
    s: S,
) -> Result<S::Ok, S::Error>
where
    T: Serialize + ?Sized,
    S: Serializer,
{
    match canonical {
        Some(canonical) => canonical.serialize_value(value, s),
        None => value.serialize(s),
    }
}

/// A value with its TRACE canonical text, when one was kept, behind one reference count: a
/// clone of a kept member is one counter increment, not two.
struct Kept<T> {
    value: T,
    canonical: Option<CanonicalText>,
}

/// The text of a [`SharedStr`]: plain text needs no kept form, so it stays a bare `Arc<str>`.
#[derive(Clone)]
enum Text {
    Plain(Arc<str>),
    Kept(Arc<Kept<Box<str>>>),
}

/// Shared immutable text; serialises as a JSON string. Equality, order and hash are the text's.
#[derive(Clone)]
pub struct SharedStr(Text);

impl SharedStr {
    /// Shared text that also keeps its TRACE canonical form, for text written into many
    /// canonical payloads.
    pub fn with_canonical(text: &str) -> Self {
        Self(Text::Kept(Arc::new(Kept {
            value: Box::from(text),
            canonical: CanonicalText::of(text).ok(),
        })))
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Text::Plain(text) => text,
            Text::Kept(kept) => &kept.value,
        }
    }

    /// The text's TRACE canonical form (quoted, escaped), when made with
    /// [`SharedStr::with_canonical`].
    fn canonical(&self) -> Option<&CanonicalText> {
        match &self.0 {
            Text::Plain(_) => None,
            Text::Kept(kept) => kept.canonical.as_ref(),
        }
    }
}

impl Default for SharedStr {
    fn default() -> Self {
        Self::from("")
    }
}

impl PartialEq for SharedStr {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for SharedStr {}

impl PartialOrd for SharedStr {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SharedStr {
    fn cmp(&self, other: &Self) -> Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl Hash for SharedStr {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl Deref for SharedStr {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Debug for SharedStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for SharedStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<&str> for SharedStr {
    fn from(s: &str) -> Self {
        Self(Text::Plain(Arc::from(s)))
    }
}

impl From<String> for SharedStr {
    fn from(s: String) -> Self {
        Self(Text::Plain(Arc::from(s)))
    }
}

impl PartialEq<str> for SharedStr {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for SharedStr {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Serialize for SharedStr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serialize_kept(self.canonical(), self.as_str(), s)
    }
}

impl<'de> Deserialize<'de> for SharedStr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Self::from)
    }
}

/// A shared immutable JSON value; serialises as the value itself. Equality is the value's.
#[derive(Clone)]
pub struct SharedJson(Arc<Kept<Value>>);

impl SharedJson {
    /// A shared value that also keeps its TRACE canonical text, for a value written into many
    /// canonical payloads.
    pub fn with_canonical(value: Value) -> Self {
        let canonical = CanonicalText::of(&value).ok();
        Self(Arc::new(Kept { value, canonical }))
    }

    /// The value.
    pub fn value(&self) -> &Value {
        &self.0.value
    }

    /// The value's TRACE canonical text, when made with [`SharedJson::with_canonical`].
    fn canonical(&self) -> Option<&CanonicalText> {
        self.0.canonical.as_ref()
    }
}

impl PartialEq for SharedJson {
    fn eq(&self, other: &Self) -> bool {
        self.value() == other.value()
    }
}

impl Deref for SharedJson {
    type Target = Value;
    fn deref(&self) -> &Value {
        self.value()
    }
}

impl fmt::Debug for SharedJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.value(), f)
    }
}

impl From<Value> for SharedJson {
    fn from(value: Value) -> Self {
        Self(Arc::new(Kept {
            value,
            canonical: None,
        }))
    }
}

impl Serialize for SharedJson {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serialize_kept(self.canonical(), self.value(), s)
    }
}

impl<'de> Deserialize<'de> for SharedJson {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Value::deserialize(d).map(Self::from)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use cra_wire::canonical::{to_trace_canonical, trace_canonical};
    use serde_json::json;

    /// Text and JSON with their canonical forms kept write the bytes their plain values write,
    /// canonically and in serde_json's text, and compare equal to plain copies.
    #[test]
    fn kept_canonical_forms_change_no_output() {
        #[derive(Serialize)]
        struct Doc {
            text: SharedStr,
            schema: SharedJson,
            plain: SharedStr,
        }
        let text = "caf\u{e9} \"quoted\"\n\u{1f600}";
        let schema =
            json!({"type": "object", "required": ["z", "a"], "properties": {"\u{e9}": {}}});
        let kept = Doc {
            text: SharedStr::with_canonical(text),
            schema: SharedJson::with_canonical(schema.clone()),
            plain: SharedStr::with_canonical("id-1"),
        };
        let plain = Doc {
            text: SharedStr::from(text),
            schema: SharedJson::from(schema),
            plain: SharedStr::from("id-1"),
        };
        let value = serde_json::to_value(&plain).unwrap();
        assert_eq!(serde_json::to_value(&kept).unwrap(), value);
        assert_eq!(
            serde_json::to_string(&kept).unwrap(),
            serde_json::to_string(&plain).unwrap()
        );
        assert_eq!(to_trace_canonical(&kept).unwrap(), trace_canonical(&value));
        assert_eq!(kept.text, plain.text);
        assert_eq!(kept.schema, plain.schema);
        assert!(kept.text.canonical().is_some() && kept.schema.canonical().is_some());
        assert!(plain.text.canonical().is_none() && plain.schema.canonical().is_none());
    }
}
