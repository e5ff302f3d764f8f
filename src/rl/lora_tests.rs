//! LoRA policies end to end on a tiny model directory: only the adapters
//! (and the value head) train, the base never moves, the training path and
//! the merged sampling model compute the same logits, checkpoints hold the
//! adapters and load back both for training and as sampling policies, and
//! bad adapter files are refused with the file and field named.

use super::batch::{RolloutBatch, RolloutSequence};
use super::init::{build_policy, InitSpec};
use super::{Policy, TrainConfig, Trainer};
use crate::model::models::adapter::{ADAPTER_SPEC, ADAPTER_WEIGHTS};
use crate::model::models::lora::{LoraConfig, LoraTarget};
use crate::model::models::tiny::{tiny_config, train_tokenizer, write_model_dir};
use crate::model::tests::max_diff;
use crate::model::{Arch, Backend, LocalModel};
use candle_core::{Device, Tensor};
use std::path::{Path, PathBuf};

fn base_dir(root: &Path, seed: u64) -> PathBuf {
    let dir = root.join("base");
    let tok = train_tokenizer(["ls -la", "cat x"].iter(), 270).unwrap();
    write_model_dir(&dir, &tiny_config(Arch::Llama, 300), &tok, seed).unwrap();
    dir
}

fn ids() -> Tensor {
    Tensor::new(&[[3u32, 4, 5, 40, 41, 7]], &Device::Cpu).unwrap()
}

fn sampled_logits(lm: &LocalModel) -> Tensor {
    let Backend::Dense(m) = lm.backend() else {
        panic!("a dense model")
    };
    m.logits(&m.hidden_states(&ids()).unwrap()).unwrap()
}

fn batch() -> RolloutBatch {
    let seq = |tokens: Vec<u32>, reward: f32| RolloutSequence {
        agent_mask: (0..tokens.len()).map(|i| i >= 2).collect(),
        old_logprobs: vec![-5.0; tokens.len()],
        tokens,
        reward,
        passed: reward >= 1.0,
    };
    RolloutBatch {
        sequences: vec![
            seq(vec![1, 40, 41, 42, 43], 1.0),
            seq(vec![1, 40, 50, 51], 0.0),
        ],
    }
}

fn lora() -> LoraConfig {
    LoraConfig {
        rank: 4,
        alpha: 8.0,
        targets: LoraTarget::ALL.to_vec(),
    }
}

#[test]
fn a_lora_policy_trains_only_its_adapters_and_checkpoints_load_back_as_policies() {
    let tmp = tempfile::tempdir().unwrap();
    let base = base_dir(tmp.path(), 4);
    let full = Policy::from_dir(&base, &Device::Cpu).unwrap();
    let (base_logits, _) = full.forward(&ids()).unwrap();
    let layers = full.config().num_hidden_layers;
    let policy = full.with_lora(&lora(), &base, 7).unwrap();

    let names: Vec<String> = policy.vars().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names.len(), layers * 7 * 2 + 2, "{names:?}");
    assert!(names.iter().all(|n| n.ends_with("lora_A.weight")
        || n.ends_with("lora_B.weight")
        || n.starts_with("value_head")));
    let (start, _) = policy.forward(&ids()).unwrap();
    assert!(
        max_diff(&start, &base_logits) < 1e-6,
        "B = 0: the base's function"
    );
    let embed =
        |p: &Policy| p.model().merged_weights().unwrap()["model.embed_tokens.weight"].clone();
    let embed_before = embed(&policy);

    let mut t = Trainer::new(
        policy,
        TrainConfig {
            lr: 1e-2,
            critic_lr: 1e-2,
            warmup_steps: 1,
            ..Default::default()
        },
    );
    let first = t.sft_step(&batch(), 1e-2).unwrap().loss;
    for _ in 0..4 {
        t.sft_step(&batch(), 1e-2).unwrap();
    }
    let last = t.sft_step(&batch(), 1e-2).unwrap().loss;
    assert!(last < first, "supervised loss {first} -> {last}");
    let m = t.ppo_step(&batch()).unwrap();
    assert!(m.policy_loss.is_finite() && m.value_loss.is_finite());
    assert_eq!(
        max_diff(&embed(t.policy()), &embed_before),
        0.0,
        "the base is frozen"
    );

    // The training path (frozen products + adapters) and the merged
    // sampling model compute the same logits.
    let (trained, _) = t.policy().forward(&ids()).unwrap();
    assert!(
        max_diff(&trained, &base_logits) > 1e-4,
        "the adapters changed the model"
    );
    let lm = t.policy().sampling_model("lora").unwrap().unwrap();
    assert!(max_diff(&sampled_logits(&lm), &trained) < 1e-4);

    let ckpt = t.save_checkpoint(&tmp.path().join("run")).unwrap();
    assert!(ckpt.join(ADAPTER_SPEC).is_file() && ckpt.join(ADAPTER_WEIGHTS).is_file());
    assert!(!ckpt.join(super::checkpoint::WEIGHTS).exists());
    let size = |p: PathBuf| std::fs::metadata(p).unwrap().len();
    assert!(size(ckpt.join(ADAPTER_WEIGHTS)) * 2 < size(base.join("model.safetensors")));

    let back = Trainer::load_checkpoint(&ckpt, &Device::Cpu).unwrap();
    assert_eq!(back.policy().adapter(), t.policy().adapter());
    let (again, _) = back.policy().forward(&ids()).unwrap();
    assert!(max_diff(&again, &trained) < 1e-6);
    let continued = Policy::from_dir(&ckpt, &Device::Cpu).unwrap();
    assert_eq!(continued.num_params(), t.policy().num_params());
    let loaded = LocalModel::load(&ckpt, &Device::Cpu).unwrap();
    assert!(max_diff(&sampled_logits(&loaded), &trained) < 1e-4);
    // Asked again for the same adapters, the checkpoint goes on with its own.
    let init = InitSpec::Dir(ckpt.clone());
    let p = build_policy(&init, &[], tmp.path(), &Device::Cpu, 0, Some(&lora())).unwrap();
    assert_eq!(p.adapter(), t.policy().adapter());
}

#[test]
fn bad_adapter_settings_and_files_are_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let base = base_dir(tmp.path(), 4);
    let policy = Policy::from_dir(&base, &Device::Cpu).unwrap();
    let policy = policy.with_lora(&lora(), &base, 7).unwrap();
    let ckpt = Trainer::new(policy, TrainConfig::default())
        .save_checkpoint(&tmp.path().join("run"))
        .unwrap();
    let load = |dir: &Path| {
        LocalModel::load(dir, &Device::Cpu)
            .err()
            .map(|e| e.to_string())
    };
    let spec_text = std::fs::read_to_string(ckpt.join(ADAPTER_SPEC)).unwrap();
    let with_spec = |text: &str| {
        std::fs::write(ckpt.join(ADAPTER_SPEC), text).unwrap();
        load(&ckpt).expect("refused")
    };

    let e = with_spec("{ not json");
    assert!(e.contains("adapter.json"), "{e}");
    let e = with_spec(&spec_text.replace("\"rank\": 4", "\"rank\": 0"));
    assert!(e.contains("adapter.json") && e.contains("`rank`"), "{e}");
    let gone = spec_text.replace(&*base.to_string_lossy(), "/nonexistent/base");
    let e = with_spec(&gone);
    assert!(e.contains("`base`") && e.contains("missing"), "{e}");
    std::fs::write(ckpt.join(ADAPTER_SPEC), &spec_text).unwrap();
    assert!(load(&ckpt).is_none(), "the untouched checkpoint loads");

    // The base changed under the adapter: refused by digest.
    write_model_dir(
        &base,
        &tiny_config(Arch::Llama, 300),
        &train_tokenizer(["x"].iter(), 270).unwrap(),
        5,
    )
    .unwrap();
    let e = load(&ckpt).expect("refused");
    assert!(e.contains("`base_sha256`") && e.contains("changed"), "{e}");
    let e = Trainer::load_checkpoint(&ckpt, &Device::Cpu)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("`base_sha256`"), "{e}");

    // Settings.
    let tiny = build_policy(
        &InitSpec::Tiny,
        &[],
        tmp.path(),
        &Device::Cpu,
        0,
        Some(&lora()),
    );
    assert!(tiny.err().unwrap().to_string().contains("pretrained"));
    let p = Policy::from_dir(&ckpt, &Device::Cpu);
    assert!(p.is_err(), "the changed base is refused for training too");
    let full = Policy::from_dir(&base, &Device::Cpu).unwrap();
    let bad = LoraConfig { rank: 0, ..lora() };
    let e = full.with_lora(&bad, &base, 0).err().unwrap().to_string();
    assert!(e.contains("rank"), "{e}");
    assert_eq!(LoraTarget::parse_list("all").unwrap().len(), 7);
    assert_eq!(
        LoraTarget::parse_list("q, v,q").unwrap(),
        vec![LoraTarget::QProj, LoraTarget::VProj]
    );
    let e = LoraTarget::parse_list("q,x").unwrap_err();
    assert!(e.contains("`x`"), "{e}");
}
