//! Integration tests of the worker: real PostgreSQL, real HTTP to the fake
//! OpenAI-compatible LLM server, real LISTEN/NOTIFY. One binary, modules by
//! concern.

mod anthropic;
mod common;
mod mcp;
mod replicas;
mod titles;
mod turns;
