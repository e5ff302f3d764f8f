//! A policy whose conversation outgrows its context window: the episode ends
//! as `context_exhausted` (a failure of the agent, labelled and scored), the
//! recorded token stream stays within the window, and the PPO step on it
//! succeeds (it used to fail with "exceeds the rope table").

#![allow(clippy::unwrap_used)] // tests and benches fail loudly

mod support;

use std::sync::Arc;
use std::time::Duration;

use candle_core::Device;
use endless::agent::protocol::Protocol;
use endless::agent::{EndReason, FailureMode};
use endless::model::SamplingConfig;
use endless::rl::collect::{collect_rollouts, EpisodeSettings};
use endless::rl::init::{tiny_policy_config, tiny_tokenizer};
use endless::rl::{Policy, RewardMode, TrainConfig, Trainer};
use support::bash_terminal::{hello_task, BashProvider};

/// Tokens each reply may have.
const REPLY: usize = 8;

#[test]
fn a_full_context_ends_the_episode_and_ppo_still_trains_on_it() {
    let task = hello_task("ctx-1", "files", 1);
    let tok = tiny_tokenizer(std::slice::from_ref(&task)).unwrap();
    let first_prompt = tok
        .encode_chat(&[
            endless::model::TemplateMessage {
                role: "system".into(),
                content: endless::agent::protocol::SYSTEM_PROMPT.into(),
            },
            endless::model::TemplateMessage {
                role: "user".into(),
                content: task.instruction.clone(),
            },
        ])
        .unwrap()
        .len();
    // Room for the first prompt and one reply, not for the observation after it.
    let window = first_prompt + REPLY + 4;
    let mut cfg = tiny_policy_config(tok.tokenizer().get_vocab_size(true));
    cfg.max_position_embeddings = window;
    cfg.eos_token_ids = tok.eos_ids().to_vec();
    let policy = Policy::from_config(&cfg, &Device::Cpu, 7)
        .unwrap()
        .with_tokenizer(tok);
    let model = policy.sampling_model("train").unwrap().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let run = tempfile::tempdir().unwrap();
    let settings = EpisodeSettings {
        samples: 2,
        max_turns: 16,
        concurrency: 2,
        command_timeout: Duration::from_secs(10),
        protocol: Protocol::default(),
    };
    let collected = collect_rollouts(
        &rt,
        Arc::new(BashProvider::default()),
        model,
        &[task],
        &settings,
        SamplingConfig {
            temperature: 1.0,
            top_p: 1.0,
            max_tokens: REPLY,
        },
        1,
        RewardMode::Binary,
        &run.path().join("step-1"),
        None,
        &mut |_, _| {},
    )
    .unwrap();
    assert_eq!(collected.episodes.len(), 2);
    for ep in &collected.episodes {
        assert_eq!(ep.end_reason, EndReason::ContextExhausted, "{ep:?}");
        assert_eq!(ep.turns, 1, "{ep:?}");
        // Its own label (the random policy's one reply is also malformed,
        // which takes precedence as the primary mode).
        assert!(ep.failure_mode.is_some());
        assert!(
            ep.failure_labels.contains(&FailureMode::ContextExhausted),
            "{:?}",
            ep.failure_labels
        );
        assert!(ep.end_reason.is_scored());
    }
    assert_eq!(collected.batch.sequences.len(), 2);
    for s in &collected.batch.sequences {
        assert!(s.tokens.len() <= window, "{} > {window}", s.tokens.len());
    }
    let mut trainer = Trainer::new(policy, TrainConfig::default());
    let m = trainer.ppo_step(&collected.batch).unwrap();
    assert_eq!(m.step, 1);
    assert!(m.policy_loss.is_finite());
}
