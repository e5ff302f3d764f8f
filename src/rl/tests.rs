//! Tests of the PPO pieces on tiny models (debug-build friendly).

use super::ppo::{advantages, ppo_loss, prepare, select_agent_positions};
use super::*;
use crate::model::generation::sampling::{Sampler, SamplingConfig};
use crate::model::models::tiny::{reinit_seeded, tiny_config};
use crate::model::{Arch, LocalModel, Transformer};
use candle_core::{DType, Device, Module, Tensor, D};
use candle_nn::{Init, Linear, VarBuilder, VarMap};

fn seq(tokens: Vec<u32>, agent_from: usize, old: f32, reward: f32) -> RolloutSequence {
    let n = tokens.len();
    RolloutSequence {
        agent_mask: (0..n).map(|i| i >= agent_from).collect(),
        old_logprobs: vec![old; n],
        tokens,
        reward,
        passed: reward >= 1.0,
    }
}

/// The PPO loss's analytic gradient matches central finite differences (f64).
#[test]
fn ppo_loss_gradient_matches_finite_differences() {
    let dev = Device::Cpu;
    let mut cfg = tiny_config(Arch::Qwen2, 300);
    cfg.hidden_size = 16;
    cfg.intermediate_size = 24;
    cfg.head_dim = 4;
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F64, &dev);
    let model = Transformer::new(&cfg, vb.clone()).unwrap();
    let vh = Linear::new(
        vb.get_with_hints((1, 16), "value_head.weight", Init::Const(0.0))
            .unwrap(),
        Some(
            vb.get_with_hints(1, "value_head.bias", Init::Const(0.0))
                .unwrap(),
        ),
    );
    reinit_seeded(&varmap, 3, 0.5).unwrap();
    // Mixed masks: prompt, agent tokens, an observation, more agent tokens.
    let mut s0 = seq(vec![5, 17, 40, 99, 3, 250, 7], 3, 0.0, 1.0);
    s0.agent_mask[4] = false;
    let s1 = seq(vec![8, 8, 120, 61], 2, 0.0, 0.0);
    let mut batch = RolloutBatch {
        sequences: vec![s0, s1],
    };
    let loss_of = |batch: &RolloutBatch, adv: Option<(&Tensor, &Tensor)>| {
        let prep = prepare(batch, &dev).unwrap();
        let h = model.hidden_states(&prep.inputs).unwrap();
        let h = select_agent_positions(&prep, &h).unwrap();
        let logits = model.logits(&h).unwrap();
        let values = vh.forward(&h).unwrap().squeeze(D::Minus1).unwrap();
        let (a, r) = match adv {
            Some((a, r)) => (a.clone(), r.clone()),
            None => advantages(&prep, &values, 1.0, 1.0).unwrap(),
        };
        let out = ppo_loss(&prep, &logits, &values, &a, &r, None, &PpoConfig::default()).unwrap();
        (out, logits, a, r)
    };
    // Old log-probs: current ones shifted so that every other agent token is
    // clipped (ratio e^0.6 > 1.28 where A > 0, e^-0.6 < 0.8 where A < 0) and
    // the rest are not (ratio e^-0.1).
    let (_, logits, adv0, _) = loss_of(&batch, None);
    let lp = candle_nn::ops::log_softmax(&logits, D::Minus1).unwrap();
    let lp: Vec<Vec<f64>> = lp.to_vec2().unwrap();
    let adv0: Vec<f32> = adv0.to_vec1().unwrap();
    let mut k = 0;
    for s in batch.sequences.iter_mut() {
        for j in 1..s.tokens.len() {
            if !s.agent_mask[j] {
                continue;
            }
            let shift = if k % 2 == 1 {
                0.1
            } else if adv0[k] > 0.0 {
                -0.6
            } else {
                0.6
            };
            s.old_logprobs[j] = (lp[k][s.tokens[j] as usize] + shift) as f32;
            k += 1;
        }
    }
    let (out, _, adv, ret) = loss_of(&batch, None);
    assert!(
        out.clip_frac > 0.0 && out.clip_frac < 1.0,
        "clip_frac {} adv {} seqs {:?}",
        out.clip_frac,
        adv,
        batch.sequences
    );
    let grads = out.loss.backward().unwrap();
    let fixed = Some((&adv, &ret));
    let vars: Vec<(String, candle_core::Var)> = {
        let d = varmap.data().lock().unwrap();
        let mut v: Vec<_> = d.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    };
    let mut checked = 0;
    for (name, var) in vars.iter().step_by(3) {
        let g: Vec<f64> = grads
            .get(var.as_tensor())
            .unwrap_or_else(|| panic!("no grad for {name}"))
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        // The element with the largest gradient, and the first one.
        let big = (0..g.len())
            .max_by(|&a, &b| g[a].abs().total_cmp(&g[b].abs()))
            .unwrap();
        for k in [big, 0] {
            let orig: Vec<f64> = var.as_tensor().flatten_all().unwrap().to_vec1().unwrap();
            let eps = 1e-5;
            let eval = |delta: f64| {
                let mut w = orig.clone();
                w[k] += delta;
                var.set(&Tensor::from_vec(w, var.shape(), &dev).unwrap())
                    .unwrap();
                let (o, ..) = loss_of(&batch, fixed);
                o.loss.to_scalar::<f64>().unwrap()
            };
            let fd = (eval(eps) - eval(-eps)) / (2.0 * eps);
            var.set(&Tensor::from_vec(orig, var.shape(), &dev).unwrap())
                .unwrap();
            let err = (fd - g[k]).abs() / (fd.abs().max(g[k].abs()).max(1e-4));
            assert!(
                err < 1e-3,
                "{name}[{k}]: analytic {} vs finite difference {fd}",
                g[k]
            );
            checked += 1;
        }
    }
    assert!(checked >= 10);
    // Only agent tokens count: changing a non-agent token's old log-prob changes nothing.
    let before = loss_of(&batch, fixed).0.loss.to_scalar::<f64>().unwrap();
    batch.sequences[0].old_logprobs[4] = -30.0;
    batch.sequences[0].old_logprobs[1] = -30.0;
    let after = loss_of(&batch, fixed).0.loss.to_scalar::<f64>().unwrap();
    assert_eq!(before, after);
}

const MAGIC_MOD: u32 = 10;
fn magic(t: u32) -> bool {
    t % MAGIC_MOD == 7
}

/// Sample `n` two-token replies to a fixed prompt with the current policy;
/// reward = fraction of magic tokens (chance is about 0.1).
fn bandit_batch(trainer: &mut Trainer, n: usize) -> RolloutBatch {
    use rand::Rng;
    let prompt = [1u32, 40, 41, 42];
    let tok = crate::model::models::tiny::train_tokenizer(["a b"].iter(), 260).unwrap();
    let tok = crate::model::ChatTokenizer::new(tok, None, "", "", &[]).unwrap();
    let mut lm = LocalModel::from_parts(trainer.policy().model().clone(), tok, "policy");
    let mut sequences = Vec::new();
    for _ in 0..n {
        let seed = trainer.rng().random::<u64>();
        let mut sampler = Sampler::new(
            SamplingConfig {
                temperature: 1.0,
                top_p: 1.0,
                max_tokens: 2,
            },
            seed,
        );
        let g = lm.generate_ids(&prompt, &mut sampler).unwrap();
        let r = g.token_ids.iter().filter(|t| magic(**t)).count() as f32 / 2.0;
        let mut tokens = prompt.to_vec();
        tokens.extend(&g.token_ids);
        let mut old = vec![0.0; prompt.len()];
        old.extend(&g.logprobs);
        sequences.push(RolloutSequence {
            agent_mask: (0..tokens.len()).map(|i| i >= prompt.len()).collect(),
            tokens,
            old_logprobs: old,
            reward: r,
            passed: r >= 1.0,
        });
    }
    RolloutBatch { sequences }
}

fn bandit_trainer(seed: u64) -> Trainer {
    let policy = Policy::from_config(&tiny_config(Arch::Qwen2, 300), &Device::Cpu, seed).unwrap();
    Trainer::new(
        policy,
        TrainConfig {
            lr: 1e-2,
            critic_lr: 1e-2,
            warmup_steps: 2,
            seed,
            ..Default::default()
        },
    )
}

/// PPO lifts a toy policy's reward from chance (~0.1) to well above it, with
/// the default recipe (separate critic, value clipping, two epochs, reward
/// normalisation, weight decay).
#[test]
fn ppo_learns_to_say_the_magic_tokens() {
    let mut trainer = bandit_trainer(11);
    let dir = tempfile::tempdir().unwrap();
    let log = MetricsLog::new(&dir.path().join("metrics.jsonl"));
    trainer = trainer.with_metrics(log.clone());
    let mut first = None;
    let mut last = Vec::new();
    for step in 0..40 {
        let batch = bandit_batch(&mut trainer, 16);
        let m = trainer.ppo_step(&batch).unwrap();
        if step == 0 {
            first = Some(m.reward);
        }
        if step >= 35 {
            last.push(m.reward);
        }
    }
    let late = last.iter().sum::<f64>() / last.len() as f64;
    assert!(first.unwrap() < 0.3, "start {first:?}");
    assert!(
        late > 0.6,
        "reward after 40 steps: {late} (started at {first:?})"
    );
    let lines = log.read().unwrap();
    assert_eq!(lines.len(), 40);
    assert!(lines
        .iter()
        .all(|m| m.grad_norm.is_finite() && m.tokens_per_s > 0.0));
}

fn weights(t: &Trainer) -> Vec<(String, Vec<f32>)> {
    let mut v: Vec<_> = t
        .policy()
        .vars()
        .into_iter()
        .map(|(n, v)| (n, v.as_tensor().flatten_all().unwrap().to_vec1().unwrap()))
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

fn critic_weights(t: &Trainer) -> Vec<(String, Vec<f32>)> {
    let mut v: Vec<_> = t
        .critic()
        .expect("a separate critic")
        .vars()
        .into_iter()
        .map(|(n, v)| (n, v.as_tensor().flatten_all().unwrap().to_vec1().unwrap()))
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// A batch whose rewards differ (so advantages are not all zero).
fn varied_batch(trainer: &mut Trainer, n: usize) -> RolloutBatch {
    let mut b = bandit_batch(trainer, n);
    for (i, s) in b.sequences.iter_mut().enumerate() {
        s.reward = (i % 2) as f32;
    }
    b
}

/// Every epoch measures its ratio against the log-probs of sampling time:
/// the first pass of a fresh batch sees ratio 1 (KL 0, nothing clipped);
/// a second pass over the same batch, after an update, sees the moved
/// policy against the same old log-probs (KL above 0). Were the old
/// log-probs refreshed per epoch, the second pass would see ratio 1 too.
#[test]
fn epochs_reuse_the_old_log_probs_of_sampling_time() {
    let run = |epochs: usize| {
        let mut t = bandit_trainer(21);
        let mut cfg = t.config().clone();
        cfg.ppo_epochs = epochs;
        cfg.warmup_steps = 0;
        t.set_config(cfg);
        let b = varied_batch(&mut t, 8);
        let before = weights(&t);
        let m = t.ppo_step(&b).unwrap();
        (m, before, weights(&t), t.optimizer().steps())
    };
    let (one, before1, after1, steps1) = run(1);
    assert!(one.approx_kl.abs() < 1e-5, "kl {}", one.approx_kl);
    assert_eq!(one.clip_frac, 0.0);
    assert_eq!(steps1, 1);
    let (two, before2, after2, steps2) = run(2);
    assert_eq!(steps2, 2);
    // Same start, and the first epoch of both is the same update.
    assert_eq!(before1, before2);
    assert_ne!(after1, after2, "the second epoch updated again");
    // Mean KL over the two epochs: the first's is 0, so the second's is twice it.
    assert!(two.approx_kl > 1e-6, "kl {}", two.approx_kl);
}

/// A KL penalty needs a reference; it is 0 while the policy is its
/// reference, grows as the policy moves (the reference is a copy, not the
/// trained weights), and a strong one keeps the policy closer to it.
#[test]
fn kl_penalty_holds_the_policy_near_its_frozen_start() {
    let run = |kl_coef: f64| {
        let mut t = bandit_trainer(31);
        let mut cfg = t.config().clone();
        cfg.ppo_epochs = 1;
        cfg.warmup_steps = 0;
        cfg.ppo.kl_coef = kl_coef;
        t.set_config(cfg);
        let b = varied_batch(&mut t, 8);
        let err = t.ppo_step(&b).unwrap_err().to_string();
        assert!(err.contains("reference"), "{err}");
        let start = t.policy().frozen_model().unwrap();
        t.set_reference(start);
        let first = t.ppo_step(&b).unwrap();
        assert!(first.kl_ref.abs() < 1e-6, "kl {}", first.kl_ref);
        let mut last = first;
        for _ in 0..12 {
            let b = varied_batch(&mut t, 8);
            last = t.ppo_step(&b).unwrap();
        }
        last.kl_ref
    };
    let weak = run(1e-4);
    let strong = run(1.0);
    assert!(weak > 1e-3, "the policy moved from its start: kl {weak}");
    assert!(strong < weak / 2.0, "strong {strong} vs weak {weak}");
}

/// With `critic = separate` the values come from the critic: it gets
/// gradients and updates; the policy's own value head gets none and stays
/// as it was; the critic's trunk is a copy, not shared storage.
#[test]
fn separate_critic_trains_and_the_policy_value_head_is_unused() {
    let mut t = bandit_trainer(31);
    assert_eq!(t.config().critic, CriticMode::Separate);
    // A non-zero policy value head, to see that nothing moves it.
    let head = t
        .policy()
        .vars()
        .into_iter()
        .find(|(n, _)| n == "value_head.weight")
        .unwrap()
        .1;
    head.set(&Tensor::full(0.3f32, head.shape(), &Device::Cpu).unwrap())
        .unwrap();
    let head_before: Vec<f32> = head.as_tensor().flatten_all().unwrap().to_vec1().unwrap();
    let critic_before = critic_weights(&t);
    let policy_before = weights(&t);
    let b = varied_batch(&mut t, 8);
    let m = t.ppo_step(&b).unwrap();
    assert!(m.value_loss > 0.0);
    let head_after: Vec<f32> = head.as_tensor().flatten_all().unwrap().to_vec1().unwrap();
    assert_eq!(head_before, head_after, "the policy's value head is unused");
    let critic_after = critic_weights(&t);
    let moved = |before: &[(String, Vec<f32>)], after: &[(String, Vec<f32>)], name: &str| {
        let b = &before.iter().find(|(n, _)| n == name).unwrap().1;
        let a = &after.iter().find(|(n, _)| n == name).unwrap().1;
        b != a
    };
    assert!(moved(
        &critic_before,
        &critic_after,
        "critic.value_head.weight"
    ));
    assert!(moved(
        &critic_before,
        &critic_after,
        "critic.value_head.bias"
    ));
    let trunk = "model.layers.0.mlp.down_proj.weight";
    assert!(moved(
        &critic_before,
        &critic_after,
        &format!("critic.{trunk}")
    ));
    assert!(moved(&policy_before, &weights(&t), trunk));
    assert_eq!(t.critic_optimizer().unwrap().steps(), 2);
    // The trunks started equal and moved apart: separate storage.
    let p = &weights(&t).into_iter().find(|(n, _)| n == trunk).unwrap().1;
    let c = &critic_after
        .iter()
        .find(|(n, _)| *n == format!("critic.{trunk}"))
        .unwrap()
        .1;
    assert_ne!(p, c);
    // Shared: no critic, and the policy's value head trains.
    let mut cfg = t.config().clone();
    cfg.critic = CriticMode::Shared;
    t.set_config(cfg);
    assert!(t.critic().is_none());
    let b = varied_batch(&mut t, 8);
    t.ppo_step(&b).unwrap();
    let head_shared: Vec<f32> = head.as_tensor().flatten_all().unwrap().to_vec1().unwrap();
    assert_ne!(head_before, head_shared);
}

#[test]
fn checkpoint_round_trip_resume_and_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ckpt");
    let mut a = bandit_trainer(5);
    for _ in 0..2 {
        let b = bandit_batch(&mut a, 4);
        a.ppo_step(&b).unwrap();
    }
    let c2 = a.save_checkpoint(&root).unwrap();
    assert!(c2.ends_with("step-00000002"));
    let b = bandit_batch(&mut a, 4);
    a.ppo_step(&b).unwrap();
    let c3 = a.save_checkpoint(&root).unwrap();
    // Resume: same step, weights, optimizer, generator.
    let r = Trainer::resume(&root, &Device::Cpu).unwrap().unwrap();
    assert_eq!(r.checkpoint, c3);
    assert!(r.skipped.is_empty());
    let mut b_tr = r.trainer;
    assert_eq!(b_tr.step(), 3);
    assert_eq!(weights(&a), weights(&b_tr));
    // Two epochs per step: two updates each, of the policy and of the critic.
    assert_eq!(b_tr.optimizer().steps(), 6);
    assert_eq!(b_tr.critic_optimizer().map(|o| o.steps()), Some(6));
    assert_eq!(critic_weights(&a), critic_weights(&b_tr));
    assert!(c3.join(checkpoint::CRITIC_WEIGHTS).is_file());
    // The next step is identical in both.
    let batch_a = bandit_batch(&mut a, 4);
    let batch_b = bandit_batch(&mut b_tr, 4);
    assert_eq!(batch_a, batch_b, "restored RNG gives the same rollouts");
    let ma = a.ppo_step(&batch_a).unwrap();
    let mb = b_tr.ppo_step(&batch_b).unwrap();
    assert_eq!(ma.policy_loss, mb.policy_loss);
    // New settings on a resumed trainer apply to the next steps; the
    // optimizer's state and the step count stay.
    let mut changed = b_tr.config().clone();
    changed.lr *= 2.0;
    changed.reward = RewardMode::Partial;
    b_tr.set_config(changed.clone());
    assert_eq!(b_tr.config(), &changed);
    assert_eq!((b_tr.step(), b_tr.optimizer().steps()), (4, 8));
    assert_eq!(weights(&a), weights(&b_tr));
    // The checkpoint is a loadable model directory (config.json + weights).
    assert!(c3.join("config.json").is_file());
    // Truncate the newest checkpoint's weights: refused, previous one used.
    let w = c3.join(checkpoint::WEIGHTS);
    let bytes = std::fs::read(&w).unwrap();
    std::fs::write(&w, &bytes[..bytes.len() - 100]).unwrap();
    let e = Trainer::load_checkpoint(&c3, &Device::Cpu)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("truncated") && e.contains("model.safetensors"),
        "{e}"
    );
    let r = Trainer::resume(&root, &Device::Cpu).unwrap().unwrap();
    assert_eq!(r.checkpoint, c2);
    assert_eq!(r.trainer.step(), 2);
    assert_eq!(r.skipped.len(), 1);
    assert!(r.skipped[0].reason.contains("truncated"));
    // Flip a byte (same size): digest mismatch.
    let mut bad = bytes.clone();
    let mid = bad.len() / 2;
    bad[mid] ^= 0xff;
    std::fs::write(&w, &bad).unwrap();
    let e = Trainer::load_checkpoint(&c3, &Device::Cpu)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("SHA-256"), "{e}");
    // No manifest: an incomplete checkpoint.
    std::fs::remove_file(c2.join(checkpoint::MANIFEST)).unwrap();
    let (found, skipped) = checkpoint::latest(&root).unwrap();
    assert!(found.is_none());
    assert_eq!(skipped.len(), 2);
}

#[test]
fn nan_loss_stops_training_and_keeps_the_last_good_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ckpt");
    let mut t = bandit_trainer(9);
    let mut calls = 0;
    let out = train_loop(&mut t, 10, 2, &root, |tr| {
        calls += 1;
        let mut b = bandit_batch(tr, 4);
        if calls == 4 {
            b.sequences[0].old_logprobs[5] = f32::NAN;
        }
        Ok(b)
    })
    .unwrap();
    assert_eq!(out.steps_done, 3);
    let why = out.stopped.unwrap();
    assert!(
        why.contains("not finite") && why.contains("step-00000002"),
        "{why}"
    );
    assert_eq!(out.last_checkpoint.unwrap(), root.join("step-00000002"));
    let (latest, _) = checkpoint::latest(&root).unwrap();
    assert_eq!(latest.unwrap().1.step, 2);
    // The failed step changed nothing: a fresh step still works.
    let b = bandit_batch(&mut t, 4);
    assert!(t.ppo_step(&b).is_ok());
}

#[test]
fn policy_loads_a_model_dir_and_adds_a_value_head() {
    let dir = tempfile::tempdir().unwrap();
    let tok = crate::model::models::tiny::train_tokenizer(["ls -la", "cat x"].iter(), 270).unwrap();
    let cfg = tiny_config(Arch::Llama, 300);
    crate::model::models::tiny::write_model_dir(dir.path(), &cfg, &tok, 4).unwrap();
    let p = Policy::from_dir(dir.path(), &Device::Cpu).unwrap();
    let names: Vec<String> = p.vars().into_iter().map(|(n, _)| n).collect();
    assert!(names.iter().any(|n| n == "value_head.weight"));
    assert!(names.iter().any(|n| n == "lm_head.weight"));
    let ids = Tensor::new(&[[3u32, 4, 5]], &Device::Cpu).unwrap();
    let (logits, values) = p.forward(&ids).unwrap();
    assert_eq!(logits.dims(), &[1, 3, 300]);
    assert_eq!(values.dims(), &[1, 3]);
    // Same logits as the inference loader.
    let mut lm = LocalModel::load(dir.path(), &Device::Cpu).unwrap();
    let crate::model::Backend::Dense(m) = lm.backend() else {
        panic!()
    };
    let l2 = m.logits(&m.hidden_states(&ids).unwrap()).unwrap();
    let d = crate::model::tests::max_diff(&logits, &l2);
    assert!(d < 1e-6);
    let _ = lm.name();
    let _ = &mut lm;
}

/// A warm-start batch run in several forward passes (one sequence each)
/// makes the update of one pass: the passes' gradients are summed with the
/// batch's sequence weights. Passes keep the order and at least one sequence.
#[test]
fn a_supervised_step_in_passes_makes_the_one_pass_update() {
    let mut one = bandit_trainer(5);
    let batch = bandit_batch(&mut one, 6);
    let mut split = bandit_trainer(5);
    assert_eq!(weights(&one), weights(&split));
    let a = one.sft_step_in_passes(&batch, 1e-2, usize::MAX).unwrap();
    let b = split.sft_step_in_passes(&batch, 1e-2, 1).unwrap();
    assert!((a.loss - b.loss).abs() < 1e-5, "{} vs {}", a.loss, b.loss);
    for ((name, x), (_, y)) in weights(&one).iter().zip(weights(&split)) {
        let d = x
            .iter()
            .zip(&y)
            .map(|(p, q)| (p - q).abs())
            .fold(0f32, f32::max);
        assert!(d < 1e-5, "{name}: max |diff| {d}");
    }
    assert_ne!(
        weights(&one),
        weights(&bandit_trainer(5)),
        "the step changed the weights"
    );

    let seq = |len: usize| RolloutSequence {
        tokens: vec![1; len],
        agent_mask: (0..len).map(|i| i > 0).collect(),
        old_logprobs: vec![0.0; len],
        reward: 0.0,
        passed: false,
    };
    let batch = RolloutBatch {
        sequences: [3, 5, 2, 7].into_iter().map(seq).collect(),
    };
    // One float per query-key pair: a pass of n sequences costs n x longest^2.
    let lens = |budget| -> Vec<Vec<usize>> {
        trainer::passes(&batch, 1, budget)
            .iter()
            .map(|b| b.sequences.iter().map(|s| s.tokens.len()).collect())
            .collect()
    };
    assert_eq!(lens(50), vec![vec![3, 5], vec![2], vec![7]]);
    assert_eq!(lens(1), vec![vec![3], vec![5], vec![2], vec![7]]);
    assert_eq!(lens(usize::MAX), vec![vec![3, 5, 2, 7]]);
}

/// A sequence longer than the policy's context (its rope table) is cut to
/// it: PPO and supervised steps train instead of failing with "exceeds the
/// rope table".
#[test]
fn sequences_longer_than_the_context_are_cut_not_fatal() {
    let mut trainer = bandit_trainer(3);
    let window = trainer.policy().model().max_positions();
    let mut batch = bandit_batch(&mut trainer, 2);
    let long = &mut batch.sequences[0];
    let extra = window + 5 - long.tokens.len();
    long.tokens.extend(std::iter::repeat_n(7, extra));
    long.agent_mask.extend(std::iter::repeat_n(true, extra));
    long.old_logprobs.extend(std::iter::repeat_n(-1.0, extra));
    assert!(batch.max_len() > window);
    let m = trainer.ppo_step(&batch).unwrap();
    assert!(m.policy_loss.is_finite());
    assert!(trainer.sft_step(&batch, 1e-3).unwrap().loss.is_finite());
    let mut cut = batch.clone();
    assert_eq!(cut.truncate_to(window), 1);
    assert_eq!(cut.max_len(), window);
    assert_eq!(cut.sequences[1], batch.sequences[1]);
}
