-- Relay (issue 6): projects, content-hashed packages with their search chunks, review records,
-- bitemporal facts and sessions. Bodies are JSON text (numbers keep their exact text).
CREATE TABLE relay_projects (
    project_id text PRIMARY KEY,
    body       text NOT NULL
);
CREATE TABLE relay_packages (
    package_id   text PRIMARY KEY,
    project_id   text   NOT NULL,
    seq          bigserial NOT NULL UNIQUE,
    content_hash text   NOT NULL,
    quarantined  text,
    body         text   NOT NULL
);
CREATE INDEX relay_packages_project_seq ON relay_packages (project_id, seq);
CREATE TABLE relay_chunks (
    package_id text NOT NULL REFERENCES relay_packages (package_id),
    project_id text NOT NULL,
    ord        integer NOT NULL,
    field      text NOT NULL,
    chunk      text NOT NULL,
    tsv        tsvector GENERATED ALWAYS AS (to_tsvector('english', chunk)) STORED,
    PRIMARY KEY (package_id, ord)
);
CREATE INDEX relay_chunks_tsv ON relay_chunks USING gin (tsv);
CREATE INDEX relay_chunks_project ON relay_chunks (project_id);
CREATE TABLE relay_reviews (
    id         bigserial PRIMARY KEY,
    package_id text NOT NULL,
    body       text NOT NULL
);
CREATE INDEX relay_reviews_package ON relay_reviews (package_id, id);
CREATE TABLE relay_facts (
    fact_id    text PRIMARY KEY,
    project_id text    NOT NULL,
    subject    text    NOT NULL,
    predicate  text    NOT NULL,
    is_current boolean NOT NULL,
    body       text    NOT NULL
);
-- At most one current fact per (project, subject, predicate), whatever the application does.
CREATE UNIQUE INDEX relay_facts_one_current ON relay_facts (project_id, subject, predicate)
    WHERE is_current;
CREATE INDEX relay_facts_key ON relay_facts (project_id, subject, predicate);
CREATE TABLE relay_sessions (
    session_id text PRIMARY KEY,
    project_id text NOT NULL,
    body       text NOT NULL
);
