//! Readable at 80x24: with long ids in every list view (Tasks, Episodes,
//! Jobs, the Live view's summary strips) columns give way by priority;
//! ids and failure modes keep their width, long ids are shortened in the
//! middle, and taken-over episodes carry their mark.

use super::*;
use crate::store::TaskRow;

fn bare_app() -> App {
    let mut app = App::new(Theme::default(), Keymap::default(), "fixture-ws");
    app.outbox.clear();
    app
}

fn long_tasks() -> Vec<TaskRow> {
    let mut rows = crate::tui::synthetic::synthetic_rows(3);
    let ids = [
        "offline-archives-extract-nested-tarball-0042",
        "offline-text-processing-word-frequencies-0107",
        "git-rebase-interactive-fixup-0003",
    ];
    for (r, id) in rows.iter_mut().zip(ids) {
        r.id = id.into();
        r.name = format!("a long human-readable name for {id}");
        r.category = "text-processing".into();
    }
    rows
}

fn long_episodes() -> Vec<EpisodeRow> {
    let ep = |task: &str, sample: u32, mode: Option<&str>, taken: bool| EpisodeRow {
        run_id: "eval-3f2c9a1b7d4e5f60".into(),
        task_id: task.into(),
        sample,
        passed: mode.is_none(),
        reward: if mode.is_none() { 1.0 } else { 0.0 },
        turns: 12,
        end_reason: if mode.is_none() { "done" } else { "max_turns" }.into(),
        failure_mode: mode.map(String::from),
        path: String::new(),
        rating: Some(4),
        label: None,
        notes: String::new(),
        taken_over: taken,
        failure_labels: mode.map(|m| vec![m.to_string()]).unwrap_or_default(),
        policy: "openai:qwen3-coder-30b-a3b-instruct@http://127.0.0.1:8000/v1".into(),
        duration_secs: 95.0,
        forked_from: None,
        created_at: String::new(),
    };
    vec![
        ep(
            "offline-archives-extract-nested-tarball-0042",
            0,
            None,
            true,
        ),
        ep(
            "offline-text-processing-word-frequencies-0107",
            3,
            Some("turn_exhaustion"),
            false,
        ),
        ep(
            "git-rebase-interactive-fixup-0003",
            1,
            Some("premature_done"),
            false,
        ),
    ]
    .into_iter()
    .enumerate()
    // Newest first keeps the order above.
    .map(|(i, mut e)| {
        e.created_at = format!("2026-12-04T10:{:02}:00Z", 50 - i);
        e
    })
    .collect()
}

#[test]
fn list_views_give_way_by_priority_at_80x24() {
    let mut app = bare_app();
    app.update(Action::TasksLoaded(long_tasks()));
    app.outbox.clear();
    let screen = render(&mut app, 80, 24);
    // Ids keep their width; the name gives way first, the status stays.
    assert!(
        screen.contains("offline-text-processing-word-frequencies-0107"),
        "{screen}"
    );
    let header = screen.lines().nth(2).unwrap_or_default();
    assert!(
        header.contains("Status") && !header.contains("Name"),
        "{screen}"
    );
    assert!(screen.contains("candidate"), "{screen}");
    snap!("tasks_long_ids_80x24", &mut app, 80, 24);

    app.view = View::Episodes;
    app.update(Action::EpisodesLoaded(long_episodes()));
    let screen = render(&mut app, 80, 24);
    // Failure modes keep their width; the hand marks the taken-over one.
    assert!(screen.contains("turn_exhaustion"), "{screen}");
    assert!(screen.contains("premature_done"), "{screen}");
    assert!(screen.contains("PASS ✋"), "{screen}");
    assert!(screen.contains("1 ✋ taken over"), "{screen}");
    assert!(screen.contains("…-0107"), "{screen}");
    snap!("episodes_long_ids_80x24", &mut app, 80, 24);
    snap!("episodes_long_ids_120x40", &mut app, 120, 40);
    // `/taken over` finds the episodes a human took over.
    press(&mut app, KeyCode::Char('/'));
    typed(&mut app, "taken over");
    let screen = render(&mut app, 80, 24);
    assert!(screen.contains("1/3 shown"), "{screen}");
    snap!("episodes_search_taken_over_80x24", &mut app, 80, 24);
    press(&mut app, KeyCode::Esc);
    assert!(render(&mut app, 80, 24).contains("3/3 shown"));

    app.view = View::Jobs;
    let id = |s: &str| JobId(s.into());
    for (job, kind) in [
        ("generate-offline-0042", "generate-offline"),
        ("evaluate-script-policy-0007", "eval"),
    ] {
        app.update(Action::Job(JobEvent::Started {
            id: id(job),
            kind: kind.into(),
        }));
    }
    app.update(Action::Job(JobEvent::Progress {
        id: id("evaluate-script-policy-0007"),
        done: 12,
        total: 40,
        stage: "episodes of offline-text-processing-word-frequencies-0107".into(),
    }));
    app.update(Action::Job(JobEvent::Finished {
        id: id("generate-offline-0042"),
        outcome: JobOutcome::Failed(
            "cannot write /root/ws/tasks: Permission denied (os error 13)".into(),
        ),
    }));
    let screen = render(&mut app, 80, 24);
    // The result shrinks first (the log has it whole); ids and progress stay.
    assert!(screen.contains("evaluate-script-policy-0007"), "{screen}");
    assert!(screen.contains("12/40"), "{screen}");
    assert!(screen.contains("failed"), "{screen}");
    snap!("jobs_long_ids_80x24", &mut app, 80, 24);
    // Narrower still: the progress goes, then ids are shortened in the
    // middle, keeping their number.
    let screen = render(&mut app, 50, 24);
    assert!(screen.contains("evaluate-script…-0007"), "{screen}");
    assert!(!screen.contains("12/40"), "{screen}");
}

#[test]
fn a_finished_panes_strip_keeps_result_title_and_failure_at_80_columns() {
    let mut app = bare_app();
    app.view = View::Live;
    let key = "eval-3f2c9a1b7d4e5f60/offline-text-processing-word-frequencies-0107/3";
    app.update(Action::Live(LiveEvent::Open {
        key: key.into(),
        title: "offline-text-processing-word-frequencies-0107#3".into(),
        policy: "openai:qwen2.5-coder-32b-instruct@http://localhost:8000/v1".into(),
        rows: 48,
        cols: 160,
        input: None,
    }));
    app.update(Action::Live(LiveEvent::Step {
        key: key.into(),
        turn: 7,
        command: "find ~/work -name '*.txt' -exec wc -w {} + | sort -n | tail -n 5".into(),
    }));
    app.update(Action::Live(LiveEvent::Finished {
        key: key.into(),
        passed: false,
        failure: Some("turn_exhaustion".into()),
    }));
    for p in &mut app.live.panes {
        p.finished_after = Some(std::time::Duration::from_secs(75));
    }
    let screen = render(&mut app, 80, 24);
    let strip = screen
        .lines()
        .find(|l| l.contains("FAILED"))
        .unwrap_or_default()
        .to_string();
    assert!(
        strip.contains("offline-text-processing-word-frequencies-0107#3"),
        "{strip}"
    );
    assert!(strip.contains("turn_exhaustion"), "{strip}");
    // Turn, time and policy gave way; the command is cut at the end.
    assert!(!strip.contains("localhost"), "{strip}");
    snap!("live_strip_long_80x24", &mut app, 80, 24);
}
