//! `endless train` end to end on offline tasks in the real sandbox, kept tiny
//! for CI: a from-scratch tiny policy, a couple of supervised steps on oracle
//! trajectories, PPO steps with rollouts through the agent loop, held-out
//! pass@1 before and after, checkpoints, resume, and a corrupt checkpoint.

#![allow(clippy::unwrap_used)] // tests and benches fail loudly

mod support;

use std::path::Path;

use support::cli::{endless, json};

fn lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// `count` offline tasks of `split` (seed 1) into the workspace.
fn generate(ws: &Path, count: &str, split: &str) {
    json(&endless(
        ws,
        &[
            "generate",
            "--offline",
            "--count",
            count,
            "--seed",
            "1",
            "--split",
            split,
            "--json",
        ],
    ));
}

fn train(ws: &Path, dev: &str, out: &Path, steps: &str) -> serde_json::Value {
    json(&endless(
        ws,
        &[
            "train",
            "--init",
            "tiny",
            "--sft",
            "--sft-steps",
            "2",
            "--steps",
            steps,
            "--samples",
            "2",
            "--max-turns",
            "2",
            "--max-tokens",
            "12",
            "--concurrency",
            "2",
            "--checkpoint-every",
            "1",
            "--dev",
            dev,
            "--out",
            out.to_str().unwrap(),
            "--json",
        ],
    ))
}

#[test]
fn tiny_training_runs_resumes_and_survives_a_corrupt_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    let ids = |ws: &Path| -> Vec<String> {
        json(&endless(ws, &["tasks", "list", "--json"]))
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_string())
            .collect()
    };
    generate(ws, "3", "train");
    let train_ids = ids(ws);
    generate(ws, "1", "dev");
    let dev = ids(ws)
        .into_iter()
        .find(|id| !train_ids.contains(id))
        .unwrap();
    assert_eq!(train_ids.len(), 3);
    let out = ws.join("checkpoints").join("t");

    let first = train(ws, &dev, &out, "1");
    assert_eq!(first["status"], "finished", "{first}");
    assert_eq!(first["steps_done"], 1);
    assert!(first["before"]["episodes"].as_u64() == Some(1), "{first}");
    assert!(first["after"]["episodes"].as_u64() == Some(1), "{first}");
    let metrics = lines(&out.join("metrics.jsonl"));
    assert_eq!(metrics.len(), 1);
    let m = &metrics[0];
    for key in [
        "reward",
        "pass_rate",
        "policy_loss",
        "value_loss",
        "clip_frac",
        "entropy",
        "approx_kl",
        "grad_norm",
        "tokens_per_s",
    ] {
        assert!(m[key].as_f64().is_some_and(f64::is_finite), "{key}: {m}");
    }
    assert!(m["agent_tokens"].as_u64().unwrap() > 0);
    assert_eq!(lines(&out.join("sft.jsonl")).len(), 2);
    // The supervised loss is finite and the trajectories came from passing
    // oracle episodes of the three training tasks.
    assert!(lines(&out.join("sft.jsonl"))
        .iter()
        .all(|l| l["loss"].as_f64().is_some_and(f64::is_finite)));
    let oracle = std::fs::read_dir(out.join("sft-oracle").join("episodes"))
        .unwrap()
        .count();
    assert_eq!(oracle, 3);
    // Each PPO step's episodes are on disk: one task per step, two samples.
    let step1 = out.join("rollouts").join("step-000001").join("episodes");
    let results: Vec<_> = walk(&step1)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    assert_eq!(results.len(), 2, "{results:?}");
    for d in ["step-00000000", "step-00000001"] {
        assert!(out.join(d).join("manifest.json").is_file(), "{d}");
        assert!(out.join(d).join("tokenizer.json").is_file(), "{d}");
    }
    let info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("train.json")).unwrap()).unwrap();
    assert_eq!(info["status"], "finished");
    assert_eq!(info["steps_done"], 1);
    // train.json keeps the effective recipe: what --print-config says for the
    // same flags.
    let printed = json(&endless(
        ws,
        &[
            "train",
            "--init",
            "tiny",
            "--samples",
            "2",
            "--max-turns",
            "2",
            "--max-tokens",
            "12",
            "--print-config",
            "--json",
        ],
    ));
    assert_eq!(info["recipe"], printed["recipe"], "{info}");
    let saved: endless::rl::Recipe = serde_json::from_value(info["recipe"].clone()).unwrap();
    let shown: endless::rl::Recipe = serde_json::from_value(printed["recipe"].clone()).unwrap();
    assert_eq!(saved, shown);
    assert_eq!(saved.temperature, 0.7);
    assert_eq!(info["recipe"]["train"]["critic"], "separate");
    // The separate critic is checkpointed beside the policy.
    assert!(out
        .join("step-00000001")
        .join("critic.safetensors")
        .is_file());

    // Resume: one more step, no second supervised warm start or "before" eval.
    let second = train(ws, &dev, &out, "2");
    assert_eq!(second["steps_done"], 2, "{second}");
    assert_eq!(lines(&out.join("sft.jsonl")).len(), 2);
    assert_eq!(lines(&out.join("metrics.jsonl")).len(), 2);
    let evals = lines(&out.join("eval.jsonl"));
    let labels: Vec<&str> = evals.iter().map(|e| e["label"].as_str().unwrap()).collect();
    assert_eq!(labels, vec!["before", "after", "after"]);

    // A truncated newest checkpoint is refused; the run resumes from the one
    // before it and redoes the lost step.
    let weights = out.join("step-00000002").join("model.safetensors");
    let bytes = std::fs::read(&weights).unwrap();
    std::fs::write(&weights, &bytes[..bytes.len() / 2]).unwrap();
    let third = train(ws, &dev, &out, "3");
    assert_eq!(third["steps_done"], 3, "{third}");
    let steps: Vec<u64> = lines(&out.join("metrics.jsonl"))
        .iter()
        .map(|m| m["step"].as_u64().unwrap())
        .collect();
    assert_eq!(steps, vec![1, 2, 3]);

    // The checkpoint is a model directory the local policy can run.
    let ckpt = out.join("step-00000003");
    let ep = endless(
        ws,
        &[
            "run",
            &dev,
            "--policy",
            &format!("local:{}", ckpt.display()),
            "--max-turns",
            "1",
            "--json",
        ],
    );
    let v: serde_json::Value = serde_json::from_slice(&ep.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&ep.stderr)));
    assert_eq!(v["turns"], 1, "{v}");
}

/// `--print-config` prints the effective recipe without needing any task:
/// defaults from `[train]`, a workspace's `endless.toml` over them, flags
/// over both; text and JSON.
#[test]
fn print_config_shows_the_effective_recipe() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    let v = json(&endless(ws, &["train", "--print-config", "--json"]));
    let r = &v["recipe"];
    assert_eq!(r["train"]["critic"], "separate");
    assert_eq!(r["train"]["ppo_epochs"], 2);
    assert_eq!(r["train"]["ppo"]["value_clip"], 0.2);
    assert_eq!(r["train"]["adam"]["weight_decay"], 0.01);
    assert_eq!(r["train"]["normalize_reward"], true);
    assert_eq!(r["train"]["critic_lr"], 5e-5, "tiny by default");
    assert_eq!(r["temperature"], 0.7);
    assert_eq!(r["train"]["ppo"]["temperature"], 0.7);
    assert_eq!(r["max_tokens"], 256);
    assert_eq!(
        (r["samples"].as_u64(), r["prompts_per_step"].as_u64()),
        (Some(16), Some(1))
    );
    let table = v["table"].as_array().unwrap();
    let row = |name: &str| {
        table
            .iter()
            .find(|t| t["setting"] == name)
            .unwrap_or_else(|| panic!("no row {name}"))
            .clone()
    };
    assert_eq!(row("prompts_per_step")["reference"], "16");
    assert!(!row("max_tokens")["why"].as_str().unwrap().is_empty());
    assert_eq!(row("value_clip")["why"], "");

    // The workspace's configuration feeds the defaults; flags win over it.
    std::fs::write(
        ws.join("endless.toml"),
        "[train]\nvalue_clip = 0.1\ncritic = \"shared\"\n",
    )
    .unwrap();
    let v = json(&endless(
        ws,
        &[
            "train",
            "--print-config",
            "--json",
            "--init",
            "smollm2",
            "--ppo-epochs",
            "3",
            "--normalize-reward=false",
            "--prompts-per-step",
            "4",
        ],
    ));
    let r = &v["recipe"];
    assert_eq!(r["train"]["ppo"]["value_clip"], 0.1);
    assert_eq!(r["train"]["critic"], "shared");
    assert_eq!(r["train"]["ppo_epochs"], 3);
    assert_eq!(r["train"]["normalize_reward"], false);
    assert_eq!(r["train"]["lr"], 1e-6, "pretrained policies");
    assert_eq!(r["prompts_per_step"], 4);

    let out = endless(ws, &["train", "--print-config", "--critic", "separate"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for want in [
        "setting",
        "reference",
        "critic",
        "separate",
        "max_tokens",
        "2048",
    ] {
        assert!(text.contains(want), "{want}: {text}");
    }
    // Nothing was trained or written.
    assert!(!ws.join("checkpoints").exists());
    let bad = endless(ws, &["train", "--print-config", "--value-clip=-1"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--value-clip"));
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn bad_training_input_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    let out = endless(ws, &["train", "--init", "tiny", "--steps", "1"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no training tasks"), "{err}");
    generate(ws, "2", "train");
    let cases: [(&[&str], &str); 8] = [
        (&["--init", "/nonexistent/model"], "/nonexistent/model"),
        (&["--reward", "bogus"], "--reward"),
        (&["--temperature", "0"], "--temperature"),
        (&["--dev", "*"], "overlaps the training tasks"),
        (&["--lora", "4"], "--lora needs a pretrained --init"),
        (
            &["--lora", "0", "--init", "smollm2"],
            "--lora: 0 is not in 1..=4096",
        ),
        (
            &["--lora", "4", "--lora-targets", "q,qkv"],
            "--lora-targets: unknown LoRA target `qkv`",
        ),
        (&["--lora-alpha", "8"], "--lora <RANK>"),
    ];
    for (args, want) in cases {
        let mut full = vec!["train", "--steps", "1", "--out"];
        let o = ws.join("o");
        let o = o.to_str().unwrap();
        full.push(o);
        full.extend_from_slice(args);
        let out = endless(ws, &full);
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    }
    // Warm-start tasks must not include held-out ones either.
    let mut ids: Vec<String> = std::fs::read_dir(ws.join("tasks"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    ids.sort();
    let o = ws.join("o");
    let out = endless(
        ws,
        &[
            "train",
            "--steps",
            "1",
            "--out",
            o.to_str().unwrap(),
            "--tasks",
            &ids[0],
            "--dev",
            &ids[1],
            "--sft-tasks",
            "*",
        ],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("overlaps the training tasks") && err.contains(&ids[1]),
        "{err}"
    );
}

/// A run piped to a file is not silent: each phase, the supervised steps
/// (first and last, with loss, pace and ETA) and each PPO step print a line
/// on stderr as they happen.
#[test]
fn training_prints_progress_lines_as_it_goes() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    generate(ws, "2", "train");
    let out = ws.join("checkpoints").join("p");
    let run = endless(
        ws,
        &[
            "train",
            "--init",
            "tiny",
            "--sft",
            "--sft-steps",
            "3",
            "--steps",
            "1",
            "--samples",
            "2",
            "--max-turns",
            "1",
            "--max-tokens",
            "4",
            "--concurrency",
            "2",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{err}");
    let at = |want: &str| {
        err.find(want)
            .unwrap_or_else(|| panic!("no {want:?} in:\n{err}"))
    };
    let sft_first = at("sft 1/3  loss ");
    let sft_last = at("sft 3/3  loss ");
    let step = at("step    1/1  reward ");
    assert!(at("phase: oracle trajectories") < at("phase: sft"));
    assert!(at("phase: sft") < sft_first && sft_first < sft_last && sft_last < step);
    let line = err[sft_first..].lines().next().unwrap();
    assert!(line.contains(" s/step  eta "), "{line}");
}

/// With dynamic sampling, a step whose drawn tasks all failed every sample
/// makes no update: it draws up to four tasks in turn, says so, and writes no
/// metrics. (A from-scratch policy never passes.)
#[test]
fn dynamic_sampling_makes_no_update_without_signal() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    generate(ws, "3", "train");
    let out = ws.join("checkpoints").join("d");
    let run = endless(
        ws,
        &[
            "train",
            "--init",
            "tiny",
            "--dynamic-sampling",
            "--steps",
            "1",
            "--minutes",
            "0.01",
            "--samples",
            "2",
            "--max-turns",
            "1",
            "--max-tokens",
            "4",
            "--concurrency",
            "2",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{err}");
    assert!(
        err.contains("step 1: every drawn task's samples got the same reward; no update"),
        "{err}"
    );
    assert!(
        err.contains("time budget used up after 0 PPO steps"),
        "{err}"
    );
    let mut draws: Vec<String> = std::fs::read_dir(out.join("rollouts"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    draws.sort();
    assert_eq!(
        draws,
        [
            "step-000001",
            "step-000001-draw-2",
            "step-000001-draw-3",
            "step-000001-draw-4"
        ]
    );
    assert!(lines(&out.join("metrics.jsonl")).is_empty());
}

/// `--kl-coef`: the step metrics carry the KL to the policy PPO started
/// from; a resumed run measures against that policy, reloaded from its
/// `step-00000000`, and without it refuses to go on, naming the directory.
#[test]
fn kl_penalty_resumes_against_the_start_and_names_a_missing_one() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    generate(ws, "2", "train");
    let out = ws.join("checkpoints").join("k");
    let run = |steps: &str| {
        endless(
            ws,
            &[
                "train",
                "--init",
                "tiny",
                "--kl-coef",
                "0.5",
                "--steps",
                steps,
                "--samples",
                "2",
                "--max-turns",
                "1",
                "--max-tokens",
                "6",
                "--concurrency",
                "2",
                "--checkpoint-every",
                "1",
                "--out",
                out.to_str().unwrap(),
            ],
        )
    };
    let first = run("1");
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let second = run("2");
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(second.status.success(), "{err}");
    assert!(err.contains("resuming from"), "{err}");
    let metrics = lines(&out.join("metrics.jsonl"));
    assert_eq!(metrics.len(), 2);
    assert!(metrics.iter().all(|m| m["kl_ref"]
        .as_f64()
        .is_some_and(|k| k.is_finite() && k >= 0.0)));
    std::fs::remove_dir_all(out.join("step-00000000")).unwrap();
    let third = run("3");
    let err = String::from_utf8_lossy(&third.stderr);
    assert!(!third.status.success());
    assert!(
        err.contains("--kl-coef") && err.contains("step-00000000"),
        "{err}"
    );
    assert_eq!(lines(&out.join("metrics.jsonl")).len(), 2, "nothing lost");
}

/// `--lora` on a pretrained model directory: a warm start and a PPO step
/// train only the adapters, the checkpoints hold `adapter.json` and
/// `adapter.safetensors` (no full weights), a second run resumes from them,
/// and the checkpoint evaluates as a `local:` policy.
#[test]
fn lora_training_checkpoints_adapters_that_resume_and_evaluate() {
    use endless::model::models::tiny::{tiny_config, train_tokenizer, write_model_dir};
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    generate(ws, "2", "train");
    let base = ws.join("base-model");
    let tok = train_tokenizer(["<command>ls -la</command>", "cat x"].iter(), 400).unwrap();
    // Room for whole oracle episodes in a tokenizer that knows few merges.
    let mut cfg = tiny_config(endless::model::Arch::Qwen2, 400);
    cfg.max_position_embeddings = 8192;
    write_model_dir(&base, &cfg, &tok, 3).unwrap();
    let out = ws.join("checkpoints").join("lora");
    let run = |steps: &str| {
        json(&endless(
            ws,
            &[
                "train",
                "--init",
                base.to_str().unwrap(),
                "--lora",
                "4",
                "--lora-targets",
                "q,v,down",
                "--sft",
                "--sft-steps",
                "1",
                "--steps",
                steps,
                "--samples",
                "2",
                "--max-turns",
                "2",
                "--max-tokens",
                "12",
                "--concurrency",
                "2",
                "--checkpoint-every",
                "1",
                "--out",
                out.to_str().unwrap(),
                "--json",
            ],
        ))
    };
    let first = run("1");
    assert_eq!(first["status"], "finished", "{first}");
    let ckpt = out.join("step-00000001");
    for f in [
        "adapter.json",
        "adapter.safetensors",
        "config.json",
        "tokenizer.json",
    ] {
        assert!(ckpt.join(f).is_file(), "{f}");
    }
    assert!(!ckpt.join("model.safetensors").exists());
    let spec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ckpt.join("adapter.json")).unwrap()).unwrap();
    assert_eq!(spec["rank"], 4);
    assert_eq!(
        spec["targets"],
        serde_json::json!(["q_proj", "v_proj", "down_proj"])
    );
    assert_eq!(spec["base"], base.canonicalize().unwrap().to_str().unwrap());
    let info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("train.json")).unwrap()).unwrap();
    // Trained: rank 4 x (in + out) on three projections of each layer, and the value head.
    let (h, i, l) = (
        cfg.hidden_size,
        cfg.intermediate_size,
        cfg.num_hidden_layers,
    );
    let q = cfg.num_attention_heads * cfg.head_dim;
    let kv = cfg.num_key_value_heads * cfg.head_dim;
    let want = l * 4 * ((h + q) + (h + kv) + (i + h)) + h + 1;
    assert_eq!(info["params"].as_u64(), Some(want as u64), "{info}");

    let second = run("2");
    assert_eq!(second["status"], "finished", "{second}");
    assert_eq!(second["steps_done"], 2);
    assert!(out.join("step-00000002").join("adapter.json").is_file());
    let task = std::fs::read_dir(ws.join("tasks"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    let policy = format!("local:{}", out.join("step-00000002").display());
    let eval = json(&endless(
        ws,
        &[
            "eval",
            "--policy",
            &policy,
            "--tasks",
            &task.file_name().to_string_lossy(),
            "--max-turns",
            "1",
            "--json",
        ],
    ));
    assert_eq!(eval["episodes"].as_u64(), Some(1), "{eval}");
}
