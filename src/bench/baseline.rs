//! The A/B harness: `endless bench WHAT --baseline OTHER` runs the same
//! bench with this binary and with another `endless` binary (an older
//! release, a build of another branch) as child processes, in alternating
//! rounds so that load on a shared machine falls on both alike, and reports
//! each side's medians over the rounds and the ratios (this binary over the
//! baseline).
//!
//! Each child prints its bench's `--json` report; every number in it is a
//! figure, named by its path (`runs.0.episodes_per_minute`), and a duration
//! (`{"secs", "nanos"}`) is one figure in milliseconds. The TUI bench adds
//! its own verdict on top ([`super::tui_baseline`]).

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{bail, Context};
use serde::Serialize;
use serde_json::Value;

use super::output::{print_json, say};
use crate::cli::BenchTarget;

/// Rounds per side unless `--rounds` says otherwise.
pub const ROUNDS: usize = 3;

/// Run `binary` with `args` (a `bench ... --json` command line) and read
/// the JSON report it prints; `what` names the bench in errors.
fn run_once(binary: &Path, what: &str, args: &[OsString]) -> anyhow::Result<Value> {
    let out = Command::new(binary)
        .args(args)
        .output()
        .with_context(|| format!("running {}", binary.display()))?;
    if !out.status.success() {
        bail!(
            "{} bench {what} failed ({}): {}",
            binary.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "{}: `bench {what} --json` printed no JSON report",
            binary.display()
        )
    })
}

/// The reports of both sides, `rounds` each, in alternating rounds (the
/// baseline first in each): `(this binary's, the baseline's)`.
pub fn alternate(
    me: &Path,
    baseline: &Path,
    what: &str,
    args: &[OsString],
    rounds: usize,
) -> anyhow::Result<(Vec<Value>, Vec<Value>)> {
    if !baseline.is_file() {
        bail!("--baseline {}: no such file", baseline.display());
    }
    if rounds == 0 {
        bail!("--rounds must be at least 1");
    }
    let (mut mine, mut theirs) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        theirs.push(run_once(baseline, what, args)?);
        mine.push(run_once(me, what, args)?);
    }
    Ok((mine, theirs))
}

/// The median of `v` (the upper one of an even count); `v` is not empty.
pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Every number in `report`, by its dotted path; `{"secs", "nanos"}`
/// objects (durations) as one figure in milliseconds. A list of whole
/// numbers (token ids, step indices, tasks per shard) is data, not figures.
pub fn figures(report: &Value) -> BTreeMap<String, f64> {
    fn walk(v: &Value, path: &str, out: &mut BTreeMap<String, f64>) {
        let key = |k: &str| {
            if path.is_empty() {
                k.to_string()
            } else {
                format!("{path}.{k}")
            }
        };
        match v {
            Value::Number(n) => {
                if let Some(x) = n.as_f64() {
                    out.insert(path.to_string(), x);
                }
            }
            Value::Object(m) => {
                if let (2, Some(secs), Some(nanos)) = (
                    m.len(),
                    m.get("secs").and_then(Value::as_f64),
                    m.get("nanos").and_then(Value::as_f64),
                ) {
                    out.insert(path.to_string(), secs * 1000.0 + nanos / 1e6);
                    return;
                }
                for (k, v) in m {
                    walk(v, &key(k), out);
                }
            }
            Value::Array(a) if a.iter().all(|v| v.is_u64() || v.is_i64()) => {}
            Value::Array(a) => {
                for (i, v) in a.iter().enumerate() {
                    walk(v, &key(&i.to_string()), out);
                }
            }
            Value::Null | Value::Bool(_) | Value::String(_) => {}
        }
    }
    let mut out = BTreeMap::new();
    walk(report, "", &mut out);
    out
}

/// One side of a comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Side {
    /// The binary measured.
    pub binary: PathBuf,
    /// Every round's figures, in order.
    pub rounds: Vec<BTreeMap<String, f64>>,
    /// Each figure's median over the rounds that reported it.
    pub median: BTreeMap<String, f64>,
}

impl Side {
    /// The side of `binary` that printed `reports`.
    fn new(binary: PathBuf, reports: &[Value]) -> Side {
        let rounds: Vec<BTreeMap<String, f64>> = reports.iter().map(figures).collect();
        let mut values: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        for round in &rounds {
            for (k, v) in round {
                values.entry(k.clone()).or_default().push(*v);
            }
        }
        let median = values.iter().map(|(k, v)| (k.clone(), median(v))).collect();
        Side {
            binary,
            rounds,
            median,
        }
    }
}

/// What `bench WHAT --baseline OTHER` prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// The bench.
    pub bench: String,
    /// This binary.
    pub current: Side,
    /// The other binary.
    pub baseline: Side,
    /// current / baseline of each figure both sides report (and the
    /// baseline's is not zero).
    pub ratio: BTreeMap<String, f64>,
}

impl Comparison {
    /// Compare the two sides' medians.
    pub fn new(bench: &str, current: Side, baseline: Side) -> Comparison {
        let ratio = current
            .median
            .iter()
            .filter_map(|(k, ours)| {
                let theirs = *baseline.median.get(k)?;
                (theirs != 0.0).then(|| (k.clone(), ours / theirs))
            })
            .collect();
        Comparison {
            bench: bench.to_string(),
            current,
            baseline,
            ratio,
        }
    }
}

impl std::fmt::Display for Comparison {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "bench {}, median of {} alternating rounds per side",
            self.bench,
            self.current.rounds.len()
        )?;
        writeln!(f, "current:  {}", self.current.binary.display())?;
        writeln!(f, "baseline: {}", self.baseline.binary.display())?;
        let width = self
            .current
            .median
            .keys()
            .map(String::len)
            .max()
            .unwrap_or(6);
        write!(
            f,
            "{:<width$}  {:>12}  {:>12}  {:>7}",
            "figure", "current", "baseline", "ratio"
        )?;
        for (k, ours) in &self.current.median {
            let theirs = self.baseline.median.get(k);
            let cell = |x: Option<&f64>| x.map_or("-".to_string(), |x| format!("{x:.3}"));
            let ratio = self
                .ratio
                .get(k)
                .map_or("-".to_string(), |r| format!("{r:.2}x"));
            write!(
                f,
                "\n{k:<width$}  {:>12}  {:>12}  {ratio:>7}",
                cell(Some(ours)),
                cell(theirs)
            )?;
        }
        Ok(())
    }
}

/// This process's command line without the program name, `--baseline` and
/// `--rounds` (with their values), and with `--json`: the command line each
/// side runs.
pub fn rerun_args(argv: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    let mut out = Vec::new();
    let mut argv = argv.into_iter().skip(1);
    let takes_value = |a: &OsStr| a == "--baseline" || a == "--rounds";
    let inline = |a: &OsStr| {
        let a = a.to_string_lossy();
        a.starts_with("--baseline=") || a.starts_with("--rounds=")
    };
    while let Some(a) = argv.next() {
        if a == "--" {
            out.push(a);
            out.extend(argv.by_ref());
            break;
        }
        if takes_value(&a) {
            argv.next();
        } else if !inline(&a) {
            out.push(a);
        }
    }
    if !out.iter().any(|a| a == "--json") {
        out.push("--json".into());
    }
    out
}

/// `endless bench WHAT --baseline BINARY [--rounds N]` for every bench but
/// `tui` (which has its own verdict): the same command line run by both
/// binaries, `rounds` times each.
pub fn run_cli(
    what: BenchTarget,
    baseline: &Path,
    rounds: usize,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let name = clap::ValueEnum::to_possible_value(&what)
        .map(|v| v.get_name().to_string())
        .unwrap_or_default();
    let me = std::env::current_exe().context("finding this binary")?;
    let args = rerun_args(std::env::args_os());
    let (mine, theirs) = alternate(&me, baseline, &name, &args, rounds)?;
    let c = Comparison::new(
        &name,
        Side::new(me, &mine),
        Side::new(baseline.to_path_buf(), &theirs),
    );
    if json {
        print_json(&c)?;
    } else {
        say(&c.to_string());
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_durations_become_figures() {
        let v: Value = serde_json::from_str(
            r#"{"tasks": 10, "ok": true, "name": "x",
                "p95": {"secs": 1, "nanos": 500000000},
                "runs": [{"verifier": "cold", "episodes_per_minute": 60.5}],
                "shard_s": [1.5, 2.5], "output_ids": [17, 4]}"#,
        )
        .unwrap();
        let f = figures(&v);
        let want: BTreeMap<String, f64> = [
            ("tasks".to_string(), 10.0),
            ("p95".to_string(), 1500.0),
            ("runs.0.episodes_per_minute".to_string(), 60.5),
            ("shard_s.0".to_string(), 1.5),
            ("shard_s.1".to_string(), 2.5),
        ]
        .into_iter()
        .collect();
        assert_eq!(f, want);
    }

    #[test]
    fn medians_over_rounds_and_ratios_of_ours_over_theirs() {
        let r = |x: f64| serde_json::json!({ "rate": x, "zero": 0 });
        let ours = Side::new("a".into(), &[r(3.0), r(9.0), r(4.0)]);
        let theirs = Side::new("b".into(), &[r(2.0), r(1.0), r(2.0)]);
        let c = Comparison::new("import", ours, theirs);
        assert_eq!(c.current.median["rate"], 4.0);
        assert_eq!(c.baseline.median["rate"], 2.0);
        assert_eq!(c.ratio["rate"], 2.0);
        assert!(!c.ratio.contains_key("zero"), "no ratio over a zero");
        assert!(c.to_string().contains("2.00x"), "{c}");
    }

    #[test]
    fn each_side_reruns_the_command_line_without_the_ab_options() {
        let argv = [
            "endless",
            "-w",
            "ws",
            "bench",
            "import",
            "--baseline",
            "/old",
            "--n",
            "5",
            "--rounds=4",
        ];
        let got = rerun_args(argv.iter().map(OsString::from));
        let want: Vec<OsString> = ["-w", "ws", "bench", "import", "--n", "5", "--json"]
            .iter()
            .map(OsString::from)
            .collect();
        assert_eq!(got, want);
        let json = rerun_args(["e", "bench", "sandbox", "--json"].map(OsString::from));
        assert_eq!(json.iter().filter(|a| *a == "--json").count(), 1);
    }
}
