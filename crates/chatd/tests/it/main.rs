//! End-to-end tests of the `chatd` binary: `chatd serve` with the embedded
//! PostgreSQL and with `--postgres-url`, several replicas on one database,
//! `chatd token create` and `chatd user passwd`, and the `chatd chat`
//! client. Every test starts real processes and bounds every wait; see
//! `support.rs`.

mod account_cli;
mod branches_cli;
mod cli;
mod compat;
mod config_file;
mod embedded;
mod local_cli;
mod manage_cli;
mod pg_restart;
mod replicas;
mod secrets;
mod slow_clients;
mod starvation;
mod stream;
mod support;
mod token;
mod worker;
