//! Repairs in the Tasks view: the repair form launches a repair job, `D`
//! opens the review (a diff per file beside the reasons), `a` accepts the
//! repair, `r` discards it (the version it was made from is current again).

use super::*;
use crate::generate::repair::Reason;
use crate::store::set_version;

/// archive-logs repaired: version 2 has a stronger completion test and a
/// clearer instruction, for a weak-tests finding and the curator's note.
fn repaired(dir: &Path) -> Workspace {
    let ws = fixture(dir);
    let mut v2 = ws.load_task("archive-logs").unwrap();
    v2.instruction = v2
        .instruction
        .replace("Please archive", "Please archive, contents intact,");
    let strong = PY_FINAL.replace(
        "    assert names == [\"a.log\", \"b.log\", \"c.log\"]  # exact contents\n",
        "    assert names == [\"a.log\", \"b.log\", \"c.log\"]  # exact contents\n    with tarfile.open(ARCHIVE) as t:\n        assert t.extractfile(\"a.log\").read() == b\"alpha\\n\"\n",
    );
    v2.tests.insert_text("test_final_state.py", strong);
    set_version(&mut v2, 2, Some(1));
    let reasons = vec![
        Reason {
            source: "audit".into(),
            summary: "[weak-tests] the final tests accept a mutant: a.log emptied".into(),
            evidence: "--- a.log (oracle)\n+++ a.log (mutant)\n-alpha\n+".into(),
        },
        Reason {
            source: "curator".into(),
            summary: "the curator rated it 2/5: check the contents".into(),
            evidence: String::new(),
        },
    ];
    v2.meta.provenance.extra.insert(
        "repair".into(),
        toml::Value::try_from(serde_json::json!({
            "model": "fixture-gen", "solver": "fixture-gen",
            "created": "2026-12-07T10:00:00Z", "reasons": reasons,
        }))
        .unwrap(),
    );
    ws.commit_version(&v2, &[]).unwrap();
    ws
}

fn select(app: &mut App, ws: &Workspace, id: &str) {
    cmd(app, ws, Command::Top);
    for _ in 0..5 {
        if app.tasks.selected_id().as_deref() == Some(id) {
            return;
        }
        cmd(app, ws, Command::Down);
    }
    panic!("{id} is not in the table");
}

#[test]
fn the_review_shows_the_diff_per_file_beside_the_reasons() {
    let dir = tempfile::tempdir().unwrap();
    let ws = repaired(dir.path());
    let mut app = app_on(&ws);
    select(&mut app, &ws, "archive-logs");
    cmd(&mut app, &ws, Command::RepairReview);
    assert!(app.review.is_some());
    snap!("repair_review_120x40", &mut app, 120, 40);
    snap!("repair_review_80x24", &mut app, 80, 24);
    let screen = render(&mut app, 120, 40);
    for want in [
        "Repair of archive-logs: version 2 (from 1) by fixture-gen",
        "── instruction.md ──",
        "── tests/test_final_state.py ──",
        "+        assert t.extractfile(\"a.log\").read() == b\"alpha\\n\"",
        "(audit) [weak-tests] the final tests accept a",
        "(curator) the curator rated it 2/5",
        "a accept · r discard (version 1 again) · esc close",
    ] {
        assert!(screen.contains(want), "{want:?} in:\n{screen}");
    }
    // It scrolls; other keys wait for it.
    cmd(&mut app, &ws, Command::Bottom);
    assert!(app.review.as_ref().unwrap().scroll > 0);
    cmd(&mut app, &ws, Command::Search);
    assert!(app.prompt.is_none());
    assert!(app.status.as_ref().unwrap().text.contains("a accepts"));
    cmd(&mut app, &ws, Command::Back);
    assert!(app.review.is_none());
    // A task that was never repaired says so.
    select(&mut app, &ws, "count-words");
    cmd(&mut app, &ws, Command::RepairReview);
    assert!(app.review.is_none());
    let msg = app.status.as_ref().unwrap();
    assert!(msg.error && msg.text.contains("not a repair"), "{msg:?}");
}

#[test]
fn accepting_keeps_the_repair_and_discarding_restores_the_parent() {
    let dir = tempfile::tempdir().unwrap();
    let ws = repaired(dir.path());
    let mut app = app_on(&ws);
    select(&mut app, &ws, "archive-logs");
    cmd(&mut app, &ws, Command::RepairReview);
    cmd(&mut app, &ws, Command::Accept);
    assert!(app.review.is_none());
    assert_eq!(
        ws.task_row("archive-logs").unwrap().status,
        TaskStatus::Accepted
    );
    assert_eq!(ws.current_version("archive-logs").unwrap(), 2);
    assert!(app.status.as_ref().unwrap().text.contains("accepted"));
    cmd(&mut app, &ws, Command::RepairReview);
    cmd(&mut app, &ws, Command::Reject);
    assert_eq!(ws.current_version("archive-logs").unwrap(), 1);
    let shown = app.tasks.detail.task.as_ref().unwrap();
    assert!(!shown
        .tests
        .text("test_final_state.py")
        .unwrap()
        .contains("alpha"));
    let msg = &app.status.as_ref().unwrap().text;
    assert!(msg.contains("version 1 is current again"), "{msg}");
    // The discarded repair is kept.
    assert_eq!(ws.task_versions("archive-logs").unwrap().len(), 2);
}

#[test]
fn the_repair_form_launches_a_repair_job() {
    let dir = tempfile::tempdir().unwrap();
    let ws = repaired(dir.path());
    let mut app = app_on(&ws);
    select(&mut app, &ws, "archive-logs");
    cmd(&mut app, &ws, Command::JobRepair);
    assert!(app.form.is_some());
    snap!("repair_form_80x24", &mut app, 80, 24);
    // No model: refused on its field.
    press(&mut app, KeyCode::Enter);
    let err = app
        .form
        .as_ref()
        .and_then(|(_, f)| f.error.clone())
        .unwrap();
    assert_eq!(err.0, "model");
    // The field at fault has the focus.
    typed(&mut app, "gen");
    press(&mut app, KeyCode::Enter);
    assert!(app.form.is_none());
    assert!(app.outbox.contains(&Request::Launch(JobSpec::Repair {
        tasks: vec!["archive-logs".into()],
        url: "http://localhost:8000/v1".into(),
        model: "gen".into(),
        solutions: 16,
    })));
}
