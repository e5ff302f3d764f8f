//! Endless Terminals: generate, run, evaluate and train terminal agents on
//! procedurally generated, verifiable tasks.

pub mod fsutil;
pub mod procgen;
pub mod sandbox;
pub mod task;
