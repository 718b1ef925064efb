//! Test-only helpers shared by the integration tests of every chatd crate.
//!
//! [`TestDatabase`] gives each test its own PostgreSQL database, created from
//! a migrated template so that tests never share state and never pay for
//! running migrations more than once per schema version.
//!
//! [`store`] puts a `chatd_store::Store` on such a database
//! ([`store::StoreFixture`], used by the store's doc examples) and drives
//! chats into any execution state through real transitions (the builders the
//! integration tests of chatd-store and chatd-api share).
//!
//! [`fake_llm::FakeLlm`] is a scripted streaming LLM server speaking OpenAI
//! Chat Completions and Anthropic Messages (also available as the `fake-llm`
//! binary for end-to-end tests).
//!
//! [`mcp_fixture`] runs the `mcp-fixture` binary, a tiny MCP server (stdio or
//! streamable HTTP) for tests of the MCP tool host.
//!
//! [`pg_cluster::PgCluster`] is a PostgreSQL cluster of a test's own on a
//! private port, for tests that crash and restart the database.

mod database;
pub mod fake_llm;
pub mod mcp_fixture;
pub mod pg_cluster;
pub mod store;

pub use database::{TestDatabase, admin_url};
pub use fake_llm::{FakeLlm, RecordedRequest, Script, Step};
pub use mcp_fixture::{McpHttpFixture, mcp_fixture_bin};
