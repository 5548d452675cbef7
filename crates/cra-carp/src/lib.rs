//! `cra-carp`: CARP/1.0 request and resolution types, request validation, pure policy
//! evaluation (deny > require_approval > rate_limit > budget > allow > default deny) with
//! explanations, and execute authorisation. No I/O: session and resolution state come through the
//! storage trait defined here.
