//! Test-only helpers shared by the integration tests of every chatd crate.
//!
//! [`TestDatabase`] gives each test its own PostgreSQL database, created from
//! a migrated template so that tests never share state and never pay for
//! running migrations more than once per schema version.

mod database;

pub use database::{TestDatabase, admin_url};
