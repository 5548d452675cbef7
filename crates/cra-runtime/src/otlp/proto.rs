//! The protobuf encoding of an OTLP trace export (`ExportTraceServiceRequest` of
//! `opentelemetry/proto/collector/trace/v1`), written by hand: the few messages cra sends, with
//! the field numbers of the published `.proto` files. Tested against the reference decoder
//! (PyPI's `opentelemetry-proto`) by `tools/peers/otlp_receiver.py`.
//!
//! Wire format: each field is a key (`number << 3 | wire type`) as a varint, then a varint
//! (type 0), eight little-endian bytes (type 1), or a varint length and that many bytes
//! (type 2: strings, bytes and embedded messages). Empty and zero fields are left out, as
//! proto3 does.

use super::spans::{Attr, Span, SpanStatus};

const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;

/// A growing protobuf message.
#[derive(Default)]
pub(crate) struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
    }

    fn key(&mut self, field: u32, wire: u8) {
        self.varint(u64::from(field) << 3 | u64::from(wire));
    }

    fn uint(&mut self, field: u32, v: u64) {
        if v != 0 {
            self.key(field, VARINT);
            self.varint(v);
        }
    }

    /// An `int64` (two's complement as a ten-byte varint when negative).
    fn int64(&mut self, field: u32, v: i64) {
        self.key(field, VARINT);
        self.varint(v as u64);
    }

    fn fixed64(&mut self, field: u32, v: u64) {
        if v != 0 {
            self.key(field, FIXED64);
            self.buf.extend_from_slice(&v.to_le_bytes());
        }
    }

    fn bytes(&mut self, field: u32, v: &[u8]) {
        if !v.is_empty() {
            self.key(field, LEN);
            self.varint(v.len() as u64);
            self.buf.extend_from_slice(v);
        }
    }

    fn string(&mut self, field: u32, v: &str) {
        self.bytes(field, v.as_bytes());
    }

    /// An embedded message (written even when empty: its presence can mean something).
    fn message(&mut self, field: u32, write: impl FnOnce(&mut Writer)) {
        let mut inner = Writer::default();
        write(&mut inner);
        self.key(field, LEN);
        self.varint(inner.buf.len() as u64);
        self.buf.extend_from_slice(&inner.buf);
    }

    /// The bytes written.
    pub(crate) fn finish(self) -> Vec<u8> {
        self.buf
    }
}

/// `KeyValue { key = 1; value = 2 (AnyValue) }`, `AnyValue { string_value = 1; bool_value = 2;
/// int_value = 3 }`.
fn key_value(w: &mut Writer, field: u32, key: &str, value: &Attr) {
    w.message(field, |kv| {
        kv.string(1, key);
        kv.message(2, |any| match value {
            Attr::Str(s) => {
                any.key(1, LEN);
                any.varint(s.len() as u64);
                any.buf.extend_from_slice(s.as_bytes());
            }
            Attr::Bool(b) => {
                any.key(2, VARINT);
                any.varint(u64::from(*b));
            }
            Attr::Int(i) => any.int64(3, *i),
        });
    });
}

/// `Span` (fields 1-16 of `opentelemetry.proto.trace.v1.Span`).
fn span(w: &mut Writer, s: &Span) {
    w.bytes(1, &s.trace_id);
    w.bytes(2, &s.span_id);
    if let Some(parent) = &s.parent_span_id {
        w.bytes(4, parent);
    }
    w.string(5, &s.name);
    w.uint(6, u64::from(s.kind as u32));
    w.fixed64(7, s.start_unix_nano);
    w.fixed64(8, s.end_unix_nano);
    for (k, v) in &s.attributes {
        key_value(w, 9, k, v);
    }
    // Span.Link { trace_id = 1; span_id = 2; attributes = 4 }
    for link in &s.links {
        w.message(13, |l| {
            l.bytes(1, &link.trace_id);
            l.bytes(2, &link.span_id);
            for (k, v) in &link.attributes {
                key_value(l, 4, k, v);
            }
        });
    }
    // Status { message = 2; code = 3 }
    let (code, message) = match &s.status {
        SpanStatus::Unset => (0, ""),
        SpanStatus::Ok => (1, ""),
        SpanStatus::Error(m) => (2, m.as_str()),
    };
    if code != 0 {
        w.message(15, |st| {
            st.string(2, message);
            st.uint(3, code);
        });
    }
}

/// `ExportTraceServiceRequest { resource_spans = 1 }` holding one `ResourceSpans { resource = 1;
/// scope_spans = 2 }` of one `ScopeSpans { scope = 1; spans = 2 }`: this server as the
/// resource (`resource` attributes), cra as the instrumentation scope.
pub(crate) fn export_request(
    resource: &[(&str, Attr)],
    scope_version: &str,
    spans: &[Span],
) -> Vec<u8> {
    let mut w = Writer::default();
    w.message(1, |rs| {
        rs.message(1, |r| {
            for (k, v) in resource {
                key_value(r, 1, k, v);
            }
        });
        rs.message(2, |ss| {
            ss.message(1, |scope| {
                scope.string(1, "cra");
                scope.string(2, scope_version);
            });
            for s in spans {
                ss.message(2, |m| span(m, s));
            }
        });
    });
    w.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_of(write: impl FnOnce(&mut Writer)) -> Vec<u8> {
        let mut w = Writer::default();
        write(&mut w);
        w.finish()
    }

    /// The encodings the protobuf documentation works through by hand.
    #[test]
    fn varints_and_keys_are_the_documented_bytes() {
        assert_eq!(bytes_of(|w| w.uint(1, 150)), [0x08, 0x96, 0x01]);
        assert_eq!(bytes_of(|w| w.string(2, "testing")), b"\x12\x07testing");
        assert_eq!(
            bytes_of(|w| w.int64(3, -2)).len(),
            11,
            "a negative int64 takes ten bytes"
        );
        assert_eq!(
            bytes_of(|w| w.fixed64(7, 1)),
            [0x39, 1, 0, 0, 0, 0, 0, 0, 0]
        );
        assert!(bytes_of(|w| w.uint(6, 0)).is_empty(), "zero is left out");
    }
}
