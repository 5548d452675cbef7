-- The atlas catalog (specs/deployment.md, "Atlases"): the one source of truth for the atlases in
-- force on every replica sharing the schema. An atlas's files are stored once, by digest, and
-- never change; each change of the set in force (an install, a replacement, a removal, a start
-- that loads directory atlases) is a new generation naming its members. Generations are dense
-- and only ever added, so "the next generation" is a compare-and-set: a change built on a
-- generation that is no longer the newest fails its insert and is built again on the newest.
CREATE TABLE atlas_contents (
    digest    text PRIMARY KEY,
    atlas_id  text NOT NULL,
    version   text NOT NULL,
    files     bytea NOT NULL,
    stored_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE atlas_generations (
    generation   bigint PRIMARY KEY CHECK (generation > 0),
    -- [{"atlas_id": ..., "version": ..., "digest": ...}, ...], ascending by atlas_id; every
    -- digest is in atlas_contents.
    members      jsonb NOT NULL,
    actor        text NOT NULL,
    reason       text NOT NULL,
    -- Whether the change is in the operator audit chain: set once its events are appended; a
    -- start records the changes a crash left unrecorded (crates/cra-runtime, atlases/catalog.rs).
    recorded     boolean NOT NULL,
    committed_at timestamptz NOT NULL DEFAULT now()
);
