//! Images in the TUI: a Jobs entry drawing a pull's layers and bytes and a
//! build's steps, from the events the workbench's progress callback sends.

use super::*;
use crate::images::Progress;

/// The events `reports` make through [`crate::workbench::job_progress`],
/// under the job id `id` (a standalone job's own id has a timestamp).
fn events_of(kind: &str, id: &str, reports: &[Progress]) -> Vec<JobEvent> {
    let (job, mut rx) = crate::jobs::JobContext::standalone(kind);
    let progress = crate::workbench::job_progress(&job);
    for p in reports {
        progress(p);
    }
    let mut out = vec![JobEvent::Started {
        id: JobId(id.into()),
        kind: kind.into(),
    }];
    while let Ok(ev) = rx.try_recv() {
        out.push(match ev {
            JobEvent::Progress {
                done, total, stage, ..
            } => JobEvent::Progress {
                id: JobId(id.into()),
                done,
                total,
                stage,
            },
            other => other,
        });
    }
    out
}

#[test]
fn jobs_show_pull_and_build_progress() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let mut app = app_on(&ws);
    app.view = View::Jobs;
    let pull = |layers_done, bytes_done| Progress::Pull {
        reference: "127.0.0.1:5000/team/base:1".into(),
        layers_done,
        layers: 3,
        bytes_done,
        bytes: 48_200_000,
    };
    let step = |index: usize, what: &str, cached| Progress::Step {
        index,
        steps: 7,
        what: what.into(),
        cached,
    };
    let build = events_of(
        "build",
        "build-1",
        &[
            step(1, "create the agent account", true),
            step(2, "environment/Dockerfile line 2: RUN apt-get update", true),
            step(
                3,
                "environment/Dockerfile line 3: RUN apt-get install -y jq",
                false,
            ),
        ],
    );
    let pulled = events_of(
        "pull",
        "pull-2",
        &[pull(0, 0), pull(1, 20_100_000), pull(1, 31_700_000)],
    );
    for ev in build.into_iter().chain(pulled) {
        app.update(Action::Job(ev));
    }
    let pull_row = app.jobs.items.iter().find(|i| i.id == "pull-2").unwrap();
    assert_eq!((pull_row.done, pull_row.total), (31_700_000, 48_200_000));
    assert_eq!(
        pull_row.message,
        "pull 1/3 layers, 31.7/48.2 MB: 127.0.0.1:5000/team/base:1"
    );
    let build_row = app.jobs.items.iter().find(|i| i.id == "build-1").unwrap();
    assert_eq!((build_row.done, build_row.total), (3, 7));
    let screen = render(&mut app, 120, 40);
    assert!(
        screen.contains(" 66%"),
        "bytes show as a percentage: {screen}"
    );
    assert!(screen.contains(" 3/7"), "steps show as counts: {screen}");
    snap!("jobs_pull_and_build_progress_120x40", &mut app, 120, 40);
    snap!("jobs_pull_and_build_progress_80x24", &mut app, 80, 24);
}

#[test]
fn the_environment_tab_shows_the_image_and_the_build_cache() {
    use crate::sandbox::local::{BaseImage, BuildState, StepCacheState, StepState};
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let mut app = app_on(&ws);
    let id = app.tasks.selected_id().unwrap();
    // Opening the tab asks for the state, once.
    app.update(Action::Command(Command::NextTab));
    assert!(!app.outbox.contains(&Request::LoadTaskEnv(id.clone())));
    app.update(Action::Command(Command::NextTab));
    assert!(app.outbox.contains(&Request::LoadTaskEnv(id.clone())));
    pump(&mut app, &ws);
    app.update(Action::Tick(0.0));
    assert!(app.outbox.is_empty(), "{:?}", app.outbox);
    let step = |stage, what: &str, cache| StepState {
        stage,
        what: what.into(),
        cache,
    };
    let dockerfile = "environment/Dockerfile";
    let env = crate::workbench::TaskEnv {
        task_id: id.clone(),
        written: Some("ubuntu:24.04".into()),
        build: Ok(BuildState {
            base: Some(BaseImage {
                reference: "docker.io/local/debian:bookworm".into(),
                digest: format!("sha256:{}", "3f9c2a1b7d4e".repeat(5)),
                bytes: 48_200_000,
            }),
            note: Some("ubuntu:24.04 is aliased to local/debian:bookworm".into()),
            built: None,
            steps: vec![
                step(
                    Some(0),
                    &format!("{dockerfile} line 2: RUN make"),
                    StepCacheState::Cached(1_300_000),
                ),
                step(
                    None,
                    "create the agent account",
                    StepCacheState::Cached(2_100),
                ),
                step(
                    None,
                    &format!("{dockerfile} line 5: RUN apt-get update && apt-get install -y jq"),
                    StepCacheState::Cached(21_400_000),
                ),
                step(
                    None,
                    &format!("{dockerfile} line 6: ENV MODE=fast"),
                    StepCacheState::Config,
                ),
                step(
                    None,
                    &format!("{dockerfile} line 7: RUN pip install --break-system-packages six"),
                    StepCacheState::Runs,
                ),
                step(
                    None,
                    "finish the image (workdir, home ownership)",
                    StepCacheState::Runs,
                ),
            ],
        }),
    };
    // A stale answer (another task) is dropped.
    let mut stale = env.clone();
    stale.task_id = "someone-else".into();
    app.update(Action::TaskEnvLoaded(Box::new(stale)));
    assert!(app.tasks.detail.env.is_none());
    app.update(Action::TaskEnvLoaded(Box::new(env)));
    let screen = render(&mut app, 120, 40);
    assert!(
        screen.contains("a build runs 2 steps, takes 3 from the cache (22.7 MB)"),
        "{screen}"
    );
    snap!("detail_env_image_120x40", &mut app, 120, 40);
    snap!("detail_env_image_80x24", &mut app, 80, 24);
    // A base that is not pulled yet says so.
    app.update(Action::TaskEnvLoaded(Box::new(crate::workbench::TaskEnv {
        task_id: id,
        written: Some("python:3.13-slim".into()),
        build: Err(
            "docker.io/library/python:3.13-slim is not stored yet: the first build pulls it".into(),
        ),
    })));
    assert!(render(&mut app, 120, 40).contains("is not stored yet"));
}
