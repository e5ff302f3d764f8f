//! Training view and the training form: run directories written with
//! `rl::run_files` in a temp dir (deterministic values), read by the
//! incremental `RunCache`, drawn at 80x24 and 120x40.

use super::*;

fn info(id: &str, status: RunStatus, steps: u64, steps_done: u64) -> RunInfo {
    RunInfo {
        id: id.into(),
        created: "2026-11-29T12:00:00Z".into(),
        updated: "2026-11-29T12:41:07Z".into(),
        init: "tiny".into(),
        params: 1_234_567,
        tasks: 24,
        eval_tasks: 8,
        steps,
        steps_done,
        sft_steps: 30,
        samples: 4,
        max_turns: 8,
        status,
        message: None,
        recipe: None,
    }
}

/// A PPO step with smooth, deterministic values.
fn step(i: u64) -> StepMetrics {
    let t = i as f64;
    StepMetrics {
        step: i,
        reward: 0.1 + 0.03 * t + 0.02 * (t * 1.3).sin(),
        pass_rate: 0.05 + 0.03 * t,
        policy_loss: -0.02 + 0.01 * (t * 0.9).cos(),
        value_loss: 0.5 / (1.0 + 0.2 * t),
        clip_frac: 0.05 + 0.01 * (t * 0.5).sin().abs(),
        entropy: 2.2 - 0.04 * t,
        approx_kl: 0.004 + 0.001 * (t * 0.7).sin().abs(),
        kl_ref: 0.0,
        grad_norm: 1.5 - 0.03 * t,
        lr: 1e-4,
        agent_tokens: 2000,
        tokens: 9000,
        tokens_per_s: 3000.0 + 50.0 * t,
        seconds: 3.0 - 0.05 * t,
    }
}

fn eval(label: &str, step: u64, passed: usize) -> EvalRecord {
    EvalRecord {
        label: label.into(),
        step,
        pass_at_1: passed as f64 / 40.0,
        passed,
        episodes: 40,
        run_dir: PathBuf::from("runs").join(label),
        seconds: 12.0,
    }
}

/// Write one run directory under `root`.
fn write_run(root: &Path, info: &RunInfo, ppo_steps: u64, evals: &[EvalRecord], ckpts: &[u64]) {
    let dir = root.join(&info.id);
    std::fs::create_dir_all(&dir).unwrap();
    run_files::write_info(&dir, info).unwrap();
    for i in 1..=info.sft_steps {
        let m = SftMetrics {
            step: i,
            loss: 3.0 * (-(i as f64) / 12.0).exp() + 0.4,
            agent_tokens: 512,
            tokens_per_s: 4000.0,
            lr: 3e-4,
        };
        run_files::append_line(&dir, run_files::SFT_METRICS, &m).unwrap();
    }
    for i in 1..=ppo_steps {
        run_files::append_line(&dir, run_files::PPO_METRICS, &step(i)).unwrap();
    }
    for e in evals {
        run_files::append_line(&dir, run_files::EVALS, e).unwrap();
    }
    for c in ckpts {
        std::fs::create_dir_all(dir.join(format!("step-{c:08}"))).unwrap();
    }
}

/// A finished run (SFT, 20 PPO steps, dev pass@1 before and after) and a
/// stopped one (a non-finite loss at step 12).
fn write_runs(root: &Path) {
    let mut done = info("train-20261129-120000", RunStatus::Finished, 20, 20);
    done.message = Some("20 steps in 41 min".into());
    write_run(
        root,
        &done,
        20,
        &[eval("before", 0, 10), eval("after", 20, 16)],
        &[5, 10, 15, 20],
    );
    let mut stopped = info("train-20261128-090000", RunStatus::Stopped, 20, 11);
    stopped.sft_steps = 0;
    stopped.message =
        Some("stopped: loss is not finite at step 12; last good checkpoint step-10".into());
    write_run(root, &stopped, 11, &[eval("before", 0, 9)], &[5, 10]);
}

fn training_app(root: &Path) -> App {
    let ws = fixture(root);
    let mut app = app_on(&ws);
    cmd(&mut app, &ws, Command::ViewTraining);
    let runs = RunCache::default()
        .refresh(&ws.checkpoints_dir())
        .expect("the first refresh reports");
    app.update(Action::TrainingLoaded(runs));
    app
}

#[test]
fn training_view_shows_runs_and_their_dashboards() {
    let dir = tempfile::tempdir().unwrap();
    write_runs(&dir.path().join("checkpoints"));
    let mut app = training_app(dir.path());
    assert_eq!(app.view, View::Training);
    assert_eq!(app.training.runs.len(), 2);
    snap!("training_run_80x24", &mut app, 80, 24);
    snap!("training_run_120x40", &mut app, 120, 40);
    let screen = render(&mut app, 120, 40);
    for want in ["0.250 (10/40)", "0.400 (16/40) +15.0 pts", "step-00000020"] {
        assert!(screen.contains(want), "{want} missing:\n{screen}");
    }

    // The charts cycle, both ways.
    press(&mut app, KeyCode::Char(']'));
    assert_eq!(app.training.chart, ChartKind::Loss);
    snap!("training_loss_120x40", &mut app, 120, 40);
    press(&mut app, KeyCode::Char(']'));
    assert_eq!(app.training.chart, ChartKind::Stability);
    snap!("training_stability_80x24", &mut app, 80, 24);
    press(&mut app, KeyCode::Char(']'));
    assert_eq!(app.training.chart, ChartKind::Throughput);
    press(&mut app, KeyCode::Char(']'));
    assert_eq!(app.training.chart, ChartKind::Sft);
    snap!("training_sft_80x24", &mut app, 80, 24);
    press(&mut app, KeyCode::Char(']'));
    assert_eq!(app.training.chart, ChartKind::Reward);
    press(&mut app, KeyCode::Char('['));
    assert_eq!(app.training.chart, ChartKind::Sft);

    // The stopped run: its message, and an SFT chart that says why it is empty.
    press(&mut app, KeyCode::Down);
    assert_eq!(app.training.selected, 1);
    let screen = render(&mut app, 120, 40);
    assert!(
        screen.contains("no supervised warm-start in this run"),
        "{screen}"
    );
    press(&mut app, KeyCode::Char(']'));
    snap!("training_stopped_80x24", &mut app, 80, 24);
    snap!("training_stopped_120x40", &mut app, 120, 40);
    let screen = render(&mut app, 120, 40);
    assert!(screen.contains("loss is not finite at step 12"), "{screen}");
    assert!(screen.contains("0.23→…"), "{screen}");
}

#[test]
fn the_cache_rereads_only_what_changed_and_keeps_the_selection() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("checkpoints");
    let mut cache = RunCache::default();
    // No directory yet: one (empty) report, then silence.
    assert_eq!(cache.refresh(&root), Some(Vec::new()));
    assert_eq!(cache.refresh(&root), None);
    write_runs(&root);
    let runs = cache.refresh(&root).unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0].ppo.len(), 20);
    assert_eq!(cache.refresh(&root), None);

    let mut app = App::new(Default::default(), Default::default(), "ws");
    app.update(Action::TrainingLoaded(runs));
    app.view = View::Training;
    press(&mut app, KeyCode::Down);
    let stopped = app.training.selected_run().unwrap().dir.clone();

    // A new step and a new, newer run: the stopped run stays selected.
    let dir2 = root.join("train-20261128-090000");
    run_files::append_line(&dir2, run_files::PPO_METRICS, &step(12)).unwrap();
    write_run(
        &root,
        &info("train-20261130-080000", RunStatus::Running, 5, 0),
        0,
        &[],
        &[],
    );
    let runs = cache.refresh(&root).unwrap();
    assert_eq!(runs.len(), 3);
    assert_eq!(runs[2].ppo.len(), 12);
    assert_eq!(runs[2], run_files::load_run(&dir2));
    app.update(Action::TrainingLoaded(runs));
    assert_eq!(app.training.selected_run().unwrap().dir, stopped);
    assert_eq!(app.training.selected, 2);

    // A torn line is skipped; a removed run disappears.
    std::fs::write(dir2.join(run_files::EVALS), "{\"label\": \"after\", \"st").unwrap();
    let runs = cache.refresh(&root).unwrap();
    assert!(runs[2].evals.is_empty());
    std::fs::remove_dir_all(&dir2).unwrap();
    let runs = cache.refresh(&root).unwrap();
    assert_eq!(runs.len(), 2);
    app.update(Action::TrainingLoaded(runs));
    assert_eq!(app.training.selected, 1);
}

#[test]
fn the_train_form_builds_a_training_job() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let mut app = app_on(&ws);
    cmd(&mut app, &ws, Command::ViewJobs);
    cmd(&mut app, &ws, Command::JobTrain);
    assert!(app.form.is_some());
    snap!("jobs_train_form_80x24", &mut app, 80, 24);
    snap!("jobs_train_form_120x40", &mut app, 120, 40);

    typed(&mut app, "archive-*");
    press(&mut app, KeyCode::Tab);
    typed(&mut app, "count-*");
    // sft: a word it does not know keeps the form open.
    press(&mut app, KeyCode::Tab);
    press(&mut app, KeyCode::Tab);
    for _ in 0..3 {
        press(&mut app, KeyCode::Backspace);
    }
    typed(&mut app, "maybe");
    press(&mut app, KeyCode::Enter);
    assert!(app.form.is_some());
    let error = app.form.as_ref().and_then(|(_, f)| f.error.clone());
    assert_eq!(error.map(|e| e.0), Some("sft"));
    for _ in 0..5 {
        press(&mut app, KeyCode::Backspace);
    }
    typed(&mut app, "no");
    // steps 10 -> 5; minutes 1.5.
    press(&mut app, KeyCode::Tab);
    press(&mut app, KeyCode::Tab);
    press(&mut app, KeyCode::Backspace);
    press(&mut app, KeyCode::Backspace);
    typed(&mut app, "5");
    press(&mut app, KeyCode::Tab);
    typed(&mut app, "1.5");
    press(&mut app, KeyCode::Enter);
    assert!(app.form.is_none(), "{:?}", app.status);
    let want = TrainSpec {
        tasks: "archive-*".into(),
        dev: "count-*".into(),
        sft: false,
        steps: 5,
        minutes: Some(1.5),
        ..TrainSpec::default()
    };
    // The job starts, and the form's values are saved for next time.
    assert_eq!(app.outbox.len(), 2, "{:?}", app.outbox);
    assert!(matches!(app.outbox[0], Request::SaveFormValues(_)));
    assert_eq!(app.outbox[1], Request::Launch(JobSpec::Train(want)));
    app.outbox.clear();

    // From the Training view too; a bad number is named.
    app.update(Action::Command(Command::ViewTraining));
    app.update(Action::Command(Command::JobTrain));
    assert!(app.form.is_some());
    for _ in 0..5 {
        press(&mut app, KeyCode::Tab);
    }
    typed(&mut app, "x");
    press(&mut app, KeyCode::Enter);
    let error = app.form.as_ref().and_then(|(_, f)| f.error.clone());
    assert_eq!(error.map(|e| e.0), Some("steps"));
    assert!(app.outbox.is_empty());
    press(&mut app, KeyCode::Backspace);
    // A LoRA rank on the tiny init (trained from scratch) is named.
    for _ in 0..5 {
        press(&mut app, KeyCode::Tab);
    }
    typed(&mut app, "8");
    press(&mut app, KeyCode::Enter);
    let error = app.form.as_ref().and_then(|(_, f)| f.error.clone());
    assert_eq!(error.as_ref().map(|e| e.0), Some("lora rank"), "{error:?}");
    assert!(error.unwrap().1.contains("pretrained"));
    // So is a negative KL coefficient.
    for _ in 0..8 {
        press(&mut app, KeyCode::Backspace);
    }
    press(&mut app, KeyCode::Tab);
    typed(&mut app, "-1");
    press(&mut app, KeyCode::Enter);
    let error = app.form.as_ref().and_then(|(_, f)| f.error.clone());
    assert_eq!(error.as_ref().map(|e| e.0), Some("kl coef"), "{error:?}");
    press(&mut app, KeyCode::Esc);
    assert!(app.form.is_none());
}

/// Issue 33 item 10: a training run this TUI starts is selected in the
/// Training view once its directory (named after the job) appears; from
/// there `C` cancels its job and Enter opens the job (and its log) in Jobs.
#[test]
fn the_training_view_follows_a_started_run() {
    let dir = tempfile::tempdir().unwrap();
    let checkpoints = dir.path().join("checkpoints");
    write_runs(&checkpoints);
    let ws = fixture(dir.path());
    let mut app = app_on(&ws);
    cmd(&mut app, &ws, Command::ViewTraining);
    let job = "train-20261127T080000-1";
    app.update(Action::Job(JobEvent::Started {
        id: JobId(job.into()),
        kind: "train".into(),
    }));
    let mut cache = RunCache::default();
    app.update(Action::TrainingLoaded(
        cache.refresh(&checkpoints).expect("the first refresh"),
    ));
    // Not there yet: the newest run stays selected.
    assert_eq!(app.training.selected, 0);
    let mut started = info(job, RunStatus::Running, 20, 3);
    started.created = "2026-11-27T08:00:00Z".into();
    write_run(&checkpoints, &started, 3, &[eval("before", 0, 8)], &[]);
    app.update(Action::TrainingLoaded(
        cache
            .refresh(&checkpoints)
            .expect("the new run is reported"),
    ));
    assert_eq!(app.training.runs.len(), 3);
    assert_eq!(app.training.selected_job().as_deref(), Some(job));
    let screen = render(&mut app, 120, 40);
    assert!(screen.contains(&format!("▶ {job}")), "{screen}");
    snap!("training_follows_started_run_80x24", &mut app, 80, 24);
    snap!("training_follows_started_run_120x40", &mut app, 120, 40);
    // Moving away and back to it keeps working; the selection sticks on
    // later reloads.
    cmd(&mut app, &ws, Command::Top);
    assert_ne!(app.training.selected_job().as_deref(), Some(job));
    cmd(&mut app, &ws, Command::Bottom);
    // Cancel asks the worker to cancel the run's job.
    app.update(Action::Command(Command::JobCancel));
    assert!(
        app.outbox
            .iter()
            .any(|r| matches!(r, Request::CancelJob(id) if id == job)),
        "{:?}",
        app.outbox
    );
    app.outbox.clear();
    // Enter: the job in the Jobs view, selected.
    app.update(Action::Command(Command::Select));
    assert_eq!(app.view, View::Jobs);
    assert_eq!(app.jobs.selected_item().map(|j| j.id.as_str()), Some(job));
    // A run no job of this workspace wrote says so.
    cmd(&mut app, &ws, Command::ViewTraining);
    cmd(&mut app, &ws, Command::Top);
    app.update(Action::Command(Command::JobCancel));
    assert!(app.outbox.is_empty());
    let screen = render(&mut app, 120, 40);
    assert!(screen.contains("no job wrote run"), "{screen}");
}

/// A training form whose held-out tasks are also trained on is refused
/// before launch, by the check the job makes, and opens again with its
/// values and the message on the `dev` field.
#[test]
fn a_dev_overlap_is_refused_in_the_form_before_launch() {
    use crate::tui::launch::train::check;
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let overlap = TrainSpec {
        tasks: "archive-*".into(),
        dev: "archive-logs".into(),
        out: "runs/a".into(),
        ..TrainSpec::default()
    };
    let refusal = check(ws.root(), &overlap).unwrap_err();
    assert_eq!(refusal.field, "dev");
    assert!(
        refusal.message.contains("overlaps the training tasks")
            && refusal.message.contains("archive-logs"),
        "{refusal:?}"
    );
    assert_eq!(refusal.out, "runs/a");
    let apart = TrainSpec {
        dev: "count-*".into(),
        ..overlap.clone()
    };
    assert_eq!(check(ws.root(), &apart), Ok(()));
    let missing = TrainSpec {
        init: "/nonexistent/model".into(),
        ..apart
    };
    assert_eq!(check(ws.root(), &missing).unwrap_err().field, "init");

    // The app opens the form again, the field at fault named.
    let mut app = app_on(&ws);
    cmd(&mut app, &ws, Command::ViewJobs);
    app.update(Action::TrainRefused(refusal));
    let (_, form) = app.form.as_ref().expect("the form is open again");
    assert_eq!(form.value("output dir"), "runs/a");
    let error = form.error.clone().unwrap();
    assert_eq!(error.0, "dev");
    assert!(error.1.contains("overlaps the training tasks"), "{error:?}");
}
