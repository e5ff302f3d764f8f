//! Jobs view: launch forms, the jobs list with progress, logs, cancel
//! and journal, and a real job through the launcher.

use super::*;

#[test]
fn launch_forms_build_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let mut app = app_on(&ws);
    cmd(&mut app, &ws, Command::ViewJobs);
    snap!("jobs_empty_80x24", &mut app, 80, 24);

    // The evaluation form, with defaults; keys go to the form, not the keymap.
    cmd(&mut app, &ws, Command::JobEval);
    assert!(app.form.is_some());
    snap!("jobs_eval_form_80x24", &mut app, 80, 24);
    press(&mut app, KeyCode::Tab);
    typed(&mut app, "archive-*");
    press(&mut app, KeyCode::Tab);
    press(&mut app, KeyCode::Backspace);
    typed(&mut app, "q");
    press(&mut app, KeyCode::Enter);
    assert!(app.form.is_some(), "a bad number keeps the form open");
    let form_error = |app: &App| app.form.as_ref().and_then(|(_, f)| f.error.clone());
    assert_eq!(form_error(&app).unwrap().0, "samples");
    assert!(render(&mut app, 80, 24).contains("✗ samples: expected a whole number"));
    press(&mut app, KeyCode::Backspace);
    assert!(form_error(&app).is_none(), "an edit clears the error");
    typed(&mut app, "2");
    press(&mut app, KeyCode::Enter);
    assert!(app.form.is_none());
    assert!(app.outbox.contains(&Request::Launch(JobSpec::Eval {
        policy: "oracle".into(),
        tasks: "archive-*".into(),
        samples: 2,
        max_turns: None,
        concurrency: 2,
    })));
    pump(&mut app, &ws);

    // Validation defaults to the selected task.
    cmd(&mut app, &ws, Command::JobValidate);
    press(&mut app, KeyCode::Enter);
    assert!(app.outbox.contains(&Request::Launch(JobSpec::Validate {
        tasks: vec!["archive-logs".into()]
    })));
    pump(&mut app, &ws);

    // Offline generation gets its place; LLM generation needs a model.
    cmd(&mut app, &ws, Command::JobOffline);
    press(&mut app, KeyCode::Enter);
    assert!(app.outbox.contains(&Request::Launch(JobSpec::Offline {
        count: 10,
        seed: 1,
        split: None,
        families: Vec::new(),
    })));
    pump(&mut app, &ws);
    cmd(&mut app, &ws, Command::JobGenerate);
    press(&mut app, KeyCode::Enter);
    assert!(app.form.is_some());
    assert_eq!(form_error(&app).unwrap().0, "model");
    press(&mut app, KeyCode::Esc);
    assert!(app.form.is_none());
}

#[test]
fn forms_check_their_values_inline_and_remember_them() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let mut app = app_on(&ws);
    cmd(&mut app, &ws, Command::ViewJobs);
    cmd(&mut app, &ws, Command::JobEval);
    let form_error = |app: &App| app.form.as_ref().and_then(|(_, f)| f.error.clone());
    // A policy naming a file that is not there.
    for _ in 0.."oracle".len() {
        press(&mut app, KeyCode::Backspace);
    }
    typed(&mut app, "script:/no/such/agent.txt");
    press(&mut app, KeyCode::Enter);
    let (field, why) = form_error(&app).unwrap();
    assert_eq!(field, "policy");
    assert!(why.contains("no such file"), "{why}");
    let screen = render(&mut app, 80, 24);
    assert!(
        screen.contains("✗ policy: /no/such/agent.txt: no such file"),
        "{screen}"
    );
    snap!("jobs_form_error_80x24", &mut app, 80, 24);
    // A glob that matches no task.
    let script = dir.path().join("agent.txt");
    std::fs::write(&script, "ls\n").unwrap();
    let policy = format!("script:{}", script.display());
    app.form.as_mut().unwrap().1.fields[0].input =
        crate::tui::widgets::input::TextInput::new(policy.clone());
    press(&mut app, KeyCode::Tab);
    typed(&mut app, "archive-*,nope*");
    press(&mut app, KeyCode::Enter);
    let (field, why) = form_error(&app).unwrap();
    assert_eq!(
        (field, why.as_str()),
        (
            "tasks",
            "nope* matches no task (ids or * globs, comma-separated)"
        )
    );
    for _ in 0..",nope*".len() {
        press(&mut app, KeyCode::Backspace);
    }
    press(&mut app, KeyCode::Enter);
    assert!(app.form.is_none(), "{:?}", form_error(&app));
    pump(&mut app, &ws);
    // The form opens again with the values that started the job, also in a
    // new TUI on the same workspace.
    let mut again = app_on(&ws);
    for app in [&mut app, &mut again] {
        cmd(app, &ws, Command::ViewJobs);
        cmd(app, &ws, Command::JobEval);
        let form = &app.form.as_ref().unwrap().1;
        assert_eq!(form.value("policy"), policy);
        assert_eq!(form.value("tasks"), "archive-*");
        press(app, KeyCode::Esc);
    }
    // The form's focus is marked by shape.
    cmd(&mut again, &ws, Command::JobEval);
    let screen = render(&mut again, 80, 24);
    assert!(
        screen.lines().any(|l| l.contains("▶     policy:")),
        "{screen}"
    );
}

#[test]
fn jobs_list_progress_logs_cancel_and_journal() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let mut app = app_on(&ws);
    app.view = View::Jobs;
    let id = |s: &str| JobId(s.into());
    for ev in [
        JobEvent::Started {
            id: id("validate-1"),
            kind: "validate".into(),
        },
        JobEvent::Progress {
            id: id("validate-1"),
            done: 3,
            total: 3,
            stage: "done".into(),
        },
        JobEvent::Finished {
            id: id("validate-1"),
            outcome: JobOutcome::Succeeded("3/3 valid".into()),
        },
        JobEvent::Started {
            id: id("eval-2"),
            kind: "eval".into(),
        },
        JobEvent::Progress {
            id: id("eval-2"),
            done: 1,
            total: 4,
            stage: "episodes".into(),
        },
        JobEvent::Log {
            id: id("eval-2"),
            line: "archive-logs#0 turn 1: tar -czf logs.tar.gz".into(),
        },
        JobEvent::Log {
            id: id("eval-2"),
            line: "archive-logs#0: passed after 2 turns".into(),
        },
    ] {
        app.update(Action::Job(ev));
    }
    app.outbox.clear();
    assert_eq!(app.jobs.items[0].id, "eval-2");
    snap!("jobs_running_120x40", &mut app, 120, 40);
    snap!("jobs_running_80x24", &mut app, 80, 24);

    app.update(Action::Command(Command::JobCancel));
    assert_eq!(app.outbox, vec![Request::CancelJob("eval-2".into())]);
    app.outbox.clear();
    app.update(Action::Command(Command::Down));
    app.update(Action::Command(Command::JobCancel));
    assert!(app.outbox.is_empty());
    assert!(app.status.as_ref().unwrap().text.contains("not running"));

    // Finishing reloads episodes, tasks and the journal.
    app.update(Action::Job(JobEvent::Finished {
        id: id("eval-2"),
        outcome: JobOutcome::Cancelled,
    }));
    assert!(app.outbox.contains(&Request::LoadEpisodes));
    assert!(app.outbox.contains(&Request::LoadJobs));
    app.outbox.clear();

    // Past jobs come from the journal.
    let jobs = JobManager::new(Some(dir.path())).unwrap();
    let past = jobs
        .spawn("generate", serde_json::json!({}), |ctx| {
            ctx.progress(1, 2, "half");
            anyhow::bail!("no model")
        })
        .unwrap();
    jobs.wait(&past);
    for a in serve(&ws, Request::LoadJobs) {
        app.update(a);
    }
    let item = app.jobs.items.iter().find(|i| i.id == past.0).unwrap();
    assert_eq!(item.status, "failed");
    assert!(item.message.contains("no model"));
}

#[test]
fn launcher_runs_a_validation_job_and_forwards_its_events() {
    let dir = tempfile::tempdir().unwrap();
    let _ws = fixture(dir.path());
    let (tx, rx) = std::sync::mpsc::channel();
    let launcher = crate::tui::runtime::launcher::Launcher::new(dir.path(), tx).unwrap();
    let id = launcher
        .launch(JobSpec::Validate {
            tasks: vec!["fix-perms".into()],
        })
        .unwrap();
    let mut app = App::new(Theme::default(), Keymap::default(), "fixture-ws");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let outcome = loop {
        let msg = rx
            .recv_timeout(deadline.saturating_duration_since(std::time::Instant::now()))
            .expect("the job finishes");
        if let crate::tui::action::Msg::Action(a) = msg {
            if let Action::Job(JobEvent::Finished { outcome, .. }) = &a {
                let o = outcome.clone();
                app.update(a);
                break o;
            }
            app.update(a);
        }
    };
    // Valid where the sandbox runs, invalid (with the reason) where it does not.
    match &outcome {
        JobOutcome::Succeeded(m) => assert!(m.starts_with("fix-perms: "), "{m}"),
        other => panic!("{other:?}"),
    }
    let log = app.jobs.logs.get(&id.0).expect("log lines arrived");
    assert!(log.iter().any(|l| l.starts_with("fix-perms: ")), "{log:?}");
    assert_eq!(app.jobs.items[0].status, "succeeded");
    // Cancelling a finished job is refused.
    assert!(!launcher.cancel("no-such-job"));
}

#[test]
fn a_validation_job_names_the_failure_classes() {
    use crate::verify::Blocker;
    use crate::verify::FailureClass::{BuildNetwork, OracleFails, StandInDifference};
    use crate::workbench::blockers::{blockers_by_class, Invalid};
    use crate::workbench::validate::{test_verdict, verdicts_summary};
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let mut app = app_on(&ws);
    app.view = View::Jobs;
    let id = JobId("validate-7".into());
    let blocked = |id: &str, b: Blocker| {
        let mut v = test_verdict(id, &[b.class]);
        v.validation.as_mut().unwrap().blocker = Some(b);
        v
    };
    let verdicts = [
        test_verdict("archive-logs", &[]),
        test_verdict("fix-perms", &[OracleFails]),
        test_verdict("pip-task", &[OracleFails]),
        blocked(
            "net-task",
            Blocker {
                class: BuildNetwork,
                host: Some("github.com".into()),
                stand_in: None,
                difference: None,
                line: Some("curl: (6) Could not resolve host: github.com".into()),
            },
        ),
        blocked(
            "r-task",
            Blocker {
                class: StandInDifference,
                host: None,
                stand_in: Some("localhost/stand-in/debian:trixie".into()),
                difference: Some("version r-base-core=4.3.3-2build2 is not in its archive".into()),
                line: None,
            },
        ),
    ];
    // What the launcher's validation job logs and finishes with.
    let lines = blockers_by_class(verdicts.iter().filter(|v| !v.ok).map(Invalid::of));
    let summary = verdicts_summary(&verdicts);
    app.update(Action::Job(JobEvent::Started {
        id: id.clone(),
        kind: "validate".into(),
    }));
    for line in lines {
        app.update(Action::Job(JobEvent::Log {
            id: id.clone(),
            line,
        }));
    }
    app.update(Action::Job(JobEvent::Finished {
        id: id.clone(),
        outcome: JobOutcome::Succeeded(summary),
    }));
    let screen = render(&mut app, 120, 40);
    assert!(
        screen
            .contains("1/5 valid; invalid: 2 oracle-fails, 1 build-network, 1 stand-in-difference"),
        "{screen}"
    );
    assert!(
        screen.contains("net-task: github.com cannot be reached"),
        "{screen}"
    );
    assert!(
        screen.contains(
            "r-task: stand-in localhost/stand-in/debian:trixie: version r-base-core=4.3.3-2build2"
        ),
        "{screen}"
    );
    snap!("jobs_validation_classes_120x40", &mut app, 120, 40);
}

#[test]
fn forms_fit_tiny_terminals() {
    let mut app = App::new(Theme::default(), Keymap::default(), "fixture-ws");
    app.view = View::Jobs;
    for c in [Command::JobEval, Command::JobTrain] {
        app.update(Action::Command(c));
        for (w, h) in [(1, 1), (12, 4), (30, 8)] {
            render(&mut app, w, h);
        }
        press(&mut app, KeyCode::Esc);
    }
}

/// The foreground colour of the first cell of `needle` on the screen.
fn fg_of(app: &mut App, w: u16, h: u16, needle: &str) -> Option<ratatui::style::Color> {
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    t.draw(|f| app.draw(f)).unwrap();
    let buf = t.backend().buffer().clone();
    for y in 0..h {
        let line: String = (0..w).map(|x| buf[(x, y)].symbol().to_string()).collect();
        if let Some(at) = line.find(needle) {
            let x = line[..at].chars().count() as u16;
            return buf[(x, y)].fg.into();
        }
    }
    None
}

#[test]
fn failed_empty_and_cancelled_jobs_tell_the_truth() {
    let mut app = App::new(Theme::default(), Keymap::default(), "fixture-ws");
    app.view = View::Jobs;
    let id = |s: &str| JobId(s.into());
    let unreachable =
        "cannot reach the model server at http://localhost:8000/v1: connection refused";
    let nothing = "0 tasks written: all 10 tasks of seed 1 are already present; next free seed 11";
    for ev in [
        JobEvent::Started {
            id: id("generate-1"),
            kind: "generate".into(),
        },
        JobEvent::Finished {
            id: id("generate-1"),
            outcome: JobOutcome::Failed(unreachable.into()),
        },
        JobEvent::Started {
            id: id("generate-offline-2"),
            kind: "generate-offline".into(),
        },
        JobEvent::Finished {
            id: id("generate-offline-2"),
            outcome: JobOutcome::Empty(nothing.into()),
        },
        JobEvent::Started {
            id: id("train-3"),
            kind: "train".into(),
        },
        JobEvent::Progress {
            id: id("train-3"),
            done: 3,
            total: 10,
            stage: "ppo steps".into(),
        },
        // A multi-line entry keeps its lines.
        JobEvent::Log {
            id: id("train-3"),
            line: "ran: cat <<EOF\nline two\nEOF".into(),
        },
    ] {
        app.update(Action::Job(ev));
    }
    for n in 0..40 {
        app.update(Action::Job(JobEvent::Log {
            id: id("train-3"),
            line: format!(
                "step {n}: loss 0.{n:02} — a long line that wraps at 80 columns, {}",
                "x".repeat(40)
            ),
        }));
    }
    app.outbox.clear();
    // The log follows its tail, wrapped lines included.
    let screen = render(&mut app, 80, 24);
    assert!(screen.contains("step 39"), "{screen}");
    // Cancelling says so until the job ends, then how far it got.
    app.update(Action::Command(Command::JobCancel));
    assert_eq!(app.jobs.items[0].status, "cancelling…");
    app.update(Action::Job(JobEvent::Progress {
        id: id("train-3"),
        done: 4,
        total: 10,
        stage: "ppo steps".into(),
    }));
    assert_eq!(app.jobs.items[0].status, "cancelling…");
    snap!("jobs_cancelling_80x24", &mut app, 80, 24);
    app.update(Action::Job(JobEvent::Finished {
        id: id("train-3"),
        outcome: JobOutcome::Cancelled,
    }));
    assert_eq!(app.jobs.items[0].message, "cancelled at 4/10 (ppo steps)");
    assert_eq!((app.jobs.items[0].done, app.jobs.items[0].total), (4, 10));
    // Scrolled back, the log says so; the newest lines are below.
    app.update(Action::Command(Command::PageUp));
    let screen = render(&mut app, 80, 24);
    assert!(screen.contains("pgdn follows"), "{screen}");
    assert!(!screen.contains("step 39"), "{screen}");
    app.update(Action::Command(Command::PageDown));
    let screen = render(&mut app, 80, 24);
    assert!(screen.contains("step 39"), "{screen}");

    // The failed job with its reason (red), the empty one in amber.
    app.update(Action::Command(Command::Down));
    let screen = render(&mut app, 120, 40);
    assert!(screen.contains("cannot reach the model server"), "{screen}");
    assert!(screen.contains("0 tasks written"), "{screen}");
    let theme = Theme::default();
    assert_eq!(
        fg_of(&mut app, 120, 40, "0 tasks written"),
        Some(theme.warning)
    );
    assert_eq!(fg_of(&mut app, 120, 40, "empty"), Some(theme.warning));
    assert_eq!(
        fg_of(&mut app, 120, 40, "cannot reach"),
        Some(theme.failure)
    );
    snap!("jobs_failed_and_empty_80x24", &mut app, 80, 24);
    snap!("jobs_failed_and_empty_120x40", &mut app, 120, 40);

    // Enter opens the selected job's log full-screen; esc goes back.
    app.update(Action::Command(Command::Up));
    app.update(Action::Command(Command::Select));
    let screen = render(&mut app, 80, 24);
    assert!(screen.contains("full screen"), "{screen}");
    assert!(
        !screen.contains("stage / result"),
        "the table gives way: {screen}"
    );
    assert!(screen.contains("step 39"), "{screen}");
    snap!("jobs_log_full_80x24", &mut app, 80, 24);
    app.update(Action::Command(Command::Back));
    assert!(render(&mut app, 80, 24).contains("stage / result"));
}

#[test]
fn quitting_with_running_jobs_asks_first() {
    let mut app = App::new(Theme::default(), Keymap::default(), "fixture-ws");
    app.view = View::Jobs;
    let id = |s: &str| JobId(s.into());
    app.update(Action::Job(JobEvent::Started {
        id: id("eval-1"),
        kind: "eval".into(),
    }));
    // A job of another process (from the journal) does not count.
    app.jobs.set_rows(vec![crate::store::JobRow {
        id: "eval-other".into(),
        kind: "eval".into(),
        params: serde_json::json!({}),
        status: "running".into(),
        progress: 0.5,
        message: "episodes".into(),
        created_at: "2026-01-01T00:00:00Z".into(),
        updated_at: "2026-01-01T00:00:00Z".into(),
    }]);
    app.outbox.clear();
    app.update(Action::Command(Command::Quit));
    assert!(!app.should_quit);
    let status = app.status.clone().unwrap();
    assert!(
        status.text.starts_with("1 job running: q quits"),
        "{}",
        status.text
    );
    snap!("jobs_quit_asks_80x24", &mut app, 80, 24);
    // Any other key stays.
    app.update(Action::Command(Command::Down));
    app.update(Action::Command(Command::Quit));
    assert!(!app.should_quit);
    // C cancels the running jobs and stays.
    app.update(Action::Command(Command::JobCancel));
    // (The view also reads the selected other process's kept log.)
    app.outbox.retain(|r| !matches!(r, Request::LoadJobLog(_)));
    assert_eq!(app.outbox, vec![Request::CancelJob("eval-1".into())]);
    assert!(!app.should_quit);
    // Once they stopped, q quits at once.
    app.update(Action::Job(JobEvent::Finished {
        id: id("eval-1"),
        outcome: JobOutcome::Cancelled,
    }));
    app.update(Action::Command(Command::Quit));
    assert!(app.should_quit);
    // Asked twice: quits.
    let mut app = App::new(Theme::default(), Keymap::default(), "fixture-ws");
    app.update(Action::Job(JobEvent::Started {
        id: id("eval-2"),
        kind: "eval".into(),
    }));
    app.update(Action::Command(Command::Quit));
    app.update(Action::Command(Command::Quit));
    assert!(app.should_quit);
}
