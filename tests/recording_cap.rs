//! Bounded recording: a session that floods its terminal (`yes`) leaves an
//! asciicast under the configured cap, ending with one marker, and keeps
//! answering commands. Skips where the local backend cannot run.

#![allow(clippy::unwrap_used)] // tests and benches fail loudly

use std::time::Duration;

use endless::sandbox::{Backend, SessionOptions};
use endless::task::{FileTree, Task, TaskMeta};

mod support;

const CAP: u64 = 1 << 20;

fn task() -> Task {
    let mut t = Task {
        meta: TaskMeta::default(),
        instruction: "flood the terminal".into(),
        truth: String::new(),
        environment: FileTree::default(),
        tests: FileTree::default(),
        solution: FileTree::default(),
    };
    t.meta.task.id = "recording-cap".into();
    t.environment.insert_text("setup.sh", "true\n");
    t
}

#[test]
fn yes_leaves_a_recording_under_the_cap_and_a_live_session() {
    let Some(backend) = support::caches::backend("sandbox") else {
        return;
    };
    let image = backend.prepare(&task()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cast = dir.path().join("ep.cast");
    let opts = SessionOptions {
        record: Some(cast.clone()),
        max_recording_bytes: CAP,
        ..SessionOptions::default()
    };
    let mut s = backend.start(&image, &opts).unwrap();
    let mut live = s.subscribe();
    // A fixed amount (3 MB, more than the cap in raw bytes and in JSON), not
    // a fixed time: a loaded machine's PTY once passed under 1 MiB in 3 s.
    let flood = s
        .exec("yes | head -c 3000000", Duration::from_secs(60))
        .unwrap();
    assert!(flood.truncated, "the command's own output is capped too");
    let after = s.exec("echo still-here", Duration::from_secs(10)).unwrap();
    assert_eq!(after.output.trim_end(), "still-here");
    let mut streamed = 0u64;
    let mut last = Vec::new();
    loop {
        match live.try_recv() {
            Ok(chunk) => {
                streamed += chunk.len() as u64;
                last = chunk.to_vec();
            }
            Err(tokio::sync::broadcast::error::TryRecvError::Lagged(_)) => continue,
            Err(_) => break,
        }
    }
    s.close();

    let size = std::fs::metadata(&cast).unwrap().len();
    assert!(
        size <= CAP,
        "recording of {size} bytes is over the {CAP}-byte cap"
    );
    assert!(size > CAP / 2, "the recording stopped early: {size} bytes");
    let text = std::fs::read_to_string(&cast).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("every line is JSON"))
        .collect();
    assert_eq!(lines[0]["version"], 2);
    for event in &lines[1..] {
        let e = event.as_array().expect("events are arrays");
        assert!(e.len() == 3 && e[0].is_f64() && e[2].is_string(), "{event}");
    }
    let marker = lines.last().unwrap();
    assert_eq!(marker[1], "o");
    assert!(
        marker[2]
            .as_str()
            .unwrap()
            .contains("[endless: recording stopped at 1 MiB]"),
        "{marker}"
    );
    assert!(
        !text.contains("still-here"),
        "nothing is recorded after the marker"
    );
    // Live viewers get the same budget, then one marker. (A lagging
    // receiver may have missed chunks, so only the upper bound is exact.)
    assert!(streamed <= CAP + 256, "{streamed} bytes streamed");
    assert!(
        String::from_utf8_lossy(&last).contains("[endless: live output stopped at 1 MiB]"),
        "{}",
        String::from_utf8_lossy(&last)
    );
}
