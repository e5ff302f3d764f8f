//! Undo (`u`) of curation: tasks' status, rating, tags and notes, and
//! episodes' ratings, labels and notes, one change at a time, with a status
//! line saying what was undone; the store ends where it started.

use super::*;

#[test]
fn undo_reverts_task_curation_one_change_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let mut app = app_on(&ws);
    assert_eq!(app.tasks.selected_id().as_deref(), Some("archive-logs"));
    cmd(&mut app, &ws, Command::Undo);
    assert_eq!(app.status.as_ref().unwrap().text, "nothing to undo");
    // Accept, then rate, then tag: quick changes in a row.
    app.update(Action::Command(Command::Accept));
    app.update(Action::Command(Command::Rate3));
    pump(&mut app, &ws);
    key(&mut app, &ws, KeyCode::Char('t'));
    key(&mut app, &ws, KeyCode::End);
    typed(&mut app, ", new");
    key(&mut app, &ws, KeyCode::Enter);
    let row = ws.task_row("archive-logs").unwrap();
    assert_eq!(
        (row.status, row.rating, row.tags.clone()),
        (
            TaskStatus::Accepted,
            Some(3),
            vec!["tar".into(), "easy".into(), "new".into()]
        )
    );
    assert_eq!(app.undo.len(), 3);
    cmd(&mut app, &ws, Command::Undo);
    let status = &app.status.as_ref().unwrap().text;
    assert_eq!(
        status,
        "undone: archive-logs: tags tar, easy, new (back to tags tar, easy)"
    );
    snap!("undo_status_80x24", &mut app, 80, 24);
    snap!("undo_status_120x40", &mut app, 120, 40);
    cmd(&mut app, &ws, Command::Undo);
    assert!(app
        .status
        .as_ref()
        .unwrap()
        .text
        .contains("rated 3 (back to unrated)"));
    cmd(&mut app, &ws, Command::Undo);
    assert_eq!(
        app.status.as_ref().unwrap().text,
        "undone: archive-logs: accepted (back to candidate)"
    );
    let row = ws.task_row("archive-logs").unwrap();
    assert_eq!(
        (row.status, row.rating, row.tags.clone()),
        (
            TaskStatus::Candidate,
            None,
            vec!["tar".into(), "easy".into()]
        )
    );
    // The curation file agrees with the index.
    let file = ws.read_task_curation("archive-logs").unwrap().unwrap();
    assert_eq!((file.status, file.rating), (TaskStatus::Candidate, None));
    // The view shows it too.
    assert_eq!(
        app.tasks.selected_row().unwrap().status,
        TaskStatus::Candidate
    );
    cmd(&mut app, &ws, Command::Undo);
    assert_eq!(app.status.as_ref().unwrap().text, "nothing to undo");
    // A note, undone.
    key(&mut app, &ws, KeyCode::Char('n'));
    typed(&mut app, " (typo)");
    key(&mut app, &ws, KeyCode::Enter);
    assert_eq!(
        ws.task_row("archive-logs").unwrap().notes,
        "check the truth wording (typo)"
    );
    cmd(&mut app, &ws, Command::Undo);
    assert_eq!(
        ws.task_row("archive-logs").unwrap().notes,
        "check the truth wording"
    );
}

#[test]
fn undo_reverts_episode_reviews_in_the_open_inspector() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let mut app = app_on(&ws);
    cmd(&mut app, &ws, Command::ViewEpisodes);
    cmd(&mut app, &ws, Command::Select);
    let (run, task, sample) = {
        let row = &app.inspector.as_ref().unwrap().episode.row;
        (row.run_id.clone(), row.task_id.clone(), row.sample)
    };
    cmd(&mut app, &ws, Command::Rate4);
    cmd(&mut app, &ws, Command::Label);
    typed(&mut app, "amb");
    key(&mut app, &ws, KeyCode::Enter);
    let stored = |ws: &Workspace| {
        ws.list_episodes(None)
            .unwrap()
            .into_iter()
            .find(|e| (&e.run_id, &e.task_id, e.sample) == (&run, &task, sample))
            .map(|e| (e.rating, e.label))
            .unwrap()
    };
    assert_eq!(stored(&ws), (Some(4), Some("task_ambiguous".into())));
    cmd(&mut app, &ws, Command::Undo);
    let text = app.status.as_ref().unwrap().text.clone();
    assert!(
        text.starts_with(&format!(
            "undone: {task}#{sample} ({run}): label task ambiguous"
        )),
        "{text}"
    );
    assert!(text.ends_with("(back to no label)"), "{text}");
    assert_eq!(stored(&ws), (Some(4), None));
    let insp = app.inspector.as_ref().unwrap();
    assert_eq!(
        insp.episode.row.label, None,
        "the inspector shows it undone"
    );
    cmd(&mut app, &ws, Command::Undo);
    assert_eq!(stored(&ws), (None, None));
    assert_eq!(app.inspector.as_ref().unwrap().episode.row.rating, None);
}
