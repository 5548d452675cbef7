//! The TRACE-profile canonical form of any `Serialize` value, written straight from the value.
//!
//! [`to_trace_canonical`] gives the bytes `trace_canonical(&serde_json::to_value(x)?)` gives,
//! without building the tree, and without the serialise-then-rescan of
//! [`super::trace::trace_canonical_from_str`]: each object's members are written into the output
//! as they come, then put in key order in place. A large payload built from typed data (a
//! resolution in its completion event) is canonicalised in one pass this way.
//!
//! Where `to_value` would quietly keep one of two members with the same name (a struct whose
//! flattened extras repeat a field), this refuses with [`CanonicalSerError`] instead, so that a
//! caller can fall back to the tree path and its semantics.
//!
//! A value that is written again and again unchanged (an action's parameters schema, a context
//! file's text: the same in every resolution of an atlas) can carry its canonical text, computed
//! once, as a [`CanonicalText`]: the writer copies that text instead of writing the value again,
//! and every other serializer sees the value as before.

use std::cell::Cell;
use std::fmt::Write as _;

use serde::ser::{self, Serialize};

use super::trace::{write_ascii_string, write_python_float, write_python_number};

/// Why a value has no canonical text of its own (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot write the canonical form: {0}")]
pub struct CanonicalSerError(String);

impl ser::Error for CanonicalSerError {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        Self(msg.to_string())
    }
}

/// serde_json's private name for a number kept as text (`arbitrary_precision`, on for the
/// workspace): its one field carries the number's JSON text.
const NUMBER_TOKEN: &str = "$serde_json::private::Number";

/// serde_json's private name for JSON text kept as it is (`raw_value`, on for the workspace so
/// that a stored event's envelope carries its payload's text, `cra_trace::chain::seal_prepared`).
/// This writer does not re-read JSON text: a value holding one is refused, and the caller takes
/// the tree path, where `serde_json::to_value` parses it.
const RAW_VALUE_TOKEN: &str = "$serde_json::private::RawValue";

/// The name of the newtype a [`CanonicalText`] wraps its value in, by which the writer knows it.
const PRECOMPUTED_TOKEN: &str = "$cra_wire::canonical::Precomputed";

thread_local! {
    /// Set by the writer just before it hands the value inside a [`PRECOMPUTED_TOKEN`] newtype
    /// (always a [`Precomputed`]) its [`Splice`] serializer, and cleared by that value's first
    /// step. serde tells a `Serialize` impl nothing about its serializer but
    /// `is_human_readable`, so this is how a `Precomputed` learns that the serializer in its
    /// hands is the writer's and it may give its text instead of its value: the flag is set and
    /// taken with no other serialisation between, so no other serializer ever sees it set.
    static SPLICING: Cell<bool> = const { Cell::new(false) };
}

/// The TRACE canonical text of a value, computed once ([`CanonicalText::of`]).
///
/// [`CanonicalText::serialize_value`] serializes the value it was made of: [`to_trace_canonical`]
/// copies the text into its output instead of writing the value again, and every other
/// serializer (serde_json's text, `to_value`, any other format) gets the value itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanonicalText(Box<str>);

impl CanonicalText {
    /// The canonical text of `value`.
    ///
    /// # Errors
    /// When `value` has no canonical form ([`to_trace_canonical`]).
    pub fn of<T: Serialize + ?Sized>(value: &T) -> Result<Self, CanonicalSerError> {
        to_trace_canonical(value).map(|text| Self(text.into_boxed_str()))
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Serializes `value`, which must be the value this text was made of (the caller keeps the
    /// two together, immutable): as this text by [`to_trace_canonical`], as `value` by any other
    /// serializer.
    ///
    /// # Errors
    /// Those of `value`'s serialisation.
    pub fn serialize_value<T, S>(&self, value: &T, serializer: S) -> Result<S::Ok, S::Error>
    where
        T: Serialize + ?Sized,
        S: ser::Serializer,
    {
        serializer.serialize_newtype_struct(
            PRECOMPUTED_TOKEN,
            &Precomputed {
                value,
                text: &self.0,
            },
        )
    }
}

/// A value and its canonical text, inside the [`PRECOMPUTED_TOKEN`] newtype.
struct Precomputed<'a, T: ?Sized> {
    value: &'a T,
    text: &'a str,
}

impl<T: Serialize + ?Sized> Serialize for Precomputed<'_, T> {
    fn serialize<S: ser::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if SPLICING.with(|flag| flag.replace(false)) {
            serializer.serialize_str(self.text)
        } else {
            self.value.serialize(serializer)
        }
    }
}

/// The serializer the writer hands a [`Precomputed`]: it copies the text it is given as it is.
struct Splice<'o> {
    out: &'o mut String,
}

fn not_precomputed() -> CanonicalSerError {
    CanonicalSerError("a precomputed canonical text was expected".into())
}

/// The TRACE-profile canonical form of `value` (the bytes [`super::trace_canonical`] gives for
/// `serde_json::to_value(value)`).
///
/// # Errors
/// When `to_value` would fail (a map key that is not a string or a number, a custom error from
/// the value's `Serialize`) or an object would hold the same key twice.
pub fn to_trace_canonical<T: Serialize + ?Sized>(value: &T) -> Result<String, CanonicalSerError> {
    to_trace_canonical_sized(value, 1024)
}

/// As [`to_trace_canonical`], into a string made with room for `capacity` bytes: for a large
/// payload whose size the caller can guess (the last one of its kind), which saves growing the
/// text step by step, copying it each time.
///
/// # Errors
/// Those of [`to_trace_canonical`].
pub fn to_trace_canonical_sized<T: Serialize + ?Sized>(
    value: &T,
    capacity: usize,
) -> Result<String, CanonicalSerError> {
    let mut out = String::with_capacity(capacity);
    let mut scratch = String::new();
    let mut members = Vec::with_capacity(64);
    value.serialize(Canon {
        out: &mut out,
        scratch: &mut scratch,
        members: &mut members,
    })?;
    Ok(out)
}

/// Writes one value into `out`. `scratch` is reused to reorder objects' members, and `members`
/// is one stack of the members of every object open, so that no object allocates its own list.
struct Canon<'a> {
    out: &'a mut String,
    scratch: &'a mut String,
    members: &'a mut Vec<Member>,
}

impl<'a> Canon<'a> {
    fn reborrow(&mut self) -> Canon<'_> {
        Canon {
            out: self.out,
            scratch: self.scratch,
            members: self.members,
        }
    }

    /// Writes `{"variant":` before an enum variant's content, whose writer closes it.
    fn open_variant(&mut self, variant: &'static str) {
        self.out.push('{');
        write_ascii_string(variant, self.out);
        self.out.push(':');
    }
}

type Res = Result<(), CanonicalSerError>;

impl<'a> ser::Serializer for Canon<'a> {
    type Ok = ();
    type Error = CanonicalSerError;
    type SerializeSeq = Array<'a>;
    type SerializeTuple = Array<'a>;
    type SerializeTupleStruct = Array<'a>;
    type SerializeTupleVariant = Array<'a>;
    type SerializeMap = Object<'a>;
    type SerializeStruct = Object<'a>;
    type SerializeStructVariant = Object<'a>;

    fn serialize_bool(self, v: bool) -> Res {
        self.out.push_str(if v { "true" } else { "false" });
        Ok(())
    }
    fn serialize_i8(self, v: i8) -> Res {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_i16(self, v: i16) -> Res {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_i32(self, v: i32) -> Res {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_i64(self, v: i64) -> Res {
        let _ = write!(self.out, "{v}");
        Ok(())
    }
    fn serialize_i128(self, v: i128) -> Res {
        let _ = write!(self.out, "{v}");
        Ok(())
    }
    fn serialize_u8(self, v: u8) -> Res {
        self.serialize_u64(u64::from(v))
    }
    fn serialize_u16(self, v: u16) -> Res {
        self.serialize_u64(u64::from(v))
    }
    fn serialize_u32(self, v: u32) -> Res {
        self.serialize_u64(u64::from(v))
    }
    fn serialize_u64(self, v: u64) -> Res {
        let _ = write!(self.out, "{v}");
        Ok(())
    }
    fn serialize_u128(self, v: u128) -> Res {
        let _ = write!(self.out, "{v}");
        Ok(())
    }
    fn serialize_f32(self, v: f32) -> Res {
        // serde_json keeps an f32 as its own shortest text, which the canonical form then reads
        // as a double.
        if v.is_finite() {
            write_python_number(&format!("{v:?}"), self.out);
        } else {
            self.out.push_str("null");
        }
        Ok(())
    }
    fn serialize_f64(self, v: f64) -> Res {
        // serde_json turns a non-finite float into `null`.
        if v.is_finite() {
            write_python_float(v, self.out);
        } else {
            self.out.push_str("null");
        }
        Ok(())
    }
    fn serialize_char(self, v: char) -> Res {
        write_ascii_string(v.encode_utf8(&mut [0; 4]), self.out);
        Ok(())
    }
    fn serialize_str(self, v: &str) -> Res {
        write_ascii_string(v, self.out);
        Ok(())
    }
    fn serialize_bytes(self, v: &[u8]) -> Res {
        use ser::SerializeSeq as _;
        let mut seq = self.serialize_seq(Some(v.len()))?;
        for b in v {
            seq.serialize_element(b)?;
        }
        seq.end()
    }
    fn serialize_none(self) -> Res {
        self.serialize_unit()
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Res {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Res {
        self.out.push_str("null");
        Ok(())
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Res {
        self.serialize_unit()
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Res {
        self.serialize_str(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, name: &'static str, value: &T) -> Res {
        if name == PRECOMPUTED_TOKEN {
            SPLICING.with(|flag| flag.set(true));
            let written = value.serialize(Splice { out: self.out });
            SPLICING.with(|flag| flag.set(false));
            return written;
        }
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Res {
        let mut canon = self;
        canon.open_variant(variant);
        value.serialize(canon.reborrow())?;
        canon.out.push('}');
        Ok(())
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Array<'a>, CanonicalSerError> {
        self.out.push('[');
        Ok(Array {
            canon: self,
            first: true,
            wrapped: false,
        })
    }
    fn serialize_tuple(self, len: usize) -> Result<Array<'a>, CanonicalSerError> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        len: usize,
    ) -> Result<Array<'a>, CanonicalSerError> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Array<'a>, CanonicalSerError> {
        let mut canon = self;
        canon.open_variant(variant);
        canon.out.push('[');
        Ok(Array {
            canon,
            first: true,
            wrapped: true,
        })
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Object<'a>, CanonicalSerError> {
        Ok(Object::open(self, false, false))
    }
    fn serialize_struct(
        self,
        name: &'static str,
        _len: usize,
    ) -> Result<Object<'a>, CanonicalSerError> {
        if name == RAW_VALUE_TOKEN {
            return Err(CanonicalSerError(
                "a raw JSON text has no canonical form here; canonicalise serde_json::to_value of it"
                    .into(),
            ));
        }
        Ok(Object::open(self, name == NUMBER_TOKEN, false))
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Object<'a>, CanonicalSerError> {
        let mut canon = self;
        canon.open_variant(variant);
        Ok(Object::open(canon, false, true))
    }
}

/// An array being written.
struct Array<'a> {
    canon: Canon<'a>,
    first: bool,
    /// Set for a tuple variant: its `{"variant":` is closed after the `]`.
    wrapped: bool,
}

impl Array<'_> {
    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Res {
        if !self.first {
            self.canon.out.push(',');
        }
        self.first = false;
        value.serialize(self.canon.reborrow())
    }

    fn close(self) -> Res {
        self.canon.out.push(']');
        if self.wrapped {
            self.canon.out.push('}');
        }
        Ok(())
    }
}

/// The four sequence traits differ only in their element method's name.
macro_rules! array_impl {
    ($trait:ident, $method:ident) => {
        impl ser::$trait for Array<'_> {
            type Ok = ();
            type Error = CanonicalSerError;
            fn $method<T: Serialize + ?Sized>(&mut self, value: &T) -> Res {
                self.element(value)
            }
            fn end(self) -> Res {
                self.close()
            }
        }
    };
}
array_impl!(SerializeSeq, serialize_element);
array_impl!(SerializeTuple, serialize_element);
array_impl!(SerializeTupleStruct, serialize_field);
array_impl!(SerializeTupleVariant, serialize_field);

/// A member's key, kept to put the members in order.
enum Key {
    /// A struct field's name.
    Field(&'static str),
    /// A key written as it is (no character needed escaping): its text is in the output at
    /// these places, between its quotes.
    Written(usize, usize),
    /// Any other key, as decoded text.
    Owned(String),
}

/// One member of an open object: its key and where its `"key":value` text lies in the output.
struct Member {
    key: Key,
    start: usize,
    end: usize,
}

/// The bytes `key` orders by, reading written keys from `text`, which holds the output from
/// place `offset` on.
fn key_bytes<'s>(key: &'s Key, text: &'s str, offset: usize) -> &'s [u8] {
    match key {
        Key::Field(name) => name.as_bytes(),
        Key::Written(from, to) => text
            .as_bytes()
            .get(from - offset..to - offset)
            .unwrap_or(&[]),
        Key::Owned(name) => name.as_bytes(),
    }
}

/// An object being written: its members go into `out` as they come (`"key":value`, comma
/// separated), with each one's key and place noted on the members stack, and are put in key
/// order at the end.
struct Object<'a> {
    canon: Canon<'a>,
    /// Where the first member starts in `out`.
    region: usize,
    /// Where this object's members start on the members stack.
    base: usize,
    sorted: bool,
    /// Where the member whose key `serialize_key` wrote starts, and that key.
    pending: Option<(usize, Key)>,
    /// serde_json's private number: no braces, its one field's text is the number.
    number: bool,
    /// A struct variant's content: its `{"variant":` is closed after the `}`.
    wrapped: bool,
}

impl<'a> Object<'a> {
    fn open(canon: Canon<'a>, number: bool, wrapped: bool) -> Self {
        if !number {
            canon.out.push('{');
        }
        let region = canon.out.len();
        let base = canon.members.len();
        Self {
            canon,
            region,
            base,
            sorted: true,
            pending: None,
            number,
            wrapped,
        }
    }

    /// Writes the comma before a member when it is not the first; returns where it starts.
    fn member_start(&mut self) -> usize {
        if self.canon.members.len() > self.base {
            self.canon.out.push(',');
        }
        self.canon.out.len()
    }

    /// Writes the value of the member whose `"key":` is written, and notes the member.
    fn member_value<T: Serialize + ?Sized>(&mut self, start: usize, key: Key, value: &T) -> Res {
        value.serialize(self.canon.reborrow())?;
        let out = self.canon.out.as_str();
        if self.canon.members.len() > self.base
            && self
                .canon
                .members
                .last()
                .is_some_and(|last| key_bytes(&last.key, out, 0) >= key_bytes(&key, out, 0))
        {
            self.sorted = false;
        }
        let end = self.canon.out.len();
        self.canon.members.push(Member { key, start, end });
        Ok(())
    }

    fn field<T: Serialize + ?Sized>(&mut self, name: &'static str, value: &T) -> Res {
        if self.number {
            return value.serialize(NumberInto {
                out: self.canon.out,
            });
        }
        let start = self.member_start();
        write_ascii_string(name, self.canon.out);
        self.canon.out.push(':');
        self.member_value(start, Key::Field(name), value)
    }

    fn close(self) -> Res {
        if self.number {
            return Ok(());
        }
        if !self.sorted {
            let region = self.region;
            let out = &mut *self.canon.out;
            let scratch = &mut *self.canon.scratch;
            scratch.clear();
            scratch.push_str(&out[region..]);
            let members = &mut self.canon.members[self.base..];
            members.sort_unstable_by(|a, b| {
                key_bytes(&a.key, scratch, region).cmp(key_bytes(&b.key, scratch, region))
            });
            if let Some(w) = members.windows(2).find(|w| {
                key_bytes(&w[0].key, scratch, region) == key_bytes(&w[1].key, scratch, region)
            }) {
                return Err(CanonicalSerError(format!(
                    "the member {:?} appears twice in one object",
                    String::from_utf8_lossy(key_bytes(&w[0].key, scratch, region))
                )));
            }
            out.truncate(region);
            for (i, m) in members.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&scratch[m.start - region..m.end - region]);
            }
        }
        self.canon.members.truncate(self.base);
        self.canon.out.push('}');
        if self.wrapped {
            self.canon.out.push('}');
        }
        Ok(())
    }
}

impl ser::SerializeMap for Object<'_> {
    type Ok = ();
    type Error = CanonicalSerError;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Res {
        let start = self.member_start();
        let key = key.serialize(KeyInto {
            out: self.canon.out,
        })?;
        self.canon.out.push(':');
        self.pending = Some((start, key));
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Res {
        let (start, key) = self
            .pending
            .take()
            .ok_or_else(|| CanonicalSerError("a map value without its key".into()))?;
        self.member_value(start, key, value)
    }
    fn end(self) -> Res {
        self.close()
    }
}

/// A struct and a struct variant take their fields alike.
macro_rules! struct_impl {
    ($trait:ident) => {
        impl ser::$trait for Object<'_> {
            type Ok = ();
            type Error = CanonicalSerError;
            fn serialize_field<T: Serialize + ?Sized>(
                &mut self,
                key: &'static str,
                value: &T,
            ) -> Res {
                self.field(key, value)
            }
            fn end(self) -> Res {
                self.close()
            }
        }
    };
}
struct_impl!(SerializeStruct);
struct_impl!(SerializeStructVariant);

/// Writes a map key as the string serde_json would make of it (strings as they are, integers
/// and chars as text; anything else is refused, as `to_value` refuses it) and returns it for
/// ordering.
struct KeyInto<'o> {
    out: &'o mut String,
}

impl KeyInto<'_> {
    fn text(self, s: &str) -> Result<Key, CanonicalSerError> {
        let start = self.out.len() + 1;
        write_ascii_string(s, self.out);
        // Every escape lengthens the text: the key was written as it is iff only the quotes
        // were added.
        Ok(if self.out.len() == start + s.len() + 1 {
            Key::Written(start, start + s.len())
        } else {
            Key::Owned(s.to_owned())
        })
    }
}

/// Writes serde_json's private number text in its canonical form.
struct NumberInto<'o> {
    out: &'o mut String,
}

fn not_a_key() -> CanonicalSerError {
    CanonicalSerError("a map key must be a string".into())
}

fn not_text() -> CanonicalSerError {
    CanonicalSerError("serde_json's private number did not hold text".into())
}

macro_rules! refuse_rest {
    ($ok:ty, $err:expr) => {
        type Ok = $ok;
        type Error = CanonicalSerError;
        type SerializeSeq = ser::Impossible<$ok, CanonicalSerError>;
        type SerializeTuple = ser::Impossible<$ok, CanonicalSerError>;
        type SerializeTupleStruct = ser::Impossible<$ok, CanonicalSerError>;
        type SerializeTupleVariant = ser::Impossible<$ok, CanonicalSerError>;
        type SerializeMap = ser::Impossible<$ok, CanonicalSerError>;
        type SerializeStruct = ser::Impossible<$ok, CanonicalSerError>;
        type SerializeStructVariant = ser::Impossible<$ok, CanonicalSerError>;

        fn serialize_bool(self, _v: bool) -> Result<$ok, CanonicalSerError> {
            Err($err)
        }
        fn serialize_f32(self, _v: f32) -> Result<$ok, CanonicalSerError> {
            Err($err)
        }
        fn serialize_f64(self, _v: f64) -> Result<$ok, CanonicalSerError> {
            Err($err)
        }
        fn serialize_bytes(self, _v: &[u8]) -> Result<$ok, CanonicalSerError> {
            Err($err)
        }
        fn serialize_none(self) -> Result<$ok, CanonicalSerError> {
            Err($err)
        }
        fn serialize_some<T: Serialize + ?Sized>(
            self,
            _value: &T,
        ) -> Result<$ok, CanonicalSerError> {
            Err($err)
        }
        fn serialize_unit(self) -> Result<$ok, CanonicalSerError> {
            Err($err)
        }
        fn serialize_unit_struct(self, _name: &'static str) -> Result<$ok, CanonicalSerError> {
            Err($err)
        }
        fn serialize_newtype_variant<T: Serialize + ?Sized>(
            self,
            _name: &'static str,
            _index: u32,
            _variant: &'static str,
            _value: &T,
        ) -> Result<$ok, CanonicalSerError> {
            Err($err)
        }
        fn serialize_seq(
            self,
            _len: Option<usize>,
        ) -> Result<Self::SerializeSeq, CanonicalSerError> {
            Err($err)
        }
        fn serialize_tuple(self, _len: usize) -> Result<Self::SerializeTuple, CanonicalSerError> {
            Err($err)
        }
        fn serialize_tuple_struct(
            self,
            _name: &'static str,
            _len: usize,
        ) -> Result<Self::SerializeTupleStruct, CanonicalSerError> {
            Err($err)
        }
        fn serialize_tuple_variant(
            self,
            _name: &'static str,
            _index: u32,
            _variant: &'static str,
            _len: usize,
        ) -> Result<Self::SerializeTupleVariant, CanonicalSerError> {
            Err($err)
        }
        fn serialize_map(
            self,
            _len: Option<usize>,
        ) -> Result<Self::SerializeMap, CanonicalSerError> {
            Err($err)
        }
        fn serialize_struct(
            self,
            _name: &'static str,
            _len: usize,
        ) -> Result<Self::SerializeStruct, CanonicalSerError> {
            Err($err)
        }
        fn serialize_struct_variant(
            self,
            _name: &'static str,
            _index: u32,
            _variant: &'static str,
            _len: usize,
        ) -> Result<Self::SerializeStructVariant, CanonicalSerError> {
            Err($err)
        }
    };
}

/// Refuses what a map key may be but a number's text may not.
macro_rules! refuse_keys {
    ($ok:ty, $err:expr) => {
        fn serialize_char(self, _v: char) -> Result<$ok, CanonicalSerError> {
            Err($err)
        }
        fn serialize_i8(self, _v: i8) -> Result<$ok, CanonicalSerError> {
            Err($err)
        }
        fn serialize_i16(self, _v: i16) -> Result<$ok, CanonicalSerError> {
            Err($err)
        }
        fn serialize_i32(self, _v: i32) -> Result<$ok, CanonicalSerError> {
            Err($err)
        }
        fn serialize_i64(self, _v: i64) -> Result<$ok, CanonicalSerError> {
            Err($err)
        }
        fn serialize_u8(self, _v: u8) -> Result<$ok, CanonicalSerError> {
            Err($err)
        }
        fn serialize_u16(self, _v: u16) -> Result<$ok, CanonicalSerError> {
            Err($err)
        }
        fn serialize_u32(self, _v: u32) -> Result<$ok, CanonicalSerError> {
            Err($err)
        }
        fn serialize_u64(self, _v: u64) -> Result<$ok, CanonicalSerError> {
            Err($err)
        }
        fn serialize_unit_variant(
            self,
            _name: &'static str,
            _index: u32,
            _variant: &'static str,
        ) -> Result<$ok, CanonicalSerError> {
            Err($err)
        }
        fn serialize_newtype_struct<T: Serialize + ?Sized>(
            self,
            _name: &'static str,
            _value: &T,
        ) -> Result<$ok, CanonicalSerError> {
            Err($err)
        }
    };
}

impl ser::Serializer for KeyInto<'_> {
    refuse_rest!(Key, not_a_key());

    fn serialize_str(self, v: &str) -> Result<Key, CanonicalSerError> {
        self.text(v)
    }
    fn serialize_char(self, v: char) -> Result<Key, CanonicalSerError> {
        self.text(v.encode_utf8(&mut [0; 4]))
    }
    fn serialize_i8(self, v: i8) -> Result<Key, CanonicalSerError> {
        self.text(&v.to_string())
    }
    fn serialize_i16(self, v: i16) -> Result<Key, CanonicalSerError> {
        self.text(&v.to_string())
    }
    fn serialize_i32(self, v: i32) -> Result<Key, CanonicalSerError> {
        self.text(&v.to_string())
    }
    fn serialize_i64(self, v: i64) -> Result<Key, CanonicalSerError> {
        self.text(&v.to_string())
    }
    fn serialize_i128(self, v: i128) -> Result<Key, CanonicalSerError> {
        self.text(&v.to_string())
    }
    fn serialize_u8(self, v: u8) -> Result<Key, CanonicalSerError> {
        self.text(&v.to_string())
    }
    fn serialize_u16(self, v: u16) -> Result<Key, CanonicalSerError> {
        self.text(&v.to_string())
    }
    fn serialize_u32(self, v: u32) -> Result<Key, CanonicalSerError> {
        self.text(&v.to_string())
    }
    fn serialize_u64(self, v: u64) -> Result<Key, CanonicalSerError> {
        self.text(&v.to_string())
    }
    fn serialize_u128(self, v: u128) -> Result<Key, CanonicalSerError> {
        self.text(&v.to_string())
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<Key, CanonicalSerError> {
        self.text(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<Key, CanonicalSerError> {
        value.serialize(self)
    }
}

impl ser::Serializer for Splice<'_> {
    refuse_rest!((), not_precomputed());
    refuse_keys!((), not_precomputed());

    fn serialize_str(self, v: &str) -> Res {
        self.out.push_str(v);
        Ok(())
    }
}

impl ser::Serializer for NumberInto<'_> {
    refuse_rest!((), not_text());
    refuse_keys!((), not_text());

    fn serialize_str(self, v: &str) -> Res {
        write_python_number(v, self.out);
        Ok(())
    }
}
