-- The owner index of `GET /v1/traces`: each session's agent beside its record, so an agent's
-- listing reads its own sessions only. Sessions stored before this migration have none until
-- the store fills it in when it starts (`pg::carp::index_session_agents`), in Rust: a record
-- may be encrypted, so SQL cannot read its agent.
ALTER TABLE carp_sessions ADD COLUMN agent_id text;
CREATE INDEX carp_sessions_by_agent ON carp_sessions (agent_id, session_id);
