//! Integration tests of chatd-store against a real PostgreSQL (one fresh
//! database per test). One test binary for the crate; modules by concern.

mod approval;
mod boundary;
mod branches;
mod common;
mod concurrency;
mod matrix;
mod model;
mod publication;
mod queue;
mod scheduling;
mod secrets;
mod transitions;
mod triggers;
mod usage;
mod windows;
