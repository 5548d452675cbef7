//! Reading a struct that keeps its unknown members out of a JSON object, without serde's
//! `#[serde(flatten)]`.
//!
//! `flatten` buffers members in serde's private `Content` tree before it deserialises the known
//! ones, and `Content` cannot hold a 128-bit integer. Read from a `serde_json::Value` with
//! `arbitrary_precision` (which cra needs for exact canonical numbers), an integer between 2^64
//! and 2^128 inside nested flattened structs is handed over as one: a CARP request with such a
//! number in its parameters, task or context was refused with "invalid type: integer ... as
//! u128" (integers beyond 2^128 took another path and passed). Reading a `Value` out of a
//! `Value` also writes `-0` as `0` and re-renders floats, so what the agent sent was not
//! always what was recorded.
//!
//! A type that keeps unknown members instead deserialises from `Map<String, Value>` with
//! `#[serde(try_from = "Map<String, Value>")]` (or is built with `T::try_from(map)`), takes its
//! known members out with [`Members`] (objects and values as written), and keeps the rest.
//! Serialising with `flatten` is unaffected.

use serde::de::{DeserializeOwned, Error as _};
use serde_json::{Map, Value};

/// The members of one JSON object, taken out one by one; what is left is the unknown rest.
#[derive(Debug)]
pub struct Members(Map<String, Value>);

impl Members {
    /// Starts taking members out of `map`.
    pub fn new(map: Map<String, Value>) -> Self {
        Members(map)
    }

    /// A member that must be present, read as `T` (`missing field` when absent, as serde says).
    pub fn required<T: DeserializeOwned>(
        &mut self,
        name: &'static str,
    ) -> Result<T, serde_json::Error> {
        match self.0.remove(name) {
            Some(value) => read(name, value),
            None => Err(serde_json::Error::missing_field(name)),
        }
    }

    /// A member that may be absent or `null` (both read as `None`), as `#[serde(default)]` on
    /// an `Option` reads it.
    pub fn optional<T: DeserializeOwned>(
        &mut self,
        name: &'static str,
    ) -> Result<Option<T>, serde_json::Error> {
        match self.0.remove(name) {
            None | Some(Value::Null) => Ok(None),
            Some(value) => read(name, value).map(Some),
        }
    }

    /// A member as written, `null` included (`None` only when absent).
    pub fn present(&mut self, name: &str) -> Option<Value> {
        self.0.remove(name)
    }

    /// A member that must be present, as written. Taking a `Value` this way (rather than with
    /// [`Members::required`]) keeps every number's text: serde reading a `Value` out of a
    /// `Value` writes `-0` as `0` and re-renders floats.
    pub fn value(&mut self, name: &'static str) -> Result<Value, serde_json::Error> {
        self.0
            .remove(name)
            .ok_or_else(|| serde_json::Error::missing_field(name))
    }

    /// An object member that may be absent or `null`, as written (see [`Members::value`]).
    pub fn object(&mut self, name: &str) -> Result<Option<Map<String, Value>>, serde_json::Error> {
        match self.0.remove(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(map)) => Ok(Some(map)),
            Some(_) => Err(serde_json::Error::custom(format!(
                "member `{name}` must be an object"
            ))),
        }
    }

    /// An object member that may be absent or `null`, read as a `T` that is itself read member
    /// by member, so its numbers keep their text too.
    pub fn nested<T>(&mut self, name: &str) -> Result<Option<T>, serde_json::Error>
    where
        T: TryFrom<Map<String, Value>, Error = serde_json::Error>,
    {
        self.object(name)?.map(T::try_from).transpose()
    }

    /// A required object member read as a `T` read member by member.
    pub fn nested_required<T>(&mut self, name: &'static str) -> Result<T, serde_json::Error>
    where
        T: TryFrom<Map<String, Value>, Error = serde_json::Error>,
    {
        self.nested(name)?
            .ok_or_else(|| serde_json::Error::missing_field(name))
    }

    /// The members not taken, in their order.
    pub fn rest(self) -> Map<String, Value> {
        self.0
    }
}

fn read<T: DeserializeOwned>(name: &str, value: Value) -> Result<T, serde_json::Error> {
    serde_json::from_value(value)
        .map_err(|e| serde_json::Error::custom(format!("member `{name}`: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[serde(try_from = "Map<String, Value>")]
    struct Kept {
        id: String,
        note: Option<String>,
        extra: Map<String, Value>,
    }

    impl TryFrom<Map<String, Value>> for Kept {
        type Error = serde_json::Error;
        fn try_from(map: Map<String, Value>) -> Result<Self, Self::Error> {
            let mut m = Members::new(map);
            Ok(Kept {
                id: m.required("id")?,
                note: m.optional("note")?,
                extra: m.rest(),
            })
        }
    }

    #[test]
    fn integers_past_64_bits_are_kept_as_written_in_the_rest() {
        for n in [
            "18446744073709551616",
            "123456789012345678901",
            "-170141183460469231731687303715884105728",
            "1234567890123456789012345678901234567890",
        ] {
            let text = format!(r#"{{"id":"a","deep":{{"n":[{n}]}},"note":null}}"#);
            let kept: Kept = serde_json::from_str(&text).expect(n);
            assert_eq!((kept.id.as_str(), kept.note), ("a", None));
            assert_eq!(kept.extra["deep"]["n"][0].to_string(), n);
        }
    }

    #[test]
    fn values_taken_as_written_keep_their_number_text() {
        let value: Value = serde_json::from_str(r#"{"p":{"z":-0,"f":1.50,"e":1E5}}"#).unwrap();
        let Value::Object(map) = value else {
            unreachable!()
        };
        let mut m = Members::new(map);
        assert_eq!(m.object("p").unwrap().unwrap()["z"].to_string(), "-0");
        let Value::Object(map) = serde_json::from_str(r#"{"p":{"f":1.50}}"#).unwrap() else {
            unreachable!()
        };
        assert_eq!(
            Members::new(map).value("p").unwrap()["f"].to_string(),
            "1.50"
        );
    }

    #[test]
    fn an_object_member_that_is_not_an_object_is_refused_by_name() {
        let Value::Object(map) = serde_json::from_str(r#"{"task":"do it","ctx":null}"#).unwrap()
        else {
            unreachable!()
        };
        let mut m = Members::new(map);
        assert!(m.object("ctx").unwrap().is_none(), "null reads as absent");
        let e = m.nested::<Kept>("task").unwrap_err();
        assert!(
            e.to_string().contains("member `task` must be an object"),
            "{e}"
        );
        assert!(
            m.nested_required::<Kept>("gone")
                .unwrap_err()
                .to_string()
                .contains("missing field `gone`")
        );
    }

    #[test]
    fn a_missing_or_mistyped_member_is_named() {
        let missing = serde_json::from_str::<Kept>(r#"{"note":"x"}"#).unwrap_err();
        assert!(
            missing.to_string().contains("missing field `id`"),
            "{missing}"
        );
        let mistyped = serde_json::from_str::<Kept>(r#"{"id":1}"#).unwrap_err();
        assert!(mistyped.to_string().contains("member `id`"), "{mistyped}");
    }
}
