//! Endless Terminals: generate, run, evaluate and train terminal agents on
//! procedurally generated, verifiable tasks.

pub mod fsutil;
pub mod sandbox;
pub mod store;
pub mod task;
pub mod tui;
