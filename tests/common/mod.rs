//! Helpers shared by the integration suites (and the bench), one module a
//! concern; everything is re-exported here, so a suite's `use common::*`
//! sees it all. `cluster` (real clusters and a redirect-following client)
//! is named by the suites that use it.
#![allow(dead_code, unused_imports)]

pub use redis::Value;

pub mod calls;
pub mod cluster;
pub mod contents;
pub mod fixtures;
pub mod invariants;
pub mod keys;
pub mod lua;
pub mod observe;
pub mod random;
pub mod refusals;
pub mod servers;

pub use calls::*;
pub use contents::*;
pub use fixtures::*;
pub use invariants::*;
pub use keys::*;
pub use lua::*;
pub use observe::*;
pub use random::*;
pub use refusals::*;
pub use servers::*;
