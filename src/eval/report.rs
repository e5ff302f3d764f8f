//! The evaluation report: numbers, a terminal table and a Markdown file.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::charts::{draw_failure_mix, draw_pass_rate_chart};
use super::pass_at_k_table;
use crate::agent::EpisodeResult;
use crate::agent::FailureMode;
use crate::llm::TokenUsage;

/// Pass rate and failure modes of a group of episodes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GroupStats {
    /// All episodes in the group, errors included.
    pub episodes: usize,
    /// Infrastructure errors (excluded from the pass rate; a dead shell is
    /// a failure, not an error).
    pub errors: usize,
    /// Episodes that passed.
    pub passed: usize,
    /// `passed / (episodes - errors)`; 0 when nothing counted.
    pub pass_rate: f64,
    /// Episodes by their primary failure mode (one each).
    pub failure_modes: BTreeMap<FailureMode, usize>,
    /// Episodes with each failure label (they overlap: an episode counts
    /// under every label that applies).
    #[serde(default)]
    pub failure_labels: BTreeMap<FailureMode, usize>,
}

impl GroupStats {
    fn add(&mut self, e: &EpisodeResult) {
        self.episodes += 1;
        if !e.end_reason.is_scored() {
            self.errors += 1;
        }
        self.passed += e.passed as usize;
        if let Some(m) = e.failure_mode {
            *self.failure_modes.entry(m).or_default() += 1;
        }
        for m in e.labels() {
            *self.failure_labels.entry(m).or_default() += 1;
        }
        let counted = self.episodes - self.errors;
        self.pass_rate = if counted == 0 {
            0.0
        } else {
            self.passed as f64 / counted as f64
        };
    }
}

/// One task's samples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskStats {
    /// The task id.
    pub task: String,
    /// The task's category (empty when unset).
    pub category: String,
    /// The task's complexity level (1-6), if set.
    pub complexity: Option<u8>,
    /// Scored samples (all but infrastructure errors).
    pub samples: usize,
    /// Scored samples that passed.
    pub passed: usize,
    /// Samples lost to infrastructure errors (not scored).
    pub errors: usize,
}

/// Everything `eval --json` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalReport {
    /// All episodes, errors included.
    pub episodes: usize,
    /// Infrastructure errors (excluded from the pass rate).
    pub errors: usize,
    /// Episodes that passed.
    pub passed: usize,
    /// Passed over scored episodes (all but infrastructure errors).
    pub pass_rate: f64,
    /// Mean unbiased pass@k over tasks, keyed by k.
    pub pass_at_k: BTreeMap<u32, f64>,
    /// Counts of every failure mode (all keys present): each failed episode
    /// once, under its primary mode.
    pub failure_modes: BTreeMap<FailureMode, usize>,
    /// Counts of every failure label (all keys present): each failed episode
    /// under every label that applies, so they may sum to more than the failures.
    #[serde(default)]
    pub failure_labels: BTreeMap<FailureMode, usize>,
    /// Failed episodes the agent is answerable for (scored and not passed:
    /// infrastructure errors are not failures).
    #[serde(default)]
    pub failures: usize,
    /// Of those, how many have more than one label.
    #[serde(default)]
    pub multi_label_failures: usize,
    /// The paper's view of the mix: the share of `failures` with each label
    /// (every mode but `error`); shares may sum to more than 1.
    #[serde(default)]
    pub paper_view: BTreeMap<FailureMode, f64>,
    /// Keyed by task category (`"uncategorized"` when unset).
    pub per_category: BTreeMap<String, GroupStats>,
    /// Keyed by complexity level (`"unknown"` when unset).
    pub per_complexity: BTreeMap<String, GroupStats>,
    /// One entry per task, ordered by id.
    pub tasks: Vec<TaskStats>,
    /// Agent turns per episode, over all episodes (errors included); 0 when none.
    pub mean_turns: f64,
    /// Model tokens summed over all episodes.
    pub tokens: TokenUsage,
    /// Episodes a human took over (the TUI's ctrl-t): not the policy's own
    /// runs, so left out of every other number here.
    #[serde(default)]
    pub taken_over: usize,
}

/// Evaluate a set of episodes. Episodes a human took over are counted in
/// `taken_over` and left out of everything else.
pub fn evaluate(all_episodes: &[EpisodeResult]) -> EvalReport {
    let episodes: Vec<&EpisodeResult> = all_episodes
        .iter()
        .filter(|e| e.taken_over.is_none())
        .collect();
    let taken_over = all_episodes.len() - episodes.len();
    let mut all = GroupStats::default();
    let mut per_category: BTreeMap<String, GroupStats> = BTreeMap::new();
    let mut per_complexity: BTreeMap<String, GroupStats> = BTreeMap::new();
    let mut tasks: BTreeMap<String, TaskStats> = BTreeMap::new();
    let mut tokens = TokenUsage::default();
    let mut turns = 0u64;
    for &e in &episodes {
        all.add(e);
        let cat = if e.category.is_empty() {
            "uncategorized".to_string()
        } else {
            e.category.clone()
        };
        per_category.entry(cat).or_default().add(e);
        let cx = e
            .complexity
            .map_or_else(|| "unknown".to_string(), |c| c.to_string());
        per_complexity.entry(cx).or_default().add(e);
        let t = tasks.entry(e.task.clone()).or_insert_with(|| TaskStats {
            task: e.task.clone(),
            category: e.category.clone(),
            complexity: e.complexity,
            samples: 0,
            passed: 0,
            errors: 0,
        });
        if !e.end_reason.is_scored() {
            t.errors += 1;
        } else {
            t.samples += 1;
            t.passed += e.passed as usize;
        }
        tokens.add(e.tokens);
        turns += e.turns as u64;
    }
    let mut failure_modes: BTreeMap<FailureMode, usize> =
        FailureMode::ALL.iter().map(|m| (*m, 0)).collect();
    for (m, n) in &all.failure_modes {
        failure_modes.insert(*m, *n);
    }
    let mut failure_labels: BTreeMap<FailureMode, usize> =
        FailureMode::ALL.iter().map(|m| (*m, 0)).collect();
    for (m, n) in &all.failure_labels {
        failure_labels.insert(*m, *n);
    }
    let failed: Vec<Vec<FailureMode>> = episodes
        .iter()
        .filter(|e| !e.passed && e.end_reason.is_scored())
        .map(|e| e.labels())
        .collect();
    let failures = failed.len();
    let multi_label_failures = failed.iter().filter(|l| l.len() > 1).count();
    let paper_view = FailureMode::ALL
        .iter()
        .filter(|m| **m != FailureMode::Error)
        .map(|m| {
            let n = failed.iter().filter(|l| l.contains(m)).count();
            let share = if failures == 0 {
                0.0
            } else {
                n as f64 / failures as f64
            };
            (*m, share)
        })
        .collect();
    let counts: Vec<(usize, usize)> = tasks.values().map(|t| (t.samples, t.passed)).collect();
    EvalReport {
        episodes: all.episodes,
        errors: all.errors,
        passed: all.passed,
        pass_rate: all.pass_rate,
        pass_at_k: pass_at_k_table(&counts),
        failure_modes,
        failure_labels,
        failures,
        multi_label_failures,
        paper_view,
        per_category,
        per_complexity,
        tasks: tasks.into_values().collect(),
        mean_turns: if episodes.is_empty() {
            0.0
        } else {
            turns as f64 / episodes.len() as f64
        },
        tokens,
        taken_over,
    }
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

fn group_rows(out: &mut String, title: &str, groups: &BTreeMap<String, GroupStats>) {
    let width = groups
        .keys()
        .map(|k| k.chars().count())
        .max()
        .unwrap_or(0)
        .max(title.len());
    let _ = writeln!(
        out,
        "{title:<width$}  episodes  errors  passed  pass rate  top failure"
    );
    for (name, g) in groups {
        let top = g
            .failure_modes
            .iter()
            .max_by_key(|(m, n)| (**n, std::cmp::Reverse(**m)))
            .map_or("-".to_string(), |(m, n)| format!("{} ({n})", m.as_str()));
        let _ = writeln!(
            out,
            "{name:<width$}  {:>8}  {:>6}  {:>6}  {:>9}  {top}",
            g.episodes,
            g.errors,
            g.passed,
            pct(g.pass_rate)
        );
    }
}

/// `failure labels (overlap; share of N failures): loop 3 (60.0%) ...`:
/// every label but `error`, with its count and share of the failures.
pub fn paper_view_line(r: &EvalReport) -> String {
    let labels: Vec<String> = r
        .paper_view
        .iter()
        .map(|(m, share)| {
            let n = r.failure_labels.get(m).copied().unwrap_or(0);
            format!("{} {n} ({})", m.as_str(), pct(*share))
        })
        .collect();
    format!(
        "failure labels (overlapping; share of {} failures, {} with 2+ labels): {}",
        r.failures,
        r.multi_label_failures,
        labels.join("  ")
    )
}

/// `N episodes taken over by a human, left out of these numbers`.
pub fn taken_over_line(n: usize) -> String {
    let s = if n == 1 { "" } else { "s" };
    format!("{n} episode{s} taken over by a human: left out of these numbers")
}

/// The report as a plain-text table for the terminal.
pub fn format_table(r: &EvalReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "episodes {}  passed {}  errors {}  pass rate {}  mean turns {:.1}  tokens {}",
        r.episodes,
        r.passed,
        r.errors,
        pct(r.pass_rate),
        r.mean_turns,
        r.tokens.total()
    );
    let ks: Vec<String> = r
        .pass_at_k
        .iter()
        .map(|(k, v)| format!("pass@{k} {}", pct(*v)))
        .collect();
    let _ = writeln!(out, "{}", ks.join("  "));
    let modes: Vec<String> = r
        .failure_modes
        .iter()
        .map(|(m, n)| format!("{} {n}", m.as_str()))
        .collect();
    let _ = writeln!(out, "failure modes: {}", modes.join("  "));
    if r.taken_over > 0 {
        let _ = writeln!(out, "{}", taken_over_line(r.taken_over));
    }
    let _ = writeln!(out, "{}\n", paper_view_line(r));
    group_rows(&mut out, "category", &r.per_category);
    out.push('\n');
    group_rows(&mut out, "complexity", &r.per_complexity);
    out
}

/// Colours of the failure-mode chart, in [`FailureMode::ALL`] order (RGB).
pub const CHART_COLORS: [(u8, u8, u8); 9] = [
    (214, 39, 40),
    (255, 127, 14),
    (227, 119, 194),
    (148, 103, 189),
    (140, 86, 75),
    (31, 119, 180),
    (23, 190, 207),
    (188, 189, 34),
    (127, 127, 127),
];

/// Write `report.md`, `pass_rate_by_category.png` and `failure_modes.png`
/// into `dir`. Charts carry no text (fonts may be missing); the Markdown
/// holds the numbers and the legend. Returns the Markdown path.
pub fn write_markdown_report(r: &EvalReport, title: &str, dir: &Path) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let cats: Vec<(String, f64)> = r
        .per_category
        .iter()
        .map(|(k, g)| (k.clone(), g.pass_rate))
        .collect();
    let modes: Vec<usize> = FailureMode::ALL
        .iter()
        .map(|m| r.failure_modes.get(m).copied().unwrap_or(0))
        .collect();
    let chart_err = |e: super::ChartError| std::io::Error::other(e.to_string());
    draw_pass_rate_chart(&cats, &dir.join("pass_rate_by_category.png")).map_err(chart_err)?;
    draw_failure_mix(&modes, &CHART_COLORS, &dir.join("failure_modes.png")).map_err(chart_err)?;

    let mut md = String::new();
    let _ = writeln!(md, "# {title}\n");
    let _ = writeln!(
        md,
        "{}, {} passed, {} (not counted; a dead shell is a failure). Pass rate **{}**, mean turns {:.1}, tokens {}.\n",
        crate::plural::count(r.episodes, "episode"),
        r.passed,
        crate::plural::count(r.errors, "infrastructure error"),
        pct(r.pass_rate),
        r.mean_turns,
        r.tokens.total()
    );
    if r.taken_over > 0 {
        let _ = writeln!(md, "{}.\n", taken_over_line(r.taken_over));
    }
    let _ = writeln!(md, "| k | pass@k |\n|---|---|");
    for (k, v) in &r.pass_at_k {
        let _ = writeln!(md, "| {k} | {} |", pct(*v));
    }
    let _ = writeln!(
        md,
        "\n## Pass rate per category\n\n![pass rate per category](pass_rate_by_category.png)\n"
    );
    let _ = writeln!(md, "Bars left to right; grid lines at 25/50/75%.\n");
    let _ = writeln!(
        md,
        "| category | episodes | errors | passed | pass rate |\n|---|---|---|---|---|"
    );
    for (k, g) in &r.per_category {
        let _ = writeln!(
            md,
            "| {k} | {} | {} | {} | {} |",
            g.episodes,
            g.errors,
            g.passed,
            pct(g.pass_rate)
        );
    }
    let _ = writeln!(md, "\n## Per complexity\n\n| complexity | episodes | errors | passed | pass rate |\n|---|---|---|---|---|");
    for (k, g) in &r.per_complexity {
        let _ = writeln!(
            md,
            "| {k} | {} | {} | {} | {} |",
            g.episodes,
            g.errors,
            g.passed,
            pct(g.pass_rate)
        );
    }
    let _ = writeln!(
        md,
        "\n## Failure modes\n\n![failure-mode mix](failure_modes.png)\n"
    );
    let _ = writeln!(md, "| colour | mode | episodes |\n|---|---|---|");
    for (i, m) in FailureMode::ALL.iter().enumerate() {
        let (cr, cg, cb) = CHART_COLORS[i];
        let _ = writeln!(
            md,
            "| #{cr:02x}{cg:02x}{cb:02x} | {} | {} |",
            m.as_str(),
            modes[i]
        );
    }
    let _ = writeln!(
        md,
        "\n## Failure labels (paper view)\n\nEach failed episode counts under every label that \
         applies (a loop that also runs out of turns is both), as in the paper's failure \
         analysis, so the shares may sum to more than 100%. The table above counts each \
         episode once, under its primary mode. {} failures (infrastructure errors are not \
         failures), {} with more than one label.\n",
        r.failures, r.multi_label_failures
    );
    let _ = writeln!(
        md,
        "| label | failures with it | share of failures |\n|---|---|---|"
    );
    for (m, share) in &r.paper_view {
        let _ = writeln!(
            md,
            "| {} | {} | {} |",
            m.as_str(),
            r.failure_labels.get(m).copied().unwrap_or(0),
            pct(*share)
        );
    }
    let path = dir.join("report.md");
    crate::fsutil::write_atomic(&path, md.as_bytes())?;
    Ok(path)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::agent::{EndReason, Timings};

    /// A finished episode of `task`, for tests of the numbers.
    pub(crate) fn episode(
        task: &str,
        sample: u32,
        passed: bool,
        end_reason: EndReason,
    ) -> EpisodeResult {
        let mode = match end_reason {
            EndReason::ShellDied => FailureMode::ShellDied,
            EndReason::Error | EndReason::Interrupted => FailureMode::Error,
            _ => FailureMode::PrematureDone,
        };
        let failure_mode = (!passed).then_some(mode);
        EpisodeResult {
            task: task.into(),
            category: "c".into(),
            complexity: Some(1),
            sample,
            policy: "p".into(),
            passed,
            reward: f64::from(u8::from(passed)),
            turns: 1,
            end_reason,
            failure_mode,
            failure_labels: failure_mode.into_iter().collect(),
            earliest_failing_step: None,
            error: None,
            tests: Vec::new(),
            steps: Vec::new(),
            tokens: TokenUsage::default(),
            timings: Timings::default(),
            verifier: None,
            limits: None,
            taken_over: None,
            forked_from: None,
        }
    }

    #[test]
    fn dead_shells_count_and_infrastructure_errors_do_not() {
        let eps = [
            episode("a", 0, true, EndReason::Done),
            episode("a", 1, false, EndReason::ShellDied),
            episode("b", 0, false, EndReason::ShellDied),
            episode("b", 1, false, EndReason::Error),
        ];
        let r = evaluate(&eps);
        assert_eq!((r.episodes, r.errors, r.passed), (4, 1, 1));
        assert!((r.pass_rate - 1.0 / 3.0).abs() < 1e-12, "{}", r.pass_rate);
        assert_eq!(r.failure_modes[&FailureMode::ShellDied], 2);
        assert_eq!(r.failure_modes[&FailureMode::Error], 1);
        assert_eq!(r.pass_at_k[&1], (0.5 + 0.0) / 2.0);
        let b = r.tasks.iter().find(|t| t.task == "b").unwrap();
        assert_eq!((b.samples, b.errors, b.passed), (1, 1, 0));
        let table = format_table(&r);
        assert!(table.contains("shell_died 2"), "{table}");
    }

    #[test]
    fn interrupted_episodes_are_unscored_like_errors() {
        let eps = [
            episode("a", 0, true, EndReason::Done),
            episode("a", 1, false, EndReason::Interrupted),
            episode("b", 0, false, EndReason::Done),
        ];
        let r = evaluate(&eps);
        assert_eq!((r.episodes, r.errors, r.passed, r.failures), (3, 1, 1, 1));
        assert!((r.pass_rate - 0.5).abs() < 1e-12, "{}", r.pass_rate);
        let a = r.tasks.iter().find(|t| t.task == "a").unwrap();
        assert_eq!((a.samples, a.errors, a.passed), (1, 1, 1));
    }

    #[test]
    fn taken_over_episodes_are_left_out_and_said_so() {
        let mut helped = episode("a", 1, true, EndReason::Done);
        helped.taken_over = Some(crate::agent::Takeover {
            turn: 2,
            step: 1,
            at: "2026-12-01T00:00:00.000Z".into(),
            after_secs: 3.0,
            human_steps: 1,
            held_secs: 4.0,
        });
        let eps = [
            episode("a", 0, false, EndReason::Done),
            helped,
            episode("b", 0, true, EndReason::Done),
        ];
        let r = evaluate(&eps);
        assert_eq!((r.episodes, r.passed, r.taken_over), (2, 1, 1));
        assert_eq!(r.pass_rate, 0.5);
        let a = r.tasks.iter().find(|t| t.task == "a").unwrap();
        assert_eq!((a.samples, a.passed), (1, 0));
        let table = format_table(&r);
        assert!(
            table.contains("1 episode taken over by a human: left out"),
            "{table}"
        );
        assert!(!format_table(&evaluate(&eps[..1])).contains("taken over"));
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["taken_over"], 1);
        // Reports written before take-overs existed still read.
        let mut old = json.clone();
        old.as_object_mut().unwrap().remove("taken_over");
        assert_eq!(
            serde_json::from_value::<EvalReport>(old)
                .unwrap()
                .taken_over,
            0
        );
    }

    /// Crafted trajectories: a loop that exhausts its turns, a premature
    /// done after malformed replies, a pass; the report counts each failure
    /// once by primary mode and under every label in the paper view.
    #[test]
    fn overlapping_labels_in_the_report_and_the_paper_view() {
        use crate::agent::{EpisodeId, Step, StepKind, TestOutcome, Trajectory};
        let cmd = |i: u32, c: &str| Step {
            command: Some(c.into()),
            exit_code: Some(0),
            ..Step::new(i, StepKind::Command)
        };
        let traj = |steps: Vec<Step>, end_reason| Trajectory {
            messages: Vec::new(),
            steps,
            end_reason,
            error: None,
            tokens: TokenUsage::default(),
            policy_secs: 0.0,
            exec_secs: 0.0,
            agent_secs: 0.0,
            takeover: None,
        };
        let id = |sample| EpisodeId {
            task: "t".into(),
            category: "c".into(),
            complexity: Some(1),
            sample,
            policy: "p".into(),
        };
        let failing = || {
            Ok(vec![TestOutcome {
                name: "t".into(),
                passed: false,
                message: None,
            }])
        };
        let looping = EpisodeResult::new(
            id(0),
            &traj(
                (1..=4).map(|i| cmd(i, "ls -la")).collect(),
                EndReason::MaxTurns,
            ),
            failing(),
            Timings::default(),
        );
        let sloppy = EpisodeResult::new(
            id(1),
            &traj(
                vec![
                    Step::new(1, StepKind::Malformed),
                    Step::new(2, StepKind::Malformed),
                    cmd(3, "touch out.txt"),
                    Step::new(4, StepKind::Done),
                ],
                EndReason::Done,
            ),
            failing(),
            Timings::default(),
        );
        let pass = EpisodeResult::new(
            id(2),
            &traj(vec![cmd(1, "touch out.txt")], EndReason::Done),
            Ok(vec![TestOutcome {
                name: "t".into(),
                passed: true,
                message: None,
            }]),
            Timings::default(),
        );
        assert_eq!(
            looping.failure_labels,
            vec![FailureMode::Loop, FailureMode::TurnExhaustion]
        );
        assert_eq!(sloppy.failure_mode, Some(FailureMode::FormatError));
        assert_eq!(
            sloppy.failure_labels,
            vec![FailureMode::PrematureDone, FailureMode::FormatError]
        );
        assert!(pass.passed && pass.failure_labels.is_empty());
        let r = evaluate(&[looping, sloppy, pass]);
        assert_eq!((r.failures, r.multi_label_failures), (2, 2));
        // Primary modes: one each.
        assert_eq!(r.failure_modes[&FailureMode::Loop], 1);
        assert_eq!(r.failure_modes[&FailureMode::FormatError], 1);
        assert_eq!(r.failure_modes[&FailureMode::TurnExhaustion], 0);
        assert_eq!(r.failure_modes[&FailureMode::PrematureDone], 0);
        // Labels: every one that applies.
        for m in [
            FailureMode::Loop,
            FailureMode::TurnExhaustion,
            FailureMode::PrematureDone,
            FailureMode::FormatError,
        ] {
            assert_eq!(r.failure_labels[&m], 1, "{m:?}");
            assert_eq!(r.paper_view[&m], 0.5, "{m:?}");
        }
        assert!(!r.paper_view.contains_key(&FailureMode::Error));
        let total: f64 = r.paper_view.values().sum();
        assert!((total - 2.0).abs() < 1e-12, "shares sum over 100%: {total}");
        assert_eq!(r.per_category["c"].failure_labels[&FailureMode::Loop], 1);
        // The terminal table, JSON and Markdown show both.
        let table = format_table(&r);
        assert!(table.contains("failure modes: loop 1"), "{table}");
        assert!(
            table.contains("share of 2 failures, 2 with 2+ labels")
                && table.contains("turn_exhaustion 1 (50.0%)"),
            "{table}"
        );
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["failure_modes"]["turn_exhaustion"], 0);
        assert_eq!(v["failure_labels"]["turn_exhaustion"], 1);
        assert_eq!(v["paper_view"]["premature_done"], 0.5);
        let back: EvalReport = serde_json::from_value(v).unwrap();
        assert_eq!(back, r);
        let dir = tempfile::tempdir().unwrap();
        let md = write_markdown_report(&r, "t", dir.path()).unwrap();
        let md = std::fs::read_to_string(md).unwrap();
        assert!(md.contains("## Failure labels (paper view)"), "{md}");
        assert!(md.contains("| loop | 1 | 50.0% |"), "{md}");
        assert!(md.contains("| premature_done | 1 | 50.0% |"), "{md}");
        assert!(md.contains("| format_error | 1 | 50.0% |"), "{md}");
    }
}
