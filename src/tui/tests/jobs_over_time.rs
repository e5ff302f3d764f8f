//! Jobs over time (issue 33, item 8): one id per job (its run's), logs
//! kept across restarts, a key that resumes an interrupted or cancelled
//! evaluation, the selected row marked, globs in every task field, and
//! error text that says a URL once.

use super::*;

/// An evaluation a previous process ran and left interrupted, with its
/// kept log; returns its job id.
fn interrupted_eval(ws: &Workspace) -> String {
    let id = "eval-20261204T100000-1";
    let params = serde_json::json!({
        "policy": "oracle", "tasks": "archive-*", "samples": 1,
        "max_turns": null, "concurrency": 2,
    });
    ws.insert_job(id, "eval", &params).unwrap();
    ws.set_job_run(id, "eval-5f3a9c01de").unwrap();
    ws.update_job(id, "interrupted", 0.5, "episodes · 7 turns")
        .unwrap();
    use std::io::Write;
    let mut log = ws.create_job_log(id).unwrap();
    for line in [
        "archive-logs#0 turn 1: ls ~/logs",
        "archive-logs#0: passed after 3 turns",
        "archive-logs#1 turn 1: tar -czf backup.tgz",
    ] {
        writeln!(log, "{line}").unwrap();
    }
    id.to_string()
}

#[test]
fn an_interrupted_evaluation_keeps_its_log_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let id = interrupted_eval(&ws);
    // A new TUI (a restart) shows the job by its run's id, its log read
    // back from the workspace.
    let mut app = app_on(&ws);
    cmd(&mut app, &ws, Command::ViewJobs);
    let screen = render(&mut app, 120, 40);
    assert!(screen.contains("▶ eval-5f3a9c01de"), "{screen}");
    assert!(!screen.contains(&id), "one id per thing: {screen}");
    assert!(
        screen.contains("archive-logs#0: passed after 3 turns"),
        "{screen}"
    );
    assert!(
        screen.contains("R retry"),
        "the footer names the key: {screen}"
    );
    snap!("jobs_after_restart_80x24", &mut app, 80, 24);
    snap!("jobs_after_restart_120x40", &mut app, 120, 40);
    // R runs the same evaluation again: the same run, so it resumes.
    app.update(Action::Command(Command::JobRetry));
    let want = Request::Launch(JobSpec::Eval {
        policy: "oracle".into(),
        tasks: "archive-*".into(),
        samples: 1,
        max_turns: None,
        concurrency: 2,
    });
    assert!(app.outbox.contains(&want), "{:?}", app.outbox);
    let status = app.status.clone().unwrap();
    assert!(
        !status.error && status.text.starts_with("resuming eval-5f3a9c01de"),
        "{status:?}"
    );
}

/// Issue 47, item 6: after `R` the resumed run is one row (it was two,
/// `interrupted` and `succeeded`, with one id), in its latest state, its
/// log the interrupted job's then the resumed one's.
#[test]
fn a_resumed_evaluation_is_one_row() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let old = interrupted_eval(&ws);
    let mut app = app_on(&ws);
    cmd(&mut app, &ws, Command::ViewJobs);
    cmd(&mut app, &ws, Command::JobRetry);
    // The launcher starts a new job that resumes the same run.
    let new = JobId("eval-20261204T120000-1".into());
    ws.insert_job(&new.0, "eval", &serde_json::json!({"policy": "oracle"}))
        .unwrap();
    ws.set_job_run(&new.0, "eval-5f3a9c01de").unwrap();
    app.update(Action::Job(JobEvent::Started {
        id: new.clone(),
        kind: "eval".into(),
    }));
    app.update(Action::Job(JobEvent::Run {
        id: new.clone(),
        run: "eval-5f3a9c01de".into(),
    }));
    app.update(Action::Job(JobEvent::Log {
        id: new.clone(),
        line: "archive-logs#1: passed after 2 turns".into(),
    }));
    ws.update_job(&new.0, "succeeded", 1.0, "2 episodes: 2 passed")
        .unwrap();
    app.update(Action::Job(JobEvent::Finished {
        id: new.clone(),
        outcome: JobOutcome::Succeeded("2 episodes: 2 passed".into()),
    }));
    pump(&mut app, &ws);
    let rows: Vec<(String, String)> = app
        .jobs
        .items
        .iter()
        .map(|j| (j.shown_id().to_string(), j.status.clone()))
        .collect();
    assert_eq!(
        rows,
        [("eval-5f3a9c01de".to_string(), "succeeded".to_string())]
    );
    let screen = render(&mut app, 120, 40);
    let table_rows: Vec<&str> = screen
        .lines()
        .filter(|l| l.contains("│") && l.contains("eval-5f3a9c01de"))
        .collect();
    assert_eq!(table_rows.len(), 1, "one row for the run: {screen}");
    assert!(table_rows[0].contains("succeeded"), "{screen}");
    assert!(!screen.contains("interrupted"), "{screen}");
    assert!(!screen.contains(&old), "{screen}");
    let before = screen.find("archive-logs#0: passed after 3 turns").unwrap();
    let resumed = screen.find("── resumed ──").unwrap();
    let after = screen.find("archive-logs#1: passed after 2 turns").unwrap();
    assert!(before < resumed && resumed < after, "{screen}");
    snap!("jobs_resumed_one_row_120x40", &mut app, 120, 40);
    // A restart reads the journal's two jobs: still one row.
    let mut again = app_on(&ws);
    cmd(&mut again, &ws, Command::ViewJobs);
    assert_eq!(again.jobs.items.len(), 1);
    assert_eq!(again.jobs.items[0].status, "succeeded");
}

/// `R` on a training job runs it again in the same run directory (the
/// job's own, or the form's output dir): the run resumes from its newest
/// checkpoint instead of starting afresh.
#[test]
fn r_resumes_a_training_job_in_its_run_directory() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let params = serde_json::json!({"init": "tiny", "steps": 4, "sft": false});
    ws.insert_job("train-1", "train", &params).unwrap();
    ws.update_job("train-1", "cancelled", 0.1, "").unwrap();
    let mut app = app_on(&ws);
    cmd(&mut app, &ws, Command::ViewJobs);
    app.update(Action::Command(Command::JobRetry));
    let status = app.status.clone().unwrap();
    assert!(
        !status.error && status.text == "resuming train-1 from its newest checkpoint",
        "{status:?}"
    );
    let want = Request::Launch(JobSpec::Train(TrainSpec {
        steps: 4,
        sft: false,
        out: "checkpoints/train-1".into(),
        ..TrainSpec::default()
    }));
    assert!(app.outbox.contains(&want), "{:?}", app.outbox);
    // A run directory the form named is kept.
    app.outbox.clear();
    let params = serde_json::json!({"init": "tiny", "out": "/runs/mine"});
    ws.insert_job("train-2", "train", &params).unwrap();
    ws.update_job("train-2", "failed", 0.3, "").unwrap();
    let mut app = app_on(&ws);
    cmd(&mut app, &ws, Command::ViewJobs);
    let row = app
        .jobs
        .items
        .iter()
        .position(|j| j.id == "train-2")
        .unwrap();
    app.jobs.selected = row;
    app.update(Action::Command(Command::JobRetry));
    let want = Request::Launch(JobSpec::Train(TrainSpec {
        out: "/runs/mine".into(),
        ..TrainSpec::default()
    }));
    assert!(app.outbox.contains(&want), "{:?}", app.outbox);
    // A journal whose parameters are not an object is no panic.
    ws.insert_job("train-3", "train", &serde_json::json!(["odd"]))
        .unwrap();
    ws.update_job("train-3", "failed", 0.3, "").unwrap();
    let mut app = app_on(&ws);
    cmd(&mut app, &ws, Command::ViewJobs);
    let row = app.jobs.items.iter().position(|j| j.id == "train-3");
    app.jobs.selected = row.unwrap();
    app.update(Action::Command(Command::JobRetry));
    assert!(app.status.is_some());
}

#[test]
fn retry_says_why_not() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    ws.insert_job("import-1", "import", &serde_json::json!({}))
        .unwrap();
    ws.update_job("import-1", "failed", 0.1, "").unwrap();
    let mut app = app_on(&ws);
    cmd(&mut app, &ws, Command::ViewJobs);
    cmd(&mut app, &ws, Command::JobRetry);
    let status = app.status.clone().unwrap();
    assert!(
        status.error && status.text.contains("cannot be run again"),
        "{status:?}"
    );
    // A job still running is not started twice.
    app.update(Action::Job(JobEvent::Started {
        id: JobId("eval-live".into()),
        kind: "eval".into(),
    }));
    cmd(&mut app, &ws, Command::Top);
    app.update(Action::Command(Command::JobRetry));
    let status = app.status.clone().unwrap();
    assert!(
        status.error && status.text.contains("still running"),
        "{status:?}"
    );
    assert!(!app.outbox.iter().any(|r| matches!(r, Request::Launch(_))));
}

#[test]
fn a_live_job_is_named_by_its_run_and_moves_per_turn() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let mut app = app_on(&ws);
    cmd(&mut app, &ws, Command::ViewJobs);
    let id = JobId("eval-20261204T120000-1".into());
    app.update(Action::Job(JobEvent::Started {
        id: id.clone(),
        kind: "eval".into(),
    }));
    app.update(Action::Job(JobEvent::Run {
        id: id.clone(),
        run: "eval-77aa00bb11".into(),
    }));
    // Each turn re-reports the progress with the turns played.
    let (ctx, mut rx) = crate::jobs::JobContext::standalone("eval");
    ctx.progress(0, 2, "episodes");
    ctx.turn();
    ctx.turn();
    let mut last = None;
    while let Ok(JobEvent::Progress {
        done, total, stage, ..
    }) = rx.try_recv()
    {
        last = Some((done, total, stage));
    }
    let (done, total, stage) = last.unwrap();
    assert_eq!((done, total, stage.as_str()), (0, 2, "episodes · 2 turns"));
    app.update(Action::Job(JobEvent::Progress {
        id: id.clone(),
        done,
        total,
        stage,
    }));
    let screen = render(&mut app, 120, 40);
    assert!(screen.contains("▶ eval-77aa00bb11"), "{screen}");
    assert!(screen.contains("episodes · 2 turns"), "{screen}");
    assert!(!screen.contains(&id.0), "{screen}");
    // It fails reaching a model server: the URL is said once.
    app.update(Action::Job(JobEvent::Finished {
        id,
        outcome: JobOutcome::Failed(
            "cannot reach the model server at http://127.0.0.1:9/v1/chat/completions: error sending request for url (http://127.0.0.1:9/v1/chat/completions): connection refused".into(),
        ),
    }));
    let screen = render(&mut app, 120, 40);
    assert!(
        screen.contains("error sending request: connection ref"),
        "{screen}"
    );
    assert!(!screen.contains("for url"), "{screen}");
    let status = app.status.clone().unwrap();
    assert!(
        status.text.starts_with("eval-77aa00bb11: cannot reach"),
        "{status:?}"
    );
    assert_eq!(status.text.matches("http://").count(), 1, "{status:?}");
}

#[test]
fn every_task_field_takes_globs() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let mut app = app_on(&ws);
    cmd(&mut app, &ws, Command::ViewJobs);
    cmd(&mut app, &ws, Command::JobValidate);
    for _ in 0.."archive-logs".len() {
        press(&mut app, KeyCode::Backspace);
    }
    typed(&mut app, "count-*, nope*");
    press(&mut app, KeyCode::Enter);
    let error = app
        .form
        .as_ref()
        .and_then(|(_, f)| f.error.clone())
        .unwrap();
    assert_eq!(error.0, "tasks");
    assert!(error.1.starts_with("nope* matches no task"), "{error:?}");
    for _ in 0..", nope*".len() {
        press(&mut app, KeyCode::Backspace);
    }
    typed(&mut app, ",archive-*");
    press(&mut app, KeyCode::Enter);
    assert!(app.outbox.contains(&Request::Launch(JobSpec::Validate {
        tasks: vec!["archive-logs".into(), "count-words".into()]
    })));
}

#[test]
fn the_offline_form_has_split_and_families() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let mut app = app_on(&ws);
    cmd(&mut app, &ws, Command::ViewJobs);
    cmd(&mut app, &ws, Command::JobOffline);
    snap!("jobs_offline_form_80x24", &mut app, 80, 24);
    let form_error = |app: &App| app.form.as_ref().and_then(|(_, f)| f.error.clone());
    // count, seed, split, families: a bad split and an unknown family are
    // shown on their field.
    for _ in 0..2 {
        press(&mut app, KeyCode::Tab);
    }
    typed(&mut app, "test");
    press(&mut app, KeyCode::Enter);
    assert_eq!(form_error(&app).unwrap().0, "split");
    for _ in 0.."test".len() {
        press(&mut app, KeyCode::Backspace);
    }
    typed(&mut app, "dev");
    press(&mut app, KeyCode::Tab);
    typed(&mut app, "no-such-family");
    press(&mut app, KeyCode::Enter);
    let (field, why) = form_error(&app).unwrap();
    assert_eq!(field, "families");
    assert!(why.starts_with("no family no-such-family"), "{why}");
    for _ in 0.."no-such-family".len() {
        press(&mut app, KeyCode::Backspace);
    }
    let family = crate::procgen::families()[0].name();
    typed(&mut app, family);
    press(&mut app, KeyCode::Enter);
    assert!(app.form.is_none(), "{:?}", form_error(&app));
    let launched = app.outbox.iter().find_map(|r| match r {
        Request::Launch(spec @ JobSpec::Offline { .. }) => Some(spec.clone()),
        _ => None,
    });
    match launched {
        Some(JobSpec::Offline {
            split, families, ..
        }) => {
            assert_eq!(split, Some(crate::procgen::Split::Dev));
            assert_eq!(families, vec![family.to_string()]);
        }
        other => panic!("{other:?}"),
    }
}
