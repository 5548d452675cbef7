//! `cra-atlas`: the Atlas/1.0 package format.
//!
//! * [`model`]: manifest, capability, context pack, policy and action types (unknown fields kept).

pub mod model;

pub use model::{
    Action, Capability, Conditions, ContextPack, Manifest, Policy, PolicyType, RiskTier, TimeWindow,
};
