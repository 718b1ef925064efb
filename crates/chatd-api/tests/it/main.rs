//! Integration tests of chatd-api: the real router served over HTTP on an
//! ephemeral port, against a fresh PostgreSQL database per test. One test
//! binary; modules by concern.

mod admin;
mod approval;
mod auth;
mod bad_input;
mod chats;
mod common;
mod files;
mod idempotency;
mod isolation;
mod messages;
mod ops;
mod stream;
mod stream_support;
mod transitions;
mod web;
mod windows;
