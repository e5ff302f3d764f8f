//! Audits in the Tasks view: the Audit column, the `f` audit filter, the
//! header's count of flagged tasks, the detail's Audit tab with the
//! evidence, and the audit launch form.

use super::*;
use crate::audit::{AuditReport, AuditRow, Check, CheckResult, CheckStatus, Finding};

/// archive-logs: a surviving mutant and a flaky test; count-words: clean;
/// fix-perms: never audited.
fn audited(dir: &Path) -> Workspace {
    let ws = fixture(dir);
    let weak = Finding {
        check: Check::WeakTests,
        label: "weak-tests".into(),
        summary: "the final tests accept a mutant: /home/user/backup/logs.tar.gz emptied".into(),
        tests: vec!["test_final_state.py::test_archive_has_logs".into()],
        evidence: "--- /home/user/backup/logs.tar.gz (oracle)\n+++ /home/user/backup/logs.tar.gz (mutant)\n@@ emptied @@\n-(142 bytes)\n+(0 bytes)".into(),
    };
    let flaky = Finding {
        check: Check::Flaky,
        label: "flaky".into(),
        summary: "1 test changes its verdict between runs".into(),
        tests: vec!["test_final_state.py::test_archive_has_logs".into()],
        evidence: "run 1: passed\nrun 2: failed\nrun 3: passed".into(),
    };
    let mut weak_check = CheckResult::done(Check::WeakTests, vec![weak], vec![]);
    weak_check.seconds = 12.5;
    let report = AuditReport {
        format: crate::audit::AUDIT_FORMAT,
        task_id: "archive-logs".into(),
        digest: "d".into(),
        audited_at: "2026-12-05T09:00:00Z".into(),
        seconds: 31.0,
        has_oracle: true,
        checks: vec![
            CheckResult::done(Check::Underspecified, vec![], vec![]),
            CheckResult::done(Check::PassesWithoutWork, vec![], vec![]),
            weak_check,
            CheckResult::done(Check::Flaky, vec![flaky], vec![]),
            CheckResult::new(
                Check::TimeOrder,
                CheckStatus::OutOfTime {
                    done: "the clock run; not the reversed order".into(),
                },
            ),
            CheckResult::skipped(Check::NeedsNetwork, "the oracle passes offline"),
        ],
        mutation: Some(crate::audit::MutationScore {
            killed: 7,
            total: 8,
        }),
    };
    let clean = AuditReport {
        task_id: "count-words".into(),
        checks: vec![CheckResult::done(Check::Underspecified, vec![], vec![])],
        mutation: None,
        ..report.clone()
    };
    for r in [report, clean] {
        crate::audit::file::write(&ws.task_dir(&r.task_id), &r).unwrap();
        ws.index_audit(&AuditRow::of(&r)).unwrap();
    }
    ws
}

fn shown(app: &App) -> Vec<String> {
    let (_, n) = app.tasks.counts();
    let mut ids: Vec<String> = app
        .tasks
        .rows()
        .iter()
        .filter(|r| {
            crate::tui::views::tasks::audit_matches(
                app.tasks.filter.audit.as_deref().unwrap_or("x"),
                app.tasks.audit(&r.id),
            ) || app.tasks.filter.audit.is_none()
        })
        .map(|r| r.id.clone())
        .collect();
    ids.sort();
    assert_eq!(ids.len(), n, "the view shows {n} rows: {ids:?}");
    ids
}

#[test]
fn the_audit_column_and_the_flagged_count() {
    let dir = tempfile::tempdir().unwrap();
    let ws = audited(dir.path());
    let mut app = app_on(&ws);
    let wide = render(&mut app, 120, 40);
    assert!(wide.contains("1 flagged"), "{wide}");
    assert!(wide.contains("2 weak,flaky"), "{wide}");
    assert!(wide.contains("✓ clean"), "{wide}");
    snap!("tasks_audit_80x24", &mut app, 80, 24);
    snap!("tasks_audit_120x40", &mut app, 120, 40);
    // Sorting by audit: not audited, clean, then by findings.
    for _ in 0..7 {
        cmd(&mut app, &ws, Command::SortNext);
    }
    assert_eq!(app.tasks.sort.label(), "audit");
    cmd(&mut app, &ws, Command::Bottom);
    assert_eq!(app.tasks.selected_id().as_deref(), Some("archive-logs"));
    cmd(&mut app, &ws, Command::SortReverse);
    cmd(&mut app, &ws, Command::Bottom);
    assert_eq!(app.tasks.selected_id().as_deref(), Some("fix-perms"));
}

#[test]
fn the_audit_filter_takes_labels_as_shown_and_stored() {
    let dir = tempfile::tempdir().unwrap();
    let ws = audited(dir.path());
    let mut app = app_on(&ws);
    // `f` in Tasks is the audit picker: typed as shown ("weak"), picked.
    key(&mut app, &ws, KeyCode::Char('f'));
    assert!(app.picker.is_some());
    let list = render(&mut app, 80, 24);
    assert!(list.contains("weak-tests (weak)"), "{list}");
    typed(&mut app, "weak");
    press(&mut app, KeyCode::Enter);
    pump(&mut app, &ws);
    assert_eq!(app.tasks.filter.audit.as_deref(), Some("weak-tests"));
    assert_eq!(shown(&app), ["archive-logs"]);
    assert!(render(&mut app, 120, 40).contains("audit weak-tests"));
    // The short form and the stored label filter alike; so do the others.
    for (want, ids) in [
        ("flaky", vec!["archive-logs"]),
        ("underspec", vec![]),
        ("clean", vec!["count-words"]),
        ("not-audited", vec!["fix-perms"]),
        ("flagged", vec!["archive-logs"]),
    ] {
        app.tasks.set_audit_filter(Some(want.into()));
        assert_eq!(shown(&app), ids, "{want}");
    }
    cmd(&mut app, &ws, Command::ClearFilters);
    assert_eq!(app.tasks.counts(), (3, 3));
    // The search finds labels as stored and as shown.
    for q in ["weak-tests", "weak"] {
        app.tasks.set_search(q.into());
        assert_eq!(app.tasks.counts().1, 1, "{q}");
    }
}

#[test]
fn the_audit_tab_shows_each_check_and_the_evidence() {
    let dir = tempfile::tempdir().unwrap();
    let ws = audited(dir.path());
    let mut app = app_on(&ws);
    cmd(&mut app, &ws, Command::PrevTab);
    assert_eq!(
        app.tasks.detail.tab,
        crate::tui::views::detail::DetailTab::Audit
    );
    snap!("audit_tab_120x40", &mut app, 120, 40);
    let screen = render(&mut app, 120, 40);
    for want in [
        "2 finding(s): weak-tests, flaky",
        "mutation score 7/8 (88%)",
        "weak-tests          FOUND",
        "TIMED OUT",
        "skipped      0.0 s  the oracle passes offline",
    ] {
        assert!(screen.contains(want), "{want:?} in:\n{screen}");
    }
    // Scrollable like the other tabs: the evidence further down comes up.
    cmd(&mut app, &ws, Command::Select);
    cmd(&mut app, &ws, Command::PageDown);
    cmd(&mut app, &ws, Command::PageDown);
    for _ in 0..6 {
        cmd(&mut app, &ws, Command::Down);
    }
    let scrolled = render(&mut app, 80, 24);
    assert!(scrolled.contains("run 2: failed"), "{scrolled}");
    snap!("detail_audit_scrolled_80x24", &mut app, 80, 24);
    // A task never audited says how to audit it.
    cmd(&mut app, &ws, Command::Back);
    cmd(&mut app, &ws, Command::Bottom);
    let none = render(&mut app, 120, 40);
    assert!(none.contains("Not audited yet."), "{none}");
    assert!(none.contains("endless tasks audit fix-perms"), "{none}");
}

#[test]
fn the_audit_form_launches_an_audit_job() {
    let dir = tempfile::tempdir().unwrap();
    let ws = audited(dir.path());
    let mut app = app_on(&ws);
    // From Tasks, `U` opens the form on the selected task.
    cmd(&mut app, &ws, Command::JobAudit);
    assert!(app.form.is_some());
    snap!("audit_form_80x24", &mut app, 80, 24);
    // A check that does not exist is refused on its field.
    press(&mut app, KeyCode::Tab);
    for _ in 0..3 {
        press(&mut app, KeyCode::Backspace);
    }
    typed(&mut app, "flaky,weak");
    press(&mut app, KeyCode::Enter);
    let err = app
        .form
        .as_ref()
        .and_then(|(_, f)| f.error.clone())
        .unwrap();
    assert_eq!(err.0, "checks");
    for _ in 0..4 {
        press(&mut app, KeyCode::Backspace);
    }
    typed(&mut app, "weak-tests");
    press(&mut app, KeyCode::Enter);
    assert!(app.form.is_none());
    assert!(app.outbox.contains(&Request::Launch(JobSpec::Audit {
        tasks: "archive-logs".into(),
        checks: "flaky,weak-tests".into(),
        concurrency: 2,
    })));
    pump(&mut app, &ws);
    // Its progress shows in Jobs; when it finishes the tasks (and their
    // audits) are read again.
    let job = JobId("job-audit".into());
    app.update(Action::Job(JobEvent::Finished {
        id: job,
        outcome: JobOutcome::Succeeded("1 task audited: 1 with findings (weak-tests)".into()),
    }));
    assert!(app.outbox.contains(&Request::LoadTasks));
    let flaky = AuditReport {
        task_id: "fix-perms".into(),
        ..crate::audit::file::read(&ws.task_dir("archive-logs"))
            .unwrap()
            .unwrap()
    };
    ws.index_audit(&AuditRow::of(&flaky)).unwrap();
    pump(&mut app, &ws);
    assert!(render(&mut app, 120, 40).contains("2 flagged"));
}
