-- CARP state. Records are kept as their JSON (text); the columns beside them are what queries
-- and constraints need.
CREATE TABLE carp_sessions (
    session_id text PRIMARY KEY,
    body       text NOT NULL
);

CREATE TABLE carp_request_ids (
    session_id text NOT NULL,
    request_id text NOT NULL,
    PRIMARY KEY (session_id, request_id)
);

CREATE TABLE carp_resolutions (
    resolution_id text PRIMARY KEY,
    session_id    text NOT NULL,
    body          text NOT NULL
);

-- NULL keys never conflict, so executions without an idempotency key are always stored.
CREATE TABLE carp_executions (
    execution_id    text PRIMARY KEY,
    session_id      text NOT NULL,
    idempotency_key text,
    body            text NOT NULL,
    UNIQUE (session_id, idempotency_key)
);

-- One row per (policy, scope): the lock every try_consume takes (in key order) and the budget
-- spent so far.
CREATE TABLE carp_counters (
    policy_id text   NOT NULL,
    scope_key text   NOT NULL,
    spent     bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (policy_id, scope_key)
);

-- Executions counted by rate limits: how many at each instant (Unix microseconds).
CREATE TABLE carp_rate_events (
    policy_id text   NOT NULL,
    scope_key text   NOT NULL,
    at_us     bigint NOT NULL,
    n         bigint NOT NULL,
    PRIMARY KEY (policy_id, scope_key, at_us)
);

CREATE TABLE carp_approvals (
    approval_id text PRIMARY KEY,
    session_id  text NOT NULL,
    status      text NOT NULL,
    body        text NOT NULL
);
CREATE INDEX carp_approvals_pending ON carp_approvals (approval_id) WHERE status = 'pending';
