//! Reference-counted text and JSON for resolution members that are copied from the compiled
//! atlas into every resolution (names, descriptions, schemas, context text). Cloning one is a
//! counter increment, not a deep copy, which keeps a resolve at 100 actions within microseconds.
//! On the wire they are plain strings and JSON values.
//!
//! (Until round 2 each also kept its TRACE canonical text, computed once, for the canonical
//! writer to copy; same-run pairs showed no gain, so it was removed: `docs/architecture.md`, "The
//! optimisation rule".)

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// Shared immutable text; serialises as a JSON string. Equality, order and hash are the text's.
#[derive(Clone, Default)]
pub struct SharedStr {
    text: Arc<str>,
}

impl SharedStr {
    /// The text.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl PartialEq for SharedStr {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
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
        self.text.cmp(&other.text)
    }
}

impl Hash for SharedStr {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.text.hash(state);
    }
}

impl Deref for SharedStr {
    type Target = str;
    fn deref(&self) -> &str {
        &self.text
    }
}

impl fmt::Debug for SharedStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.text, f)
    }
}

impl fmt::Display for SharedStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl From<&str> for SharedStr {
    fn from(s: &str) -> Self {
        Self { text: Arc::from(s) }
    }
}

impl From<String> for SharedStr {
    fn from(s: String) -> Self {
        Self { text: Arc::from(s) }
    }
}

impl PartialEq<str> for SharedStr {
    fn eq(&self, other: &str) -> bool {
        &*self.text == other
    }
}

impl PartialEq<&str> for SharedStr {
    fn eq(&self, other: &&str) -> bool {
        &*self.text == *other
    }
}

impl Serialize for SharedStr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for SharedStr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Self::from)
    }
}

/// A shared immutable JSON value; serialises as the value itself. Equality is the value's.
#[derive(Clone)]
pub struct SharedJson {
    value: Arc<Value>,
}

impl SharedJson {
    /// The value.
    pub fn value(&self) -> &Value {
        &self.value
    }
}

impl PartialEq for SharedJson {
    fn eq(&self, other: &Self) -> bool {
        self.value == other.value
    }
}

impl Deref for SharedJson {
    type Target = Value;
    fn deref(&self) -> &Value {
        &self.value
    }
}

impl fmt::Debug for SharedJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.value, f)
    }
}

impl From<Value> for SharedJson {
    fn from(v: Value) -> Self {
        Self { value: Arc::new(v) }
    }
}

impl Serialize for SharedJson {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.value.serialize(s)
    }
}

impl<'de> Deserialize<'de> for SharedJson {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Value::deserialize(d).map(Self::from)
    }
}
