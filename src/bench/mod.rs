//! `endless bench ...`: every benchmark, one file each, and the A/B harness
//! ([`baseline`]) that measures any of them against another `endless`
//! binary in alternating rounds.
//!
//! Owns measuring and printing the figures; sits above both front ends (the
//! TUI bench renders the TUI's own views) and the use cases it times, and
//! is reached only from the binary (`src/main.rs`): nothing below names it.
//! It changes no behaviour of what it measures.

pub mod audit;
pub mod baseline;
pub mod images;
pub mod import;
pub mod lora;
pub mod output;
pub mod ppo;
pub mod rollout;
pub mod sample;
pub mod sampling;
pub mod sandbox;
pub mod serve;
pub mod serve_memory;
pub mod shards;
pub mod tui;
pub mod tui_baseline;
pub mod verifier_envs;
pub mod verify;

use std::process::ExitCode;

use anyhow::Result;

use crate::cli::{BenchArgs, BenchTarget};
use crate::workbench::Context;
use output::print_report;

/// `endless bench ...`: run the benchmark `args` names and print its table
/// (or JSON); with `--baseline`, run it against the other binary instead.
pub fn run(ctx: &Context, args: BenchArgs) -> Result<ExitCode> {
    if let Some(other) = &args.baseline {
        let rounds = args.rounds.unwrap_or(baseline::ROUNDS);
        return match args.what {
            BenchTarget::Tui => tui_baseline::run_cli(other, args.n, rounds, args.json),
            what => {
                if args.dump.is_some() {
                    anyhow::bail!(
                        "--baseline with --dump: the dump is for the comparison with PyTorch or llama.cpp (scripts/), not with another binary"
                    );
                }
                baseline::run_cli(what, other, rounds, args.json)
            }
        };
    }
    match args.what {
        BenchTarget::Import => {
            print_report(&import::bench_import(args.n.unwrap_or(2000))?, args.json)?;
        }
        BenchTarget::Sandbox => {
            let cache = ctx.paths.cache_dir.join("sandbox");
            print_report(&sandbox::bench(args.n.unwrap_or(200), &cache), args.json)?;
        }
        BenchTarget::Tui => return tui::run_cli(args.n, args.json),
        BenchTarget::Ppo => {
            let report = ppo::bench_ppo(
                args.size,
                args.warmup,
                args.n.unwrap_or(5),
                args.dump.as_deref(),
            )?;
            print_report(&report, args.json)?;
        }
        BenchTarget::Lora => {
            let report = lora::bench_lora(args.size, args.rank, args.n.unwrap_or(3))?;
            print_report(&report, args.json)?;
        }
        BenchTarget::Serve => {
            let episodes = args.episodes.or(args.n).unwrap_or(args.clients * 2);
            print_report(&serve::run(ctx, args.clients, episodes)?, args.json)?;
        }
        BenchTarget::Sample => {
            let report = sample::run(
                ctx,
                args.n.unwrap_or(128),
                args.model,
                args.check,
                args.dump.as_deref(),
            )?;
            print_report(&report, args.json)?;
        }
        BenchTarget::Images => print_report(&images::run(args.n.unwrap_or(5))?, args.json)?,
        BenchTarget::Shards => return shards::run(ctx, args.n, args.json),
        BenchTarget::Audit => return audit::run(ctx, args.n, args.json),
        BenchTarget::Verify => return verify::run(ctx, args.n, args.json),
        BenchTarget::Rollout => return rollout::run(ctx, args.n, args.json),
    }
    Ok(ExitCode::SUCCESS)
}
