//! Integration tests of chatd-llm (one binary): recorded transcripts over
//! HTTP, re-chunking property tests, fuzz tests of the stream decoders, error
//! classification, request building, and round trips against the testkit's
//! fake LLM.

mod anthropic;
mod errors;
mod fake_llm;
mod files;
mod fuzz;
mod projection;
mod rechunk;
mod redirects;
mod request;
mod support;
mod transcripts;
mod web_search;
