//! Integration tests of the worker: real PostgreSQL, real HTTP to the fake
//! LLM server (OpenAI and Anthropic modes), real MCP server processes (the
//! testkit's `mcp-fixture`), real LISTEN/NOTIFY. One binary, modules by
//! concern.

mod anthropic;
mod approval;
mod archive;
mod common;
mod compaction;
mod files;
mod mcp;
mod plan_mode;
mod replicas;
mod subagents;
mod titles;
mod turns;
