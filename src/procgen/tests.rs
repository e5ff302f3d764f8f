//! Unit tests of the family registry and the generated bundles.

use std::collections::BTreeSet;

use super::*;
use crate::task::{is_valid_id, validate, FINAL_TESTS, INITIAL_TESTS};

fn sc() -> &'static Scenario {
    &scenarios()[0]
}

#[test]
fn at_least_30_families_in_12_categories() {
    let fams = families();
    assert!(fams.len() >= 30, "only {} families", fams.len());
    let names: BTreeSet<&str> = fams.iter().map(|f| f.name()).collect();
    assert_eq!(names.len(), fams.len(), "family names must be unique");
    let cats: BTreeSet<&str> = fams.iter().map(|f| f.category()).collect();
    assert!(cats.len() >= 12, "only {} categories: {cats:?}", cats.len());
    for d in DEV_FAMILIES {
        assert!(names.contains(d), "held-out family {d} does not exist");
    }
}

#[test]
fn scenarios_are_many_and_distinct() {
    let names: BTreeSet<&str> = scenarios().iter().map(|s| s.name).collect();
    assert!(names.len() >= 12);
    assert_eq!(names.len(), scenarios().len());
}

#[test]
fn same_inputs_give_identical_bundles() {
    for f in families() {
        for c in [1, 4, 6] {
            let a = f.generate(42, c, sc());
            let b = f.generate(42, c, sc());
            assert_eq!(a, b, "{} c{c} is not deterministic", f.name());
            assert_eq!(f.near_miss(&a), f.near_miss(&b));
            let ta = toml::to_string(&a.meta).expect("meta serialises");
            let tb = toml::to_string(&b.meta).expect("meta serialises");
            assert_eq!(ta, tb);
        }
    }
}

#[test]
fn different_seeds_give_different_data() {
    for f in families() {
        let a = f.generate(1, 3, sc());
        let b = f.generate(2, 3, sc());
        assert_ne!(
            a.environment.text("setup.sh"),
            b.environment.text("setup.sh"),
            "{}: seeds 1 and 2 build the same environment",
            f.name()
        );
        assert_ne!(a.id(), b.id());
    }
}

#[test]
fn scenario_changes_wording_not_data() {
    let f = families()[0];
    let a = f.generate(7, 2, &scenarios()[0]);
    let b = f.generate(7, 2, &scenarios()[1]);
    assert_ne!(a.instruction, b.instruction);
    assert_eq!(a.environment, b.environment);
    assert_eq!(a.tests, b.tests);
    assert_eq!(a.solution, b.solution);
}

#[test]
fn every_family_emits_complete_valid_tasks() {
    for f in families() {
        for c in 1..=6u8 {
            for seed in [0u64, 17] {
                let t = f.generate(seed, c, sc());
                let who = format!("{} seed {seed} c{c}", f.name());
                assert!(is_valid_id(t.id()), "{who}: bad id {}", t.id());
                assert_eq!(t.id(), task_id(f.name(), seed, c));
                assert!(validate(&t).is_empty(), "{who}: {:?}", validate(&t));
                let setup = t.environment.text("setup.sh").expect("setup.sh");
                assert!(setup.starts_with("#!/bin/bash"), "{who}");
                assert!(
                    setup.trim_end().ends_with("chown -R user:user /home/user"),
                    "{who}"
                );
                assert!(t.environment.0["setup.sh"].executable);
                for file in [INITIAL_TESTS, FINAL_TESTS] {
                    let text = t.tests.text(file).unwrap_or_default();
                    assert!(text.contains("\ndef test_"), "{who}: {file} has no tests");
                }
                let solve = t.solve_script().expect("solve.sh");
                assert!(t.solution.0["solve.sh"].executable);
                assert_ne!(f.near_miss(&t), solve, "{who}: near miss equals the oracle");
                assert_eq!(t.meta.task.complexity, Some(c));
                assert_eq!(t.meta.task.category, f.category());
                assert_eq!(t.meta.provenance.seed, Some(seed));
                assert!(t.meta.provenance.created.is_empty());
                assert!(!t.truth.is_empty() && !t.instruction.is_empty());
                assert!(
                    !has_placeholder(&t.instruction),
                    "{who}: unfilled placeholder in {}",
                    t.instruction
                );
            }
        }
    }
}

/// `{word}` left over from a template (JSON-like `{a: b}` is fine).
fn has_placeholder(s: &str) -> bool {
    s.split('{').skip(1).any(|rest| {
        rest.split_once('}').is_some_and(|(inner, _)| {
            !inner.is_empty() && inner.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
    })
}

#[test]
fn generated_python_parses() {
    let probe = std::process::Command::new("python3")
        .arg("-c")
        .arg("pass")
        .output();
    if !probe.map(|o| o.status.success()).unwrap_or(false) {
        eprintln!("python3 not available: skipping the syntax check");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let mut paths = Vec::new();
    for f in families() {
        for c in [1u8, 6] {
            let t = f.generate(3, c, sc());
            for file in [INITIAL_TESTS, FINAL_TESTS] {
                let p = dir.path().join(format!("{}_{file}", t.id()));
                std::fs::write(&p, t.tests.text(file).unwrap_or_default()).expect("write");
                paths.push(p);
            }
        }
    }
    let code = "import ast, sys\nfor p in sys.argv[1:]:\n    ast.parse(open(p).read(), p)\n";
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(code)
        .args(&paths)
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn batch_is_balanced_unique_and_stable() {
    let n = families().len();
    let batch = generate_batch(n * 6, 1000, None);
    assert_eq!(batch.len(), n * 6);
    let ids: BTreeSet<&str> = batch.iter().map(|t| t.id()).collect();
    assert_eq!(ids.len(), batch.len(), "ids must be unique");
    for f in families() {
        let mine: Vec<&Task> = batch
            .iter()
            .filter(|t| t.meta.provenance.generator == format!("procgen/{}", f.name()))
            .collect();
        assert_eq!(mine.len(), 6, "{} is not balanced", f.name());
        let cs: BTreeSet<u8> = mine.iter().filter_map(|t| t.meta.task.complexity).collect();
        assert_eq!(cs.len(), 6, "{} does not cover all complexities", f.name());
    }
    let scen: BTreeSet<&str> = batch
        .iter()
        .map(|t| t.meta.task.scenario.as_str())
        .collect();
    assert_eq!(scen.len(), scenarios().len());
    let again = generate_batch(n * 6, 1000, None);
    assert_eq!(batch, again);
}

#[test]
fn split_is_respected() {
    for (split, want) in [(Split::Train, Split::Train), (Split::Dev, Split::Dev)] {
        let batch = generate_batch(80, 5, Some(split));
        assert_eq!(batch.len(), 80);
        for t in &batch {
            let fam = t.meta.provenance.generator.trim_start_matches("procgen/");
            let seed = t.meta.provenance.seed.unwrap_or_default();
            assert_eq!(
                split_of(fam, seed),
                want,
                "{} is in the wrong split",
                t.id()
            );
        }
    }
    assert_eq!(split_of("dataset-split", 9), Split::Dev);
    assert_eq!(split_of("dataset-split", 10), Split::Train);
    assert_eq!(split_of(DEV_FAMILIES[0], 10), Split::Dev);
}

#[test]
fn tools_are_detected_on_path() {
    assert!(tool_available("sh"));
    assert!(!tool_available("endless-no-such-tool"));
    let (ok, skipped) = usable_families();
    assert_eq!(ok.len() + skipped.len(), families().len());
    let jq = families()
        .into_iter()
        .find(|f| f.required_tools().contains(&"jq"));
    assert!(jq.is_some(), "the jq family declares its tool");
}
