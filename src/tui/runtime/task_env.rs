//! Loading a task's image and build-cache state for the Environment tab,
//! on a thread of its own (it opens the sandbox's caches, which the store
//! worker has no business with), answering with
//! [`Action::TaskEnvLoaded`].

use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;

use crate::tui::action::{Action, Msg};
use crate::workbench::{workspace_task_env, Context, TaskEnv};

/// Load the state of task `id` of the workspace at `root` in the
/// background; the answer (or why there is none) comes on `tx`.
pub fn load(root: &Path, id: String, tx: Sender<Msg>) {
    let root: PathBuf = root.to_path_buf();
    let _ = std::thread::Builder::new()
        .name("task env".into())
        .spawn(move || {
            let env = Context::new(Some(root))
                .and_then(|ctx| workspace_task_env(&ctx, &id))
                .unwrap_or_else(|e| TaskEnv {
                    task_id: id.clone(),
                    written: None,
                    build: Err(crate::logging::error_text(&e)),
                });
            let _ = tx.send(Msg::Action(Action::TaskEnvLoaded(Box::new(env))));
        });
}
