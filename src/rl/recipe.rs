//! The effective training recipe: every setting that decides what PPO
//! optimises, resolved from `endless train` flags over the `[train]` section of
//! the configuration, shown by `endless train --print-config` and saved in the
//! run's `train.json`. [`RECIPE_TABLE`] puts each setting beside the paper's /
//! reference's value (github.com/kanishkg/endless-terminals,
//! `train/confs/*.yaml`, SkyRL) and says why ours differs where it does.

use super::critic::CriticMode;
use super::ppo::PpoConfig;
use super::reward::RewardMode;
use super::trainer::TrainConfig;
use crate::config::TrainSettings;
use serde::{Deserialize, Serialize};

/// Policy learning rate of `--init tiny` (trained from scratch).
pub const TINY_LR: f64 = 5e-5;
/// Policy learning rate of pretrained policies.
pub const PRETRAINED_LR: f64 = 1e-6;
/// A LoRA run's default learning rates (PPO and warm start) are this many
/// times the full fine-tune's: its few adapter weights start at zero, and
/// LoRA fine-tunes are commonly run at about ten times a full fine-tune's rate.
pub const LORA_LR_FACTOR: f64 = 10.0;
/// Separate-critic learning rate of pretrained policies (the reference's).
pub const PRETRAINED_CRITIC_LR: f64 = 1e-6;
/// Separate-critic learning rate of `--init tiny`.
pub const TINY_CRITIC_LR: f64 = 5e-5;

/// The effective recipe of a training run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recipe {
    /// Samples (episodes) per task per step.
    pub samples: u32,
    /// Tasks (prompts) per PPO step.
    pub prompts_per_step: usize,
    /// Turn limit of a training episode.
    pub max_turns: u32,
    /// Rollout sampling temperature (also the temperature of the trained log-probs).
    pub temperature: f64,
    /// Nucleus-sampling `top_p` of rollouts; always 1.0, as the reference.
    pub top_p: f64,
    /// Tokens per reply at most.
    pub max_tokens: usize,
    /// Optimisation and loss: learning rates, critic, clipping, epochs, reward.
    pub train: TrainConfig,
    /// The agent protocol of the episodes (`endless` or `reference`, and a
    /// system prompt file if one is used; see [`crate::agent::protocol`]).
    #[serde(default = "default_protocol")]
    pub protocol: String,
}

fn default_protocol() -> String {
    "endless".into()
}

/// The flags of `endless train` that override the recipe (`None`: from the
/// configuration's `[train]` section).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RecipeFlags {
    /// `--samples`: episodes per task per step (default: `[train] samples`).
    pub samples: Option<u32>,
    /// `--tasks-per-step`: tasks per PPO step (default: `[train] prompts_per_step`).
    pub prompts_per_step: Option<usize>,
    /// `--max-turns`: turn limit of a training episode (default: `[agent]
    /// train_max_turns`).
    pub max_turns: Option<u32>,
    /// `--temperature`: rollout temperature, above 0 (default: `[train] temperature`).
    pub temperature: Option<f64>,
    /// `--max-tokens`: tokens per reply at most (default: `[train] max_tokens`).
    pub max_tokens: Option<usize>,
    /// `--ppo-epochs`: passes over each batch (default: `[train] ppo_epochs`).
    pub ppo_epochs: Option<usize>,
    /// `--minibatch`: sequences per optimizer update; 0: the whole batch.
    pub minibatch: usize,
    /// `--critic`: `separate` or `shared` (default: `[train] critic`).
    pub critic: Option<String>,
    /// `--lr`: policy learning rate (default: `[train] lr`); 0: by policy.
    pub lr: Option<f64>,
    /// `--critic-lr`: separate critic's learning rate (default: `[train]
    /// critic_lr`); 0: by policy.
    pub critic_lr: Option<f64>,
    /// `--value-clip`: value clipping, 0 = off (default: `[train] value_clip`).
    pub value_clip: Option<f64>,
    /// `--weight-decay`: AdamW weight decay (default: `[train] weight_decay`).
    pub weight_decay: Option<f64>,
    /// `--normalize-reward` (default: `[train] normalize_reward`).
    pub normalize_reward: Option<bool>,
    /// `--kl-coef`: weight of the KL penalty to the policy PPO starts from
    /// (default: `[train] kl_coef`, 0: none).
    pub kl_coef: Option<f64>,
    /// `--reward`: `binary`, `partial` or `clean`.
    pub reward: String,
    /// `--seed`: seed of initialisation, task order and sampling.
    pub seed: u64,
}

impl Recipe {
    /// Resolve `flags` over the configured defaults `cfg` (whose `lr` and
    /// `critic_lr` of 0 mean: by policy, [`TINY_LR`] / [`TINY_CRITIC_LR`]
    /// for a `tiny` policy trained from scratch, the reference's otherwise);
    /// `agent_train_max_turns` is `[agent] train_max_turns`. Errors name the
    /// flag (or key) and what was expected.
    pub fn resolve(
        cfg: &TrainSettings,
        agent_train_max_turns: u32,
        flags: &RecipeFlags,
        tiny: bool,
    ) -> Result<Self, String> {
        let reward = match flags.reward.as_str() {
            "binary" => RewardMode::Binary,
            "partial" => RewardMode::Partial,
            "clean" => RewardMode::Clean,
            other => {
                return Err(format!(
                    "--reward {other:?}: expected binary, partial or clean"
                ))
            }
        };
        let critic_name = flags.critic.as_deref().unwrap_or(&cfg.critic);
        let critic = CriticMode::parse(critic_name)
            .map_err(|e| format!("--critic (or train.critic) {e}"))?;
        let samples = flags.samples.unwrap_or(cfg.samples);
        let max_turns = flags.max_turns.unwrap_or(agent_train_max_turns);
        let max_tokens = flags.max_tokens.unwrap_or(cfg.max_tokens);
        if samples == 0 || max_turns == 0 || max_tokens == 0 {
            return Err("--samples, --max-turns and --max-tokens must be at least 1".into());
        }
        let temperature = flags.temperature.unwrap_or(cfg.temperature);
        if temperature.is_nan() || temperature <= 0.0 {
            return Err(
                "--temperature must be above 0 for PPO (its log-probs are of the sampled distribution)"
                    .into(),
            );
        }
        let nonneg = |name: &str, v: f64| -> Result<f64, String> {
            if v.is_finite() && v >= 0.0 {
                Ok(v)
            } else {
                Err(format!("--{name} must be a number of at least 0, got {v}"))
            }
        };
        let by_policy = |v: f64, tiny_v: f64, pretrained_v: f64| match (v, tiny) {
            (v, _) if v > 0.0 => v,
            (_, true) => tiny_v,
            (_, false) => pretrained_v,
        };
        let lr = nonneg("lr", flags.lr.unwrap_or(cfg.lr))?;
        let critic_lr = nonneg("critic-lr", flags.critic_lr.unwrap_or(cfg.critic_lr))?;
        let base = TrainConfig::default();
        let train = TrainConfig {
            lr: by_policy(lr, TINY_LR, PRETRAINED_LR),
            critic_lr: by_policy(critic_lr, TINY_CRITIC_LR, PRETRAINED_CRITIC_LR),
            critic,
            reward,
            seed: flags.seed,
            ppo: PpoConfig {
                temperature,
                value_clip: nonneg("value-clip", flags.value_clip.unwrap_or(cfg.value_clip))?,
                kl_coef: nonneg("kl-coef", flags.kl_coef.unwrap_or(cfg.kl_coef))?,
                ..PpoConfig::default()
            },
            adam: super::adamw::AdamWConfig {
                weight_decay: nonneg(
                    "weight-decay",
                    flags.weight_decay.unwrap_or(cfg.weight_decay),
                )?,
                ..base.adam
            },
            ppo_epochs: flags.ppo_epochs.unwrap_or(cfg.ppo_epochs).max(1),
            minibatch: flags.minibatch,
            normalize_reward: flags.normalize_reward.unwrap_or(cfg.normalize_reward),
            ..base
        };
        Ok(Self {
            samples,
            prompts_per_step: flags
                .prompts_per_step
                .unwrap_or(cfg.prompts_per_step)
                .max(1),
            max_turns,
            temperature,
            top_p: 1.0,
            max_tokens,
            train,
            protocol: default_protocol(),
        })
    }

    /// Our value of a setting of [`RECIPE_TABLE`], as text.
    pub fn value_of(&self, setting: &str) -> String {
        let t = &self.train;
        match setting {
            "critic" => t.critic.as_str().into(),
            "lr" => format!("{:e}", t.lr),
            "critic_lr" => match t.critic {
                CriticMode::Separate => format!("{:e}", t.critic_lr),
                CriticMode::Shared => format!("- (shared; value_coef {})", t.ppo.value_coef),
            },
            "value_clip" => format!("{}", t.ppo.value_clip),
            "weight_decay" => format!("{}", t.adam.weight_decay),
            "ppo_epochs" => t.ppo_epochs.to_string(),
            "minibatch" => match t.minibatch {
                0 => "whole batch".into(),
                m => m.to_string(),
            },
            "prompts_per_step" => self.prompts_per_step.to_string(),
            "samples" => self.samples.to_string(),
            "temperature" => format!("{}", self.temperature),
            "top_p" => format!("{}", self.top_p),
            "max_tokens" => self.max_tokens.to_string(),
            "max_turns" => self.max_turns.to_string(),
            "normalize_reward" if t.normalize_reward => "on (batch mean/std)".into(),
            "normalize_reward" => "off".into(),
            "reward" => format!("{:?}", t.reward).to_lowercase(),
            "clip" => format!("{} / {}", t.ppo.eps_low, t.ppo.eps_high),
            "dual_clip" => "none".into(),
            "loss_reduction" => "sequence mean".into(),
            "kl" if t.ppo.kl_coef > 0.0 => {
                format!("k3 to the PPO start, coef {}", t.ppo.kl_coef)
            }
            "kl" => "none".into(),
            "gae" => format!("gamma {} lambda {}", t.ppo.gamma, t.ppo.lambda),
            "warmup_steps" => t.warmup_steps.to_string(),
            "max_grad_norm" => format!("{}", t.max_grad_norm),
            "entropy_coef" => format!("{}", t.ppo.entropy_coef),
            "protocol" => self.protocol.clone(),
            _ => "?".into(),
        }
    }

    /// Every row of [`RECIPE_TABLE`] with our value.
    pub fn rows(&self) -> Vec<RecipeRow> {
        RECIPE_TABLE
            .iter()
            .map(|(setting, reference, why)| RecipeRow {
                setting: (*setting).into(),
                ours: self.value_of(setting),
                reference: (*reference).into(),
                why: (*why).into(),
            })
            .collect()
    }

    /// The recipe as an aligned text table (`endless train --print-config`).
    pub fn text(&self) -> String {
        let rows = self.rows();
        let w0 = rows
            .iter()
            .map(|r| r.setting.len())
            .max()
            .unwrap_or(0)
            .max(7);
        let w1 = rows.iter().map(|r| r.ours.len()).max().unwrap_or(0).max(4);
        let w2 = rows
            .iter()
            .map(|r| r.reference.len())
            .max()
            .unwrap_or(0)
            .max(9);
        let mut out = format!(
            "{:w0$}  {:w1$}  {:w2$}  why it differs\n",
            "setting", "ours", "reference"
        );
        for r in rows {
            let why = if r.why.is_empty() { "same" } else { &r.why };
            out.push_str(&format!(
                "{:w0$}  {:w1$}  {:w2$}  {why}\n",
                r.setting, r.ours, r.reference
            ));
        }
        out
    }
}

/// One row of the recipe table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecipeRow {
    /// The setting's name, as in `[train]` or the flags.
    pub setting: String,
    /// Our effective value.
    pub ours: String,
    /// The paper's / reference implementation's value.
    pub reference: String,
    /// Empty where ours is the reference's.
    pub why: String,
}

/// `(setting, the paper's / reference's value, why ours differs)`; `why` is
/// empty where the default is the reference's. docs/training.md's recipe table says
/// the same.
pub const RECIPE_TABLE: &[(&str, &str, &str)] = &[
    ("critic", "separate", ""),
    (
        "lr",
        "5e-7 (Llama-3.2-3B)",
        "1e-6 for pretrained policies (CPU runs are a few hundred steps); 5e-5 for tiny, trained from scratch",
    ),
    (
        "critic_lr",
        "1e-6",
        "1e-6 for pretrained policies; 5e-5 for tiny, whose value head starts at zero and would not move at 1e-6 in a CPU run",
    ),
    ("value_clip", "0.2", ""),
    ("weight_decay", "0.01", ""),
    ("ppo_epochs", "2", ""),
    ("minibatch", "whole batch", ""),
    (
        "prompts_per_step",
        "16",
        "16 x 16 = 256 episodes per step is hours per step on a CPU; one task's 16 samples keeps a step to minutes",
    ),
    ("samples", "16", ""),
    ("temperature", "0.7 (0.6 for Qwen3)", ""),
    ("top_p", "1.0", ""),
    (
        "max_tokens",
        "2048",
        "replies are a short think and one command; CPU sampling cost grows with every token, and the tiny policy's whole context is 2048 tokens",
    ),
    ("max_turns", "16", ""),
    (
        "normalize_reward",
        "on",
        "",
    ),
    ("reward", "binary", ""),
    ("clip", "0.2 / 0.28", ""),
    (
        "dual_clip",
        "clip_ratio_c 3.0",
        "not implemented: bounds the loss of negative-advantage tokens whose ratio exceeds 3, rare at 2 epochs per batch",
    ),
    ("loss_reduction", "sequence mean", ""),
    ("kl", "none", ""),
    ("gae", "gamma 1 lambda 1", ""),
    ("warmup_steps", "10", ""),
    ("max_grad_norm", "1", ""),
    ("entropy_coef", "0", ""),
    (
        "protocol",
        "reference",
        "ours by default (done after the command runs, real exit codes); `--protocol reference` trains under the reference's switches",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> TrainSettings {
        crate::config::Config::load_with_env(std::path::Path::new("/nonexistent"), None, &[])
            .unwrap()
            .train
    }

    fn flags() -> RecipeFlags {
        RecipeFlags {
            reward: "binary".into(),
            ..RecipeFlags::default()
        }
    }

    #[test]
    fn defaults_are_the_reference_recipe_where_it_fits_a_cpu() {
        let r = Recipe::resolve(&defaults(), 16, &flags(), false).unwrap();
        assert_eq!(r.train.critic, CriticMode::Separate);
        assert_eq!(r.train.critic_lr, 1e-6);
        assert_eq!(r.train.ppo.value_clip, 0.2);
        assert_eq!(r.train.adam.weight_decay, 0.01);
        assert_eq!(r.train.ppo_epochs, 2);
        assert_eq!(r.temperature, 0.7);
        assert_eq!(r.train.ppo.temperature, 0.7);
        assert!(r.train.normalize_reward);
        assert_eq!((r.samples, r.max_turns), (16, 16));
        assert_eq!(r.prompts_per_step, 1);
        assert_eq!(r.max_tokens, 256);
        assert_eq!(r.train.lr, 1e-6);
        // tiny: learning rates by policy.
        let t = Recipe::resolve(&defaults(), 16, &flags(), true).unwrap();
        assert_eq!((t.train.lr, t.train.critic_lr), (TINY_LR, TINY_CRITIC_LR));
        // Every row where ours differs says why; the rest are the same.
        for row in r.rows() {
            assert_ne!(row.ours, "?", "{row:?}");
        }
        assert!(r.text().contains("prompts_per_step"));
    }

    #[test]
    fn flags_override_the_configuration_and_bad_values_are_named() {
        let f = RecipeFlags {
            critic: Some("shared".into()),
            ppo_epochs: Some(3),
            value_clip: Some(0.0),
            weight_decay: Some(0.0),
            normalize_reward: Some(false),
            temperature: Some(1.0),
            prompts_per_step: Some(4),
            critic_lr: Some(3e-6),
            kl_coef: Some(0.25),
            ..flags()
        };
        let r = Recipe::resolve(&defaults(), 16, &f, false).unwrap();
        assert_eq!(r.train.ppo.kl_coef, 0.25);
        assert_eq!(r.value_of("kl"), "k3 to the PPO start, coef 0.25");
        assert_eq!(
            Recipe::resolve(&defaults(), 16, &flags(), false)
                .unwrap()
                .value_of("kl"),
            "none"
        );
        assert_eq!(r.train.critic, CriticMode::Shared);
        assert_eq!(r.train.ppo_epochs, 3);
        assert_eq!(r.train.ppo.value_clip, 0.0);
        assert!(!r.train.normalize_reward);
        assert_eq!(r.prompts_per_step, 4);
        assert_eq!(r.train.critic_lr, 3e-6);
        let bad = |f: RecipeFlags, what: &str| {
            let e = Recipe::resolve(&defaults(), 16, &f, false).unwrap_err();
            assert!(e.contains(what), "{e}");
        };
        bad(
            RecipeFlags {
                critic: Some("both".into()),
                ..flags()
            },
            "--critic",
        );
        bad(
            RecipeFlags {
                value_clip: Some(-1.0),
                ..flags()
            },
            "--value-clip",
        );
        bad(
            RecipeFlags {
                kl_coef: Some(f64::NAN),
                ..flags()
            },
            "--kl-coef",
        );
        bad(
            RecipeFlags {
                temperature: Some(0.0),
                ..flags()
            },
            "--temperature",
        );
        bad(
            RecipeFlags {
                reward: "x".into(),
                ..flags()
            },
            "--reward",
        );
    }
}
