//! `cra-store`: the storage backends, redb (embedded, the default) and PostgreSQL, implementing
//! the storage traits the protocol crates define, plus the TRACE collector (atomic, durable,
//! gap-free appends per session).
