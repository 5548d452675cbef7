-- The open-sessions quota's counter: each agent's open sessions, keyed by the SHA-256 (hex) of
-- its agent id so a store whose records are encrypted keeps no agent id in the clear here.
-- Every start and end of a session updates it in the transaction that writes the record. The
-- row keyed '' says the sessions stored before this migration are not counted yet: the store
-- counts them when it starts (`pg::carp::count_open_sessions`), in Rust, as records may be
-- encrypted, and removes the row in the same transaction.
CREATE TABLE carp_open_sessions (
    agent_key text PRIMARY KEY,
    open      bigint NOT NULL CHECK (open >= 0)
);
INSERT INTO carp_open_sessions (agent_key, open) VALUES ('', 0);
