//! The reference's stage-4 summary, `solutions/<model>_summary.json`, as the
//! reference's solver writes it:
//! `{"num_runs": 16, "num_success": 7, "pass_at_k": {"1": 0.44, ..., "16": 1.0},
//! "results": [{"success": true, "transcript": [...]}, ...]}`.
//! Every field is optional and unknown keys are allowed: the file itself is
//! kept verbatim in the bundle, this only reads the record out of it.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::task::text::parse_json;
use crate::task::{BundleError, Solvability};

/// The summary of the paper's solver, o3, whose pass@16 the paper filters on.
pub const O3_SUMMARY: &str = "o3_summary.json";

#[derive(Default, Deserialize)]
struct Summary {
    #[serde(default)]
    num_runs: Option<u32>,
    #[serde(default)]
    num_success: Option<u32>,
    #[serde(default)]
    pass_at_k: Option<BTreeMap<String, f64>>,
    #[serde(default)]
    results: Option<Vec<RunResult>>,
}

#[derive(Deserialize)]
struct RunResult {
    #[serde(default)]
    success: Option<bool>,
}

/// Read the record of solver `solver` from the summary `bytes`; `file` (the
/// summary's path) and the field are named in errors. Samples and successes
/// missing from the summary are counted from `results` when it has them.
pub fn read(
    file: &Path,
    bytes: &[u8],
    solver: &str,
    source: &str,
) -> Result<Solvability, BundleError> {
    let text = std::str::from_utf8(bytes)
        .map_err(|e| BundleError::invalid(file, None, format!("is not UTF-8: {e}")))?;
    // An array would deserialize into the struct by position: only an
    // object (or null, for nothing recorded) is a summary.
    let summary = match parse_json::<serde_json::Value>(file, text)? {
        serde_json::Value::Object(_) => parse_json::<Summary>(file, text)?,
        serde_json::Value::Null => Summary::default(),
        _ => {
            return Err(BundleError::invalid(
                file,
                None,
                "expected a JSON object (the solver's summary)",
            ))
        }
    };
    let results = summary.results.unwrap_or_default();
    let counted = |n: usize| (!results.is_empty()).then(|| u32::try_from(n).unwrap_or(u32::MAX));
    Ok(Solvability {
        solver: solver.to_string(),
        samples: summary.num_runs.or_else(|| counted(results.len())),
        successes: summary
            .num_success
            .or_else(|| counted(results.iter().filter(|r| r.success == Some(true)).count())),
        pass_at_k: summary.pass_at_k.unwrap_or_default(),
        source: source.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(json: &str) -> Result<Solvability, BundleError> {
        read(
            Path::new("t/solutions/o3_summary.json"),
            json.as_bytes(),
            "o3",
            "solution/o3_summary.json",
        )
    }

    #[test]
    fn reads_the_reference_summary() {
        let s = of(r#"{"num_runs": 16, "num_success": 7, "pass_at_k": {"1": 0.4375, "16": 1.0}, "results": [], "model": "o3"}"#).unwrap();
        assert_eq!((s.samples, s.successes), (Some(16), Some(7)));
        assert_eq!(s.pass_at_k["16"], 1.0);
        assert_eq!(s.solver, "o3");
    }

    #[test]
    fn counts_from_results_and_allows_missing_fields() {
        let s = of(r#"{"results": [{"success": true, "transcript": []}, {"success": false}, {}]}"#)
            .unwrap();
        assert_eq!((s.samples, s.successes), (Some(3), Some(1)));
        let s = of("{}").unwrap();
        assert_eq!((s.samples, s.successes), (None, None));
        assert!(s.pass_at_k.is_empty());
        assert!(of("null").is_ok());
    }

    #[test]
    fn wrong_types_name_the_file_and_field() {
        for (json, field) in [
            (r#"{"num_runs": "16"}"#, "num_runs"),
            (r#"{"pass_at_k": {"16": "high"}}"#, "pass_at_k.16"),
            (r#"{"results": [{"success": "yes"}]}"#, "results[0].success"),
            (r#"{"num_success": -1}"#, "num_success"),
        ] {
            let e = of(json).unwrap_err().to_string();
            assert!(
                e.contains("t/solutions/o3_summary.json") && e.contains(field),
                "{json}: {e}"
            );
        }
        let e = of("[1, 2]").unwrap_err().to_string();
        assert!(e.contains("o3_summary.json"), "{e}");
    }
}
