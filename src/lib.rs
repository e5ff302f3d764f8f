//! Endless Terminals: generate, run, evaluate and train terminal agents on
//! procedurally generated, verifiable tasks.

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod agent;
pub mod allocator;
pub mod audit;
pub mod bench;
pub mod cli;
pub mod commands;
pub mod config;
pub mod eval;
pub mod fsutil;
pub mod generate;
pub mod images;
pub mod jobs;
pub mod llm;
pub mod logging;
pub mod model;
pub mod plural;
pub mod procgen;
pub mod rl;
pub mod sandbox;
pub mod serve;
pub mod store;
pub mod task;
pub mod tui;
pub mod verify;
pub mod workbench;
