-- TRACE chains: one head row per session (the row every append locks) and one row per event.
-- Timestamps are kept as the wire text (fixed width, so text order is time order); `body` is the
-- exact wire JSON of the event as sealed (text, not jsonb, so the bytes come back unchanged).
CREATE TABLE trace_heads (
    session_id      text    PRIMARY KEY,
    next_sequence   bigint  NOT NULL CHECK (next_sequence >= 0),
    head_hash       text    NOT NULL,
    first_timestamp text    NOT NULL,
    last_timestamp  text    NOT NULL,
    ended           boolean NOT NULL DEFAULT false
);

CREATE TABLE trace_events (
    session_id  text   NOT NULL,
    sequence    bigint NOT NULL CHECK (sequence >= 0),
    event_type  text   NOT NULL,
    timestamp   text   NOT NULL,
    event_hash  text   NOT NULL,
    body        text   NOT NULL,
    PRIMARY KEY (session_id, sequence)
);
