//! Episodes view and the episode inspector (trajectory, tests, replay,
//! rating, export, side by side) over fixture files in a temp dir.

use super::*;

#[test]
fn episodes_view_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let mut app = app_on(&ws);
    cmd(&mut app, &ws, Command::ViewEpisodes);
    snap!("episodes_80x24", &mut app, 80, 24);
    snap!("episodes_120x40", &mut app, 120, 40);
    // The failure filter is a fuzzy picker: any, any failure, each mode.
    cmd(&mut app, &ws, Command::FilterFailure);
    snap!("episodes_failure_picker_80x24", &mut app, 80, 24);
    key(&mut app, &ws, KeyCode::Down);
    key(&mut app, &ws, KeyCode::Enter);
    assert_eq!(app.episodes.failure.as_deref(), Some("any failure"));
    let screen = render(&mut app, 120, 40);
    assert!(screen.contains("2/3 shown, 0 passed"), "{screen}");
    cmd(&mut app, &ws, Command::FilterFailure);
    typed(&mut app, "lop");
    key(&mut app, &ws, KeyCode::Enter);
    assert_eq!(app.episodes.failure.as_deref(), Some("loop"));
    // Esc leaves the filter as it was.
    cmd(&mut app, &ws, Command::FilterFailure);
    typed(&mut app, "turn");
    key(&mut app, &ws, KeyCode::Esc);
    assert!(app.picker.is_none());
    assert_eq!(app.episodes.failure.as_deref(), Some("loop"));
    snap!("episodes_loop_80x24", &mut app, 80, 24);
    // A secondary label filters too, picked by the name the screen shows.
    cmd(&mut app, &ws, Command::FilterFailure);
    typed(&mut app, "turn exhaustion");
    key(&mut app, &ws, KeyCode::Enter);
    assert_eq!(app.episodes.failure.as_deref(), Some("turn_exhaustion"));
    snap!("episodes_turn_exhaustion_120x40", &mut app, 120, 40);
    // T jumps to the episode's task, on its Episodes tab (Enter inspects).
    cmd(&mut app, &ws, Command::GotoTask);
    assert_eq!(app.view, View::Tasks);
    assert_eq!(app.tasks.selected_id().as_deref(), Some("archive-logs"));
    let screen = render(&mut app, 120, 40);
    assert!(screen.contains("max_turns"), "{screen}");
}

#[test]
fn episodes_search_and_sort() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let mut app = app_on(&ws);
    cmd(&mut app, &ws, Command::ViewEpisodes);
    key(&mut app, &ws, KeyCode::Char('/'));
    typed(&mut app, "COUNT");
    let screen = render(&mut app, 120, 40);
    assert!(screen.contains("search episodes: COUNT"), "{screen}");
    assert!(screen.contains("1/3 shown"), "{screen}");
    key(&mut app, &ws, KeyCode::Enter);
    assert!(app.prompt.is_none());
    assert_eq!(app.episodes.selected_row().unwrap().task_id, "count-words");
    cmd(&mut app, &ws, Command::ClearFilters);
    // Newest first by default; then run, task, result, turns: turns
    // descending puts the 64-turn episodes first.
    cmd(&mut app, &ws, Command::SortNext);
    cmd(&mut app, &ws, Command::SortNext);
    cmd(&mut app, &ws, Command::SortNext);
    cmd(&mut app, &ws, Command::SortNext);
    assert_eq!(
        app.episodes.sort,
        crate::tui::views::episodes::EpisodeSort::Turns
    );
    cmd(&mut app, &ws, Command::SortReverse);
    cmd(&mut app, &ws, Command::Top);
    assert_eq!(app.episodes.selected_row().unwrap().turns, 64);
    let screen = render(&mut app, 120, 40);
    assert!(screen.contains("Turns↓"), "{screen}");
    assert!(screen.contains("sort turns↓"), "{screen}");
    cmd(&mut app, &ws, Command::Bottom);
    assert_eq!(app.episodes.selected_row().unwrap().turns, 3);
}

fn step(turn: u32, command: &str, exit: i32, output: &str) -> Step {
    Step {
        command: Some(command.into()),
        think: Some(format!("try {command}")),
        exit_code: Some(exit),
        output: output.into(),
        ..Step::new(turn, StepKind::Command)
    }
}

fn result(sample: u32, passed: bool) -> EpisodeResult {
    let mut steps = vec![
        step(1, "ls ~/logs", 0, "a.log\nb.log\nc.log"),
        step(
            2,
            "tar -czf ~/backup/logs.tar.gz ~/logs",
            2,
            "tar: /home/user/backup: Cannot open: No such file or directory",
        ),
    ];
    if !passed {
        for t in 3..7 {
            steps.push(step(t, "cat ~/notes.txt", 1, "cat: No such file"));
        }
    }
    EpisodeResult {
        task: "archive-logs".into(),
        category: "archives".into(),
        complexity: Some(2),
        sample,
        policy: "script:fixture".into(),
        passed,
        reward: if passed { 1.0 } else { 0.0 },
        turns: steps.len() as u32,
        end_reason: if passed {
            EndReason::Done
        } else {
            EndReason::MaxTurns
        },
        failure_mode: (!passed).then_some(FailureMode::Loop),
        failure_labels: Vec::new(),
        earliest_failing_step: (!passed).then_some(1),
        error: None,
        tests: vec![TestOutcome {
            name: "test_final_state::test_archive_has_logs".into(),
            passed,
            message: (!passed).then(|| {
                "AssertionError: /home/user/backup/logs.tar.gz is missing\nassert False".into()
            }),
        }],
        steps,
        tokens: Default::default(),
        timings: Default::default(),
        verifier: None,
        limits: None,
        taken_over: None,
        forked_from: None,
    }
}

/// Result JSON and a small recording next to the fixture's episode rows.
pub(super) fn write_episode_files(ws: &Workspace) {
    let dir = ws.root().join("runs/eval-1/episodes/archive-logs");
    std::fs::create_dir_all(&dir).unwrap();
    for (sample, passed) in [(0, true), (1, false)] {
        std::fs::write(
            dir.join(format!("{sample}.json")),
            serde_json::to_vec(&result(sample, passed)).unwrap(),
        )
        .unwrap();
    }
    let cast = concat!(
        "{\"version\":2,\"width\":40,\"height\":6}\n",
        "[0.1,\"o\",\"$ ls ~/logs\\r\\n\"]\n",
        "[0.3,\"o\",\"a.log  b.log  c.log\\r\\n$ \"]\n",
        "[1.5,\"o\",\"cat ~/notes.txt\\r\\ncat: No such file\\r\\n$ \"]\n",
    );
    std::fs::write(dir.join("1.cast"), cast).unwrap();
}

#[test]
fn inspector_shows_trajectory_tests_replay_and_rates() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    write_episode_files(&ws);
    let mut app = app_on(&ws);
    cmd(&mut app, &ws, Command::ViewEpisodes);
    cmd(&mut app, &ws, Command::Down);
    assert_eq!(app.episodes.selected_row().unwrap().sample, 1);
    cmd(&mut app, &ws, Command::Select);
    let insp = app.inspector.as_ref().expect("inspector open");
    assert!(insp.episode.result.is_ok(), "{:?}", insp.episode.result);
    let screen = render(&mut app, 120, 40);
    assert!(screen.contains("earliest failing step"), "{screen}");
    assert!(screen.contains("↻ loop"), "{screen}");
    snap!("inspector_trajectory_120x40", &mut app, 120, 40);
    snap!("inspector_trajectory_80x24", &mut app, 80, 24);

    cmd(&mut app, &ws, Command::NextTab);
    let screen = render(&mut app, 120, 40);
    assert!(screen.contains("logs.tar.gz is missing"), "{screen}");
    snap!("inspector_tests_120x40", &mut app, 120, 40);

    // Replay: starts at the end; step back, play, speed.
    cmd(&mut app, &ws, Command::NextTab);
    assert!(render(&mut app, 80, 24).contains("cat: No such file"));
    snap!("inspector_replay_80x24", &mut app, 80, 24);
    cmd(&mut app, &ws, Command::Left);
    assert!(!render(&mut app, 80, 24).contains("cat: No such file"));
    cmd(&mut app, &ws, Command::Faster);
    cmd(&mut app, &ws, Command::PlayPause);
    app.update(Action::Tick(1.0));
    let r = app.inspector.as_ref().unwrap().replay.as_ref().unwrap();
    assert_eq!((r.position, r.speed, r.playing), (3, 2.0, false));

    // Rating, label, note go to the store.
    cmd(&mut app, &ws, Command::Rate2);
    cmd(&mut app, &ws, Command::Label);
    typed(&mut app, "test");
    assert_eq!(app.picker.as_ref().unwrap().1.shown(), ["test wrong"]);
    key(&mut app, &ws, KeyCode::Enter);
    key(&mut app, &ws, KeyCode::Char('n'));
    typed(&mut app, "loops on a missing file");
    key(&mut app, &ws, KeyCode::Enter);
    let row = ws
        .list_episodes(None)
        .unwrap()
        .into_iter()
        .find(|r| r.task_id == "archive-logs" && r.sample == 1)
        .unwrap();
    assert_eq!(row.rating, Some(2));
    assert_eq!(row.label.as_deref(), Some("test_wrong"));
    assert_eq!(row.notes, "loops on a missing file");

    // Export writes ratings.jsonl.
    cmd(&mut app, &ws, Command::ExportRatings);
    let text = std::fs::read_to_string(dir.path().join("ratings.jsonl")).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(v["label"], "test_wrong");
    assert_eq!(v["rating"], 2);

    // Side by side with the passing sample.
    cmd(&mut app, &ws, Command::PrevTab);
    cmd(&mut app, &ws, Command::PrevTab);
    cmd(&mut app, &ws, Command::Compare);
    assert!(app.inspector.as_ref().unwrap().other.is_some());
    snap!("inspector_side_by_side_120x40", &mut app, 120, 40);
    cmd(&mut app, &ws, Command::Back);
    assert!(app.inspector.is_none());
}

#[test]
fn inspector_without_files_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let mut app = app_on(&ws);
    cmd(&mut app, &ws, Command::ViewEpisodes);
    cmd(&mut app, &ws, Command::Select);
    let screen = render(&mut app, 80, 24);
    assert!(
        screen.contains("cannot read the episode result"),
        "{screen}"
    );
    cmd(&mut app, &ws, Command::NextTab);
    cmd(&mut app, &ws, Command::NextTab);
    assert!(render(&mut app, 80, 24).contains("No replay"));
}

#[test]
fn inspector_shows_a_taken_over_episode_and_its_human_steps() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let mut r = result(0, true);
    let human = Step {
        command: Some("tar -czf ~/backup/logs.tar.gz -C ~/logs .".into()),
        exit_code: Some(0),
        exec_secs: 0.2,
        ..Step::new(2, StepKind::Human)
    };
    r.steps.insert(1, human);
    r.taken_over = Some(crate::agent::Takeover {
        turn: 2,
        step: 1,
        at: "2026-12-01T10:00:00.000Z".into(),
        after_secs: 12.0,
        human_steps: 1,
        held_secs: 30.0,
    });
    let ep_dir = ws.root().join("runs/eval-1/episodes/archive-logs");
    std::fs::create_dir_all(&ep_dir).unwrap();
    std::fs::write(ep_dir.join("0.json"), serde_json::to_vec(&r).unwrap()).unwrap();
    let mut app = app_on(&ws);
    cmd(&mut app, &ws, Command::ViewEpisodes);
    cmd(&mut app, &ws, Command::Select);
    let screen = render(&mut app, 120, 40);
    assert!(screen.contains("✋ TAKEN OVER"), "{screen}");
    assert!(
        screen.contains("✋ taken over by a human at turn 2 (12 s in, 2026-12-01T10:00:00.000Z)"),
        "{screen}"
    );
    assert!(screen.contains("step 1 · turn 2 · ✋ HUMAN"), "{screen}");
    assert!(screen.contains("you$ tar -czf"), "{screen}");
    snap!("inspector_human_steps_120x40", &mut app, 120, 40);
}

#[test]
fn f_in_the_inspector_forks_the_episode_at_a_step() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    write_episode_files(&ws);
    let mut app = app_on(&ws);
    cmd(&mut app, &ws, Command::ViewEpisodes);
    cmd(&mut app, &ws, Command::Down);
    cmd(&mut app, &ws, Command::Select);
    key(&mut app, &ws, KeyCode::Char('f'));
    let (kind, form) = app.form.as_ref().expect("the fork form opens");
    assert_eq!(*kind, crate::tui::app::FormKind::Fork);
    // It proposes the earliest failing step.
    assert_eq!(form.value("at step"), "1");
    assert_eq!(form.value("policy"), "oracle");
    snap!("inspector_fork_form_80x24", &mut app, 80, 24);
    // A step past the end is named in the form.
    press(&mut app, KeyCode::Backspace);
    typed(&mut app, "99");
    press(&mut app, KeyCode::Enter);
    let error = app
        .form
        .as_ref()
        .and_then(|(_, f)| f.error.clone())
        .unwrap();
    assert_eq!(error.0, "at step");
    press(&mut app, KeyCode::Backspace);
    press(&mut app, KeyCode::Backspace);
    typed(&mut app, "2");
    press(&mut app, KeyCode::Enter);
    assert!(app.form.is_none());
    assert!(app.outbox.contains(&Request::Launch(JobSpec::Fork {
        parent: "eval-1/archive-logs/1".into(),
        task: "archive-logs".into(),
        at_step: 2,
        policy: "oracle".into(),
    })));
}

/// Issue 47 item 3: an episode whose process died without a result (a
/// killed evaluation) is recorded as interrupted and is a row like any
/// other: listed, marked INT (neither a pass nor a failure), found by
/// `/interrupted`, and not counted as passed.
#[test]
fn an_interrupted_episode_is_listed_marked_and_searchable() {
    let Some(_) = crate::agent::EpisodeOwner::current() else {
        return; // no /proc
    };
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    // A trajectory whose recording process is gone, with no result.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let owner = crate::agent::EpisodeOwner::of(child.id());
    child.wait().unwrap();
    let owner = owner.unwrap_or(crate::agent::EpisodeOwner {
        pid: child.id(),
        start: 0,
        host: crate::agent::EpisodeOwner::current().unwrap().host,
    });
    let ep_dir = dir.path().join("runs/eval-1/episodes/count-words");
    std::fs::create_dir_all(&ep_dir).unwrap();
    let start = serde_json::json!({"type": "start", "task": "count-words", "sample": 1,
        "policy": "script:fixture", "owner": owner});
    let step = serde_json::json!({"type": "step", "step":
        crate::agent::Step::new(1, crate::agent::StepKind::Command)});
    std::fs::write(ep_dir.join("1.jsonl"), format!("{start}\n{step}\n")).unwrap();
    let recorded = crate::workbench::record_interrupted_episodes(&ws).unwrap();
    assert_eq!(recorded.len(), 1);
    // Idempotent.
    assert!(crate::workbench::record_interrupted_episodes(&ws)
        .unwrap()
        .is_empty());
    let mut app = app_on(&ws);
    cmd(&mut app, &ws, Command::ViewEpisodes);
    let screen = render(&mut app, 120, 40);
    assert!(screen.contains("4/4 shown, 1 passed"), "{screen}");
    let row = screen
        .lines()
        .find(|l| l.contains("interrupted"))
        .unwrap_or_else(|| panic!("{screen}"));
    assert!(row.contains("INT ") && !row.contains("FAIL"), "{row}");
    key(&mut app, &ws, KeyCode::Char('/'));
    typed(&mut app, "interrupted");
    key(&mut app, &ws, KeyCode::Enter);
    let screen = render(&mut app, 120, 40);
    assert!(screen.contains("1/4 shown, 0 passed"), "{screen}");
    let selected = app.episodes.selected_row().unwrap();
    assert_eq!(
        (selected.task_id.as_str(), selected.sample),
        ("count-words", 1)
    );
}
