//! `cra-relay`: Relay (Agentic Protocol v0.1) projects, content-hashed packages, bitemporal
//! facts, sessions, and the seven operations of §8 over the storage trait defined here.
