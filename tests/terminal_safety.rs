//! Operator terminals are safe: text-mode output escapes control sequences
//! that come from task files and from agent commands, so a task cannot
//! write the operator's clipboard (OSC 52) or clear their screen.

#![allow(clippy::unwrap_used)] // tests and benches fail loudly

mod support;

use std::path::Path;

use support::cli::{endless, json};

const OSC52: &str = "\x1b]52;c;aGk=\x07";
const CLEAR: &str = "\x1b[2J";
/// [`CLEAR`] as a TOML string escape (TOML forbids raw control characters).
const CLEAR_TOML: &str = "\\u001b[2J";

fn write_task(root: &Path) -> String {
    let id = "hostile-text";
    let dir = root.join(id);
    for sub in ["environment", "tests"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    std::fs::write(
        dir.join("task.toml"),
        format!(
            "[task]\nid = \"{id}\"\nname = \"hostile {CLEAR_TOML}name\"\ncategory = \"esc{CLEAR_TOML}\"\ncomplexity = 1\n\n\
             [agent]\nmax_turns = 4\ntimeout_sec = 120.0\nuser = \"user\"\n"
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("instruction.md"),
        format!("Create ~/done.{OSC52} Then relax.{CLEAR}\n"),
    )
    .unwrap();
    std::fs::write(dir.join("truth.md"), format!("secret{OSC52}\n")).unwrap();
    std::fs::write(dir.join("environment/setup.sh"), "#!/bin/bash\ntrue\n").unwrap();
    std::fs::write(
        dir.join("tests/test_initial_state.py"),
        "def test_nothing():\n    pass\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("tests/test_final_state.py"),
        format!(
            "import os\n\ndef test_done():\n    assert os.path.exists('/home/user/done'), '{}'\n",
            "\\x1b]52;c;aGk=\\x07\\x1b[2J"
        ),
    )
    .unwrap();
    id.to_string()
}

fn assert_no_escape(what: &str, bytes: &[u8]) {
    assert!(
        !bytes.contains(&0x1b) && !bytes.contains(&0x07),
        "{what} printed a raw control sequence:\n{}",
        String::from_utf8_lossy(bytes).escape_debug()
    );
}

#[test]
fn task_text_and_agent_commands_print_escaped() {
    let ws = tempfile::tempdir().unwrap();
    let bundles = tempfile::tempdir().unwrap();
    let id = write_task(bundles.path());
    let imported = endless(
        ws.path(),
        &["tasks", "import", &bundles.path().display().to_string()],
    );
    assert!(
        imported.status.success(),
        "{}",
        String::from_utf8_lossy(&imported.stderr)
    );

    let show = endless(ws.path(), &["tasks", "show", &id]);
    assert!(show.status.success());
    assert_no_escape("tasks show", &show.stdout);
    let text = String::from_utf8_lossy(&show.stdout);
    assert!(text.contains("\\x1b]52;c;aGk=\\x07"), "{text}");
    assert!(text.contains("\\x1b[2J"), "{text}");
    // JSON keeps the text as it is (serde escapes it).
    let raw = json(&endless(ws.path(), &["tasks", "show", &id, "--json"]));
    assert!(raw["instruction"].as_str().unwrap().contains(OSC52));

    let list = endless(ws.path(), &["tasks", "list"]);
    assert_no_escape("tasks list", &list.stdout);

    let script = ws.path().join("hostile.txt");
    std::fs::write(
        &script,
        format!("echo '{OSC52}{CLEAR}' > /dev/null; printf '\\033[2J\\033]52;c;aGk=\\007'\n"),
    )
    .unwrap();
    let spec = format!("script:{}", script.display());
    let run = endless(ws.path(), &["run", &id, "--policy", &spec]);
    assert!(!run.status.success(), "the task is not solved");
    assert_no_escape("run", &run.stdout);
    assert_no_escape("run (stderr)", &run.stderr);
    let text = String::from_utf8_lossy(&run.stdout);
    assert!(text.contains("echo '\\x1b]52;c;aGk=\\x07"), "{text}");

    let eval = endless(ws.path(), &["eval", "--policy", &spec]);
    assert!(eval.status.success());
    assert_no_escape("eval", &eval.stdout);
}

/// Issue 46, breach 5: `run --policy human` shows the task's instruction to
/// the operator, on their terminal: an OSC 52 clipboard write, a window
/// title, a screen clear and a lone carriage return (which would overwrite
/// the line shown) print as visible escapes, never raw.
#[test]
fn the_human_policy_shows_the_instruction_escaped() {
    let ws = tempfile::tempdir().unwrap();
    let bundles = tempfile::tempdir().unwrap();
    let id = write_task(bundles.path());
    let title = "\x1b]0;pwned-title\x07";
    std::fs::write(
        bundles.path().join(&id).join("instruction.md"),
        format!(
            "Create ~/done.{OSC52}{title}{CLEAR}\x1b[H Fake prompt\rOVERWRITTEN\r\nLast line.\n"
        ),
    )
    .unwrap();
    let imported = endless(
        ws.path(),
        &["tasks", "import", &bundles.path().display().to_string()],
    );
    assert!(
        imported.status.success(),
        "{}",
        String::from_utf8_lossy(&imported.stderr)
    );
    // stdin is closed: the human policy reads end of input and finishes.
    let run = endless(ws.path(), &["run", &id, "--policy", "human"]);
    let shown = String::from_utf8_lossy(&run.stderr);
    assert!(
        shown.contains("Create ~/done."),
        "the instruction was not shown: {shown}"
    );
    for (what, bytes) in [
        ("run --policy human (stderr)", &run.stderr),
        ("run --policy human", &run.stdout),
    ] {
        assert_no_escape(what, bytes);
        assert!(
            !bytes.contains(&b'\r'),
            "{what} printed a carriage return:\n{}",
            String::from_utf8_lossy(bytes).escape_debug()
        );
    }
    assert!(
        shown.contains("\\x1b]52;c;aGk=\\x07\\x1b]0;pwned-title\\x07\\x1b[2J"),
        "{shown}"
    );
    assert!(
        shown.contains("Fake prompt\\x0dOVERWRITTEN\nLast line."),
        "{shown}"
    );
}
