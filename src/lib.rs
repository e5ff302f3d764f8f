//! Endless Terminals: generate, run, evaluate and train terminal agents on
//! procedurally generated, verifiable tasks.

pub mod agent;
pub mod eval;
pub mod fsutil;
pub mod llm;
pub mod sandbox;
pub mod task;
