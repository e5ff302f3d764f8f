//! Checks of a request's inputs before anything starts, so that a typo is
//! an error where it was typed (the TUI's launch forms show it under the
//! form) rather than a failed job: the policy spec (its shape, and that the
//! file or directory it names exists) and task selections (every id or `*`
//! glob matches a task).

use std::path::Path;

use super::runs::glob_match;

/// Check a policy spec the way `endless eval --policy` reads it, without
/// starting anything: `oracle`, `human`, `script:FILE`, `replay:FILE`,
/// `openai:MODEL@URL`, `local:DIR|FILE|smollm2`.
pub fn check_policy_spec(spec: &str) -> Result<(), String> {
    let spec = spec.trim();
    let (kind, rest) = match spec.split_once(':') {
        Some((k, r)) => (k.trim(), Some(r.trim())),
        None => (spec, None),
    };
    match (kind, rest) {
        ("", _) => Err("expected a spec such as oracle, script:FILE or openai:MODEL@URL".into()),
        ("oracle" | "human", None) => Ok(()),
        ("oracle" | "human", Some(_)) => Err(format!("{kind} takes no argument")),
        ("script" | "replay", Some(path)) if !path.is_empty() => {
            if Path::new(path).is_file() {
                Ok(())
            } else {
                Err(format!("{path}: no such file"))
            }
        }
        ("script" | "replay", _) => Err(format!("expected {kind}:FILE")),
        ("openai", Some(rest)) => match rest.rsplit_once('@') {
            Some((model, url)) if !model.is_empty() && !url.is_empty() => Ok(()),
            _ => Err("expected openai:MODEL@URL, e.g. openai:gpt-4o@http://127.0.0.1:8000/v1".into()),
        },
        ("openai", None) => Err("expected openai:MODEL@URL".into()),
        ("local", Some("smollm2")) => Ok(()),
        ("local", Some(path)) if !path.is_empty() => {
            if Path::new(path).exists() {
                Ok(())
            } else {
                Err(format!("{path}: no such model directory or .gguf file"))
            }
        }
        ("local", _) => Err("expected local:DIR, local:FILE.gguf or local:smollm2".into()),
        _ => Err(format!(
            "unknown policy {kind:?}: expected oracle, script:FILE, replay:FILE, openai:MODEL@URL or local:DIR"
        )),
    }
}

/// The patterns of a comma-separated selection (ids or `*` globs) that
/// match none of `ids`; empty when every one matches (or there are none).
pub fn unmatched_patterns<'a>(selection: &'a str, ids: &[&str]) -> Vec<&'a str> {
    selection
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .filter(|p| !ids.iter().any(|id| glob_match(p, id)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_specs_and_selections_are_checked_before_anything_starts() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("agent.txt");
        std::fs::write(&script, "ls\n").unwrap();
        for ok in [
            "oracle".to_string(),
            format!("script:{}", script.display()),
            "openai:m@http://h/v1".into(),
            "local:smollm2".into(),
        ] {
            assert_eq!(check_policy_spec(&ok), Ok(()), "{ok}");
        }
        let missing = dir.path().join("nope.txt");
        let err = check_policy_spec(&format!("script:{}", missing.display())).unwrap_err();
        assert!(err.contains("no such file"), "{err}");
        assert!(check_policy_spec("openai:gpt")
            .unwrap_err()
            .contains("MODEL@URL"));
        assert!(check_policy_spec("oracel")
            .unwrap_err()
            .contains("unknown policy"));
        assert!(check_policy_spec("").is_err());
        let ids = ["alpha", "beta-1", "beta-2"];
        assert!(unmatched_patterns("alpha, beta-*", &ids).is_empty());
        assert_eq!(
            unmatched_patterns("alpah,beta-*,gamma*", &ids),
            ["alpah", "gamma*"]
        );
        assert!(unmatched_patterns("", &ids).is_empty());
    }
}
