//! Integration tests of the worker: real PostgreSQL, real HTTP to the fake
//! LLM server (OpenAI and Anthropic modes), real MCP server processes (the
//! testkit's `mcp-fixture`), real LISTEN/NOTIFY. One binary, modules by
//! concern.

mod anthropic;
mod approval;
mod archive;
mod budgets;
mod common;
mod compaction;
mod files;
mod files_sweep;
mod mcp;
mod plan_mode;
mod replicas;
mod scheduling;
mod subagents;
mod titles;
mod turns;
mod web_search;
mod workspace;
