//! The one integration-test binary of `cra-carp`.

mod store;
