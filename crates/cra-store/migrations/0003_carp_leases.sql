-- Executions running: the lease of the server instance (owner) that runs each, taken before the
-- executor runs and removed once its outcome is recorded. A lease left by a crash is closed by
-- the same owner when it starts again. The unique key claims an idempotency key for one
-- execution at a time (NULL keys never conflict).
CREATE TABLE carp_execution_leases (
    execution_id    text PRIMARY KEY,
    owner           text NOT NULL,
    session_id      text NOT NULL,
    idempotency_key text,
    body            text NOT NULL,
    UNIQUE (session_id, idempotency_key)
);
CREATE INDEX carp_execution_leases_owner ON carp_execution_leases (owner);
