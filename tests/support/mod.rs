//! Shared test support: a fixture OpenAI-compatible server and a plain
//! `bash` terminal/sandbox for tests that need no real sandbox.
#![allow(dead_code)]

pub mod bash_terminal;
pub mod cli;
pub mod fixture_llm;
pub mod nobody;
pub mod registry;
pub mod served;
pub mod verifier;
