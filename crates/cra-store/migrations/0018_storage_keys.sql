-- The storage keys that encrypted this deployment's records (`crates/cra-store/src/encryption.rs`):
-- each key's id and a canary encrypted with it. Every replica checks them when it starts, so a
-- replica missing a key, or given a wrong one, refuses to start instead of failing requests.
-- Empty while records are stored as plaintext.
CREATE TABLE storage_keys (
    key_id text  PRIMARY KEY,
    canary bytea NOT NULL
);
