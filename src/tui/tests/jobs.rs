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
    assert!(app.status.as_ref().unwrap().text.contains("samples"));
    press(&mut app, KeyCode::Backspace);
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
    assert!(app
        .outbox
        .contains(&Request::Launch(JobSpec::Offline { count: 10, seed: 1 })));
    pump(&mut app, &ws);
    cmd(&mut app, &ws, Command::JobGenerate);
    press(&mut app, KeyCode::Enter);
    assert!(app.form.is_some());
    assert!(app.status.as_ref().unwrap().text.contains("model"));
    press(&mut app, KeyCode::Esc);
    assert!(app.form.is_none());
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
