//! The one way a producer turns a payload into a TRACE event: a struct that implements
//! [`Payload`] (which names its event type, so a type and its payload cannot drift apart) is
//! placed on a [`Span`] ([`Span::event`] for appends of prepared drafts, [`Span::draft_of`] for
//! appends of plain ones). The payload structs live with the operations they record: CARP's and
//! the session events in `cra_carp::events`, Relay's in the runtime's service layer, the operator
//! audit chain's in `cra_store::retention`. No `json!` literal builds a payload (a tidy test
//! holds every crate to it).

use serde::Serialize;
use serde_json::Value;

use crate::{EventDraft, PreparedDraft};

/// A TRACE payload and the event type it is the payload of.
pub trait Payload: Serialize {
    /// The event's `event_type`.
    const EVENT_TYPE: &'static str;
    /// The payload members TRACE §4.3 requires of this event type (none for a type of the
    /// runtime's own). The generated event schema (`schemas/trace-event.schema.json`) requires
    /// them, and each payload's test shows its struct writes them.
    const REQUIRED: &'static [&'static str] = &[];
}

/// Where an operation's events go: its trace, its span and the span it continues.
#[derive(Debug, Clone, Copy)]
pub struct Span<'a> {
    /// The trace (a resolve's, shared by the executes under it).
    pub trace_id: &'a str,
    /// This operation's span.
    pub span_id: &'a str,
    /// The span this one continues (an execute's parent is its resolve).
    pub parent: Option<&'a str>,
}

impl<'a> Span<'a> {
    /// A span with no parent.
    pub fn root(trace_id: &'a str, span_id: &'a str) -> Self {
        Self {
            trace_id,
            span_id,
            parent: None,
        }
    }

    /// The event recording `payload`: written straight into its TRACE canonical form (no
    /// `Value` tree is made, walked and dropped). A payload the canonical writer refuses (two
    /// members with one name, possible only through a request's unknown extras) goes through a
    /// `Value`, where the later member wins, as serde_json has it.
    pub fn event<P: Payload>(&self, payload: &P) -> PreparedDraft {
        match cra_wire::canonical::to_trace_canonical(payload) {
            Ok(text) => self.event_from_canonical::<P>(text),
            Err(_) => PreparedDraft::new(self.draft_of(payload)),
        }
    }

    /// The event of a `P` whose canonical text is `canonical` (the TRACE canonical form of a
    /// `P`, as [`Span::event`] writes it).
    fn event_from_canonical<P: Payload>(&self, canonical: String) -> PreparedDraft {
        PreparedDraft::from_canonical(self.draft(P::EVENT_TYPE, Value::Null), canonical)
    }

    /// The event recording `payload` as a plain draft, for the appends that take those and
    /// canonicalise each payload themselves: the payload is a value made straight from the
    /// struct (writing its canonical text first would only be parsed back here and written
    /// again by the store). Numbers keep their spelling, as in any producer's value.
    pub fn draft_of<P: Payload>(&self, payload: &P) -> EventDraft {
        // A payload struct has string keys only, so making its value cannot fail.
        let value = serde_json::to_value(payload).unwrap_or(Value::Null);
        self.draft(P::EVENT_TYPE, value)
    }

    fn draft(&self, event_type: &str, payload: Value) -> EventDraft {
        EventDraft {
            trace_id: self.trace_id.to_owned(),
            span_id: self.span_id.to_owned(),
            parent_span_id: self.parent.map(str::to_owned),
            event_type: event_type.to_owned(),
            payload,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    const SPAN: Span<'static> = Span {
        trace_id: "t",
        span_id: "s",
        parent: Some("p"),
    };

    /// A payload the canonical writer refuses (two members named `a`, one from a flattened map)
    /// goes through a `Value`, where serde_json keeps one of the two.
    #[test]
    fn an_event_falls_back_to_a_value_when_the_canonical_writer_refuses() {
        #[derive(Serialize)]
        struct Twice {
            a: u8,
            #[serde(flatten)]
            extra: BTreeMap<String, u8>,
        }
        impl Payload for Twice {
            const EVENT_TYPE: &'static str = "test.twice";
        }
        let payload = Twice {
            a: 1,
            extra: [("a".to_owned(), 2)].into(),
        };
        assert!(cra_wire::canonical::to_trace_canonical(&payload).is_err());
        let prepared = SPAN.event(&payload);
        let value = serde_json::to_value(&payload).unwrap();
        assert_eq!(prepared.draft.payload, value);
        assert_eq!(prepared.draft.event_type, "test.twice");
        assert_eq!(
            prepared.canonical_payload(),
            cra_wire::canonical::trace_canonical(&value)
        );
    }

    /// Both forms carry the span, the parent and the payload's own event type.
    #[test]
    fn both_forms_carry_the_span_and_the_event_type() {
        #[derive(Serialize)]
        struct Note<'a> {
            text: &'a str,
        }
        impl Payload for Note<'_> {
            const EVENT_TYPE: &'static str = "test.note";
        }
        let note = Note { text: "caf\u{e9}" };
        let prepared = SPAN.event(&note);
        let plain = SPAN.draft_of(&note);
        for d in [&prepared.draft, &plain] {
            assert_eq!(
                (
                    d.trace_id.as_str(),
                    d.span_id.as_str(),
                    d.parent_span_id.as_deref()
                ),
                ("t", "s", Some("p"))
            );
            assert_eq!(d.event_type, "test.note");
        }
        assert_eq!(prepared.canonical_payload(), r#"{"text":"caf\u00e9"}"#);
        assert_eq!(plain.payload, serde_json::json!({"text": "caf\u{e9}"}));
    }
}
