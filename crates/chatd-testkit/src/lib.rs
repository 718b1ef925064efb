//! Test-only helpers shared by the integration tests of every chatd crate.
//!
//! [`TestDatabase`] gives each test its own PostgreSQL database, created from
//! a migrated template so that tests never share state and never pay for
//! running migrations more than once per schema version.
//!
//! [`fake_llm::FakeLlm`] is a scripted OpenAI-compatible streaming server
//! (also available as the `fake-llm` binary for end-to-end tests).

mod database;
pub mod fake_llm;

pub use database::{TestDatabase, admin_url};
pub use fake_llm::{FakeLlm, RecordedRequest, Script, Step};
