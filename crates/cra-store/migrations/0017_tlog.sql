-- The transparency log (issue 26, `specs/tlog.md`): every TRACE event is a leaf of one RFC 6962
-- tree, appended in the transaction that stores the event.
--
-- `tlog_state` is the log's one row: `size` is the next leaf index. Every append transaction
-- locks it (`FOR UPDATE`) after its events are written, so leaf indexes are handed out in commit
-- order with no gap across every replica: a PostgreSQL sequence would not do, since a rolled-back
-- transaction leaves a hole in it and a tree has none. The row is inserted by the first server
-- of this version to start, which also backfills the events stored before (see `pg/tlog.rs`).
CREATE TABLE tlog_state (
    id       integer PRIMARY KEY CHECK (id = 1),
    size     bigint  NOT NULL CHECK (size >= 0),
    origin   text,
    key      text
);

-- Stored tiles (`crate::tlog`): level 0 to 7 hash tiles with their inner levels, level -1 the
-- entry bundles (event hashes in log order).
CREATE TABLE tlog_tiles (
    level    smallint NOT NULL,
    idx      bigint   NOT NULL,
    data     bytea    NOT NULL,
    PRIMARY KEY (level, idx)
);

-- Where each event sits in the log. Retention removes events, never leaves or tiles.
CREATE TABLE tlog_leaves (
    event_hash bytea  PRIMARY KEY,
    leaf_index bigint NOT NULL,
    session_id text   NOT NULL,
    sequence   bigint NOT NULL
);

-- Signed checkpoints as published, one per tree size.
CREATE TABLE tlog_checkpoints (
    size     bigint PRIMARY KEY,
    note     text   NOT NULL
);
