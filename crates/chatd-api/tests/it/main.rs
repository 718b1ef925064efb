//! Integration tests of chatd-api: the real router served over HTTP on an
//! ephemeral port, against a fresh PostgreSQL database per test. One test
//! binary; modules by concern.

mod admin;
mod approval;
mod auth;
mod bad_input;
mod branches;
mod chats;
mod common;
mod export;
mod files;
mod idempotency;
mod isolation;
mod messages;
mod ops;
mod rate_limit;
mod search;
mod secrets;
mod sessions;
mod shares;
mod stream;
mod stream_support;
mod tokens;
mod transitions;
mod usage;
mod users;
mod web;
mod windows;
mod workspaces;
