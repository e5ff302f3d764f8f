//! The detail pane's Audit tab: how each check of the task's stored audit
//! ended (passed, found something, skipped and why, timed out, failed) and
//! each finding with its evidence (the tests concerned, a mutant's diff, a
//! shortcut's transcript).

use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};

use crate::audit::{AuditReport, CheckStatus};
use crate::tui::theme::Theme;

/// Evidence lines shown per finding; the rest is in `audit.json`.
pub const EVIDENCE_LINES: usize = 120;

/// The Audit tab's lines for task `id`'s stored report (`None`: never
/// audited).
pub fn audit_lines(report: Option<&AuditReport>, id: &str, theme: &Theme) -> Vec<Line<'static>> {
    let Some(r) = report else {
        return vec![
            Line::from(Span::styled("Not audited yet.", theme.muted())),
            Line::from(Span::styled(
                format!("Press U to launch an audit job, or run `endless tasks audit {id}`."),
                theme.muted(),
            )),
        ];
    };
    let mut out = Vec::new();
    let fg = Style::new().fg(theme.foreground);
    let labels = r.labels();
    let verdict = if labels.is_empty() {
        Span::styled("no findings".to_string(), theme.success())
    } else {
        Span::styled(
            format!("{} finding(s): {}", r.findings().count(), labels.join(", ")),
            theme.warning().add_modifier(Modifier::BOLD),
        )
    };
    out.push(Line::from(verdict));
    let mut facts = format!(
        "audited {}  ·  {:.1} s  ·  oracle {}",
        r.audited_at,
        r.seconds,
        if r.has_oracle { "yes" } else { "none" }
    );
    if let Some(m) = r.mutation {
        facts.push_str(&format!(
            "  ·  mutation score {}/{} ({:.0}%)",
            m.killed,
            m.total,
            m.ratio() * 100.0
        ));
    }
    out.push(Line::from(Span::styled(facts, theme.muted())));
    out.push(Line::from(""));
    out.push(Line::from(Span::styled("── checks ──", theme.accent())));
    for c in &r.checks {
        let (word, why, style) = match &c.status {
            CheckStatus::Ok => ("passed", String::new(), theme.success()),
            CheckStatus::Finding => ("FOUND", String::new(), theme.warning()),
            CheckStatus::Skipped { why } => ("skipped", why.clone(), theme.muted()),
            CheckStatus::OutOfTime { done } => ("TIMED OUT", done.clone(), theme.warning()),
            CheckStatus::Error { message } => ("error", message.clone(), theme.warning()),
        };
        let mut spans = vec![
            Span::styled(format!("{:<20}", c.check.name()), fg),
            Span::styled(format!("{word:<10}"), style),
            Span::styled(format!("{:>6.1} s", c.seconds), theme.muted()),
        ];
        if !c.findings.is_empty() {
            spans.push(Span::styled(
                format!("  {} finding(s)", c.findings.len()),
                theme.warning(),
            ));
        }
        if !why.is_empty() {
            spans.push(Span::styled(format!("  {why}"), theme.muted()));
        }
        out.push(Line::from(spans));
        for note in &c.notes {
            out.push(Line::from(Span::styled(
                format!("    note: {note}"),
                theme.muted(),
            )));
        }
    }
    let findings: Vec<_> = r.findings().collect();
    if !findings.is_empty() {
        out.push(Line::from(""));
        out.push(Line::from(Span::styled(
            format!("── findings ({}) ──", findings.len()),
            theme.accent(),
        )));
    }
    for (n, f) in findings.iter().enumerate() {
        if n > 0 {
            out.push(Line::from(""));
        }
        out.push(Line::from(vec![
            Span::styled(
                format!("[{}] ", f.label),
                theme.warning().add_modifier(Modifier::BOLD),
            ),
            Span::styled(f.summary.clone(), fg),
        ]));
        out.push(Line::from(Span::styled(
            format!("  check {}", f.check),
            theme.muted(),
        )));
        if !f.tests.is_empty() {
            out.push(Line::from(vec![
                Span::styled("  tests ", theme.muted()),
                Span::styled(f.tests.join(", "), fg),
            ]));
        }
        if !f.evidence.trim().is_empty() {
            out.push(Line::from(Span::styled("  evidence", theme.muted())));
            let lines: Vec<&str> = f.evidence.lines().collect();
            for l in lines.iter().take(EVIDENCE_LINES) {
                out.push(evidence_line(l, theme));
            }
            if lines.len() > EVIDENCE_LINES {
                out.push(Line::from(Span::styled(
                    format!(
                        "    … {} more lines in tasks/{id}/{}",
                        lines.len() - EVIDENCE_LINES,
                        crate::audit::file::AUDIT_FILE
                    ),
                    theme.muted(),
                )));
            }
        }
    }
    out
}

/// One evidence line, indented; a diff's added and removed lines coloured.
fn evidence_line(l: &str, theme: &Theme) -> Line<'static> {
    let text = format!("    {}", l.replace('\t', "    "));
    let style = if l.starts_with("+++") || l.starts_with("---") || l.starts_with("@@") {
        theme.muted()
    } else if l.starts_with('+') {
        theme.success()
    } else if l.starts_with('-') {
        theme.warning()
    } else {
        Style::new().fg(theme.foreground)
    };
    Line::from(Span::styled(text, style))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::{Check, CheckResult, Finding};

    fn text(lines: &[Line<'_>]) -> String {
        lines
            .iter()
            .map(|l| {
                l.spans
                    .iter()
                    .map(|s| s.content.as_ref())
                    .collect::<String>()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn each_check_and_finding_shows_with_its_evidence() {
        let theme = Theme::default();
        let long: String = (0..EVIDENCE_LINES + 5)
            .map(|i| format!("line {i}\n"))
            .collect();
        let report = AuditReport {
            format: crate::audit::AUDIT_FORMAT,
            task_id: "t".into(),
            digest: String::new(),
            audited_at: "2026-12-05T09:00:00Z".into(),
            seconds: 4.0,
            has_oracle: true,
            checks: vec![
                CheckResult::done(
                    Check::WeakTests,
                    vec![Finding {
                        check: Check::WeakTests,
                        label: "weak-tests".into(),
                        summary: "a mutant survives".into(),
                        tests: vec!["test_out".into()],
                        evidence: "--- a/out.txt\n+++ b/out.txt\n-42\n".into(),
                    }],
                    vec![],
                ),
                CheckResult::skipped(Check::NeedsNetwork, "no pasta"),
                CheckResult::new(
                    Check::Flaky,
                    CheckStatus::OutOfTime {
                        done: "2 of 3 runs".into(),
                    },
                ),
                CheckResult::done(
                    Check::CheapSolutions,
                    vec![Finding {
                        check: Check::CheapSolutions,
                        label: "cheap-solution".into(),
                        summary: "empty-files passes".into(),
                        tests: vec![],
                        evidence: long,
                    }],
                    vec![],
                ),
                CheckResult::done(Check::Underspecified, vec![], vec!["nothing".into()]),
            ],
            mutation: Some(crate::audit::MutationScore {
                killed: 3,
                total: 4,
            }),
        };
        let t = text(&audit_lines(Some(&report), "t", &theme));
        for want in [
            "2 finding(s): weak-tests, cheap-solution",
            "mutation score 3/4 (75%)",
            "skipped      0.0 s  no pasta",
            "TIMED OUT",
            "2 of 3 runs",
            "underspecified      passed",
            "note: nothing",
            "[weak-tests] a mutant survives",
            "tests test_out",
            "    -42",
            "… 5 more lines in tasks/t/audit.json",
        ] {
            assert!(t.contains(want), "{want:?} missing from:\n{t}");
        }
        assert!(!t.contains(&format!("line {}", EVIDENCE_LINES)), "{t}");
        let none = text(&audit_lines(None, "t", &theme));
        assert!(none.contains("Not audited yet") && none.contains("tasks audit t"));
    }
}
