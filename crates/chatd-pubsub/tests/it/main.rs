//! Integration tests of `chatd-pubsub`: one binary, one module per concept.
//!
//! The PostgreSQL tests each get a fresh database from `chatd-testkit`
//! (server from `CHATD_TEST_DATABASE_URL`, `DATABASE_URL`, or
//! `postgres://postgres@127.0.0.1:5432/postgres`).

mod buffer;
mod channels;
mod memory;
mod postgres;
mod support;
