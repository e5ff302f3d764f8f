//! `--offline` (on `endless run`, `eval` and `tasks validate`): the agent's
//! and the oracle's sessions run without network even when the task asks
//! for it (`[environment] network = true`, Harbor's default). The task runs;
//! it is not refused. Image builds keep the network they would have had
//! (`apt-get`/`pip` in Dockerfiles, the sealed verifier environment), since
//! [`Backend::prepare`] is passed through untouched.
//!
//! One wrapper serves every backend: each one starts a session from the
//! [`Image`] it is given, and takes its `network` flag from it (the local
//! backend's namespace wiring, `--network=none` for OCI engines,
//! `--net --network none` for Apptainer).

use super::{Backend, Image, SandboxError, Session, SessionOptions};

/// A backend whose sessions never get the network.
pub struct OfflineSessions(Box<dyn Backend>);

impl OfflineSessions {
    /// Wrap `backend`.
    pub fn new(backend: Box<dyn Backend>) -> Self {
        OfflineSessions(backend)
    }
}

/// `backend`, wrapped in [`OfflineSessions`] when `offline`.
pub fn offline_if(backend: Box<dyn Backend>, offline: bool) -> Box<dyn Backend> {
    if offline {
        Box::new(OfflineSessions::new(backend))
    } else {
        backend
    }
}

/// The note a run or validation shows for a task that asks for network
/// while `--offline` keeps its sessions off it.
pub const OFFLINE_NOTE: &str =
    "the task asks for network, but --offline runs the agent's and the oracle's sessions without it";

impl Backend for OfflineSessions {
    fn name(&self) -> &'static str {
        self.0.name()
    }

    fn prepare(&self, task: &crate::task::Task) -> Result<Image, SandboxError> {
        self.0.prepare(task)
    }

    fn prepare_reporting(
        &self,
        task: &crate::task::Task,
        progress: crate::images::ProgressFn<'_>,
    ) -> Result<Image, SandboxError> {
        self.0.prepare_reporting(task, progress)
    }

    fn start(&self, image: &Image, opts: &SessionOptions) -> Result<Session, SandboxError> {
        let offline = Image {
            network: false,
            ..image.clone()
        };
        self.0.start(&offline, opts)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Records the images it is asked to start, and starts nothing.
    struct Spy(Arc<Mutex<Vec<bool>>>);

    fn image(network: bool) -> Image {
        Image {
            backend: "spy".into(),
            hash: "h".into(),
            path: "/nonexistent".into(),
            reference: None,
            task_id: "t".into(),
            user: "root".into(),
            uid: 0,
            gid: 0,
            home: "/root".into(),
            workdir: "/app".into(),
            network,
            cpu_millis: None,
            memory_mb: None,
            storage_mb: None,
            base: None,
            base_layers: Vec::new(),
            step_layers: Default::default(),
            base_note: None,
        }
    }

    impl Backend for Spy {
        fn name(&self) -> &'static str {
            "spy"
        }
        fn prepare(&self, _task: &crate::task::Task) -> Result<Image, SandboxError> {
            Ok(image(true))
        }
        fn start(&self, image: &Image, _opts: &SessionOptions) -> Result<Session, SandboxError> {
            self.0.lock().unwrap().push(image.network);
            Err(SandboxError::Start("spy".into()))
        }
    }

    #[test]
    fn sessions_start_offline_and_builds_are_untouched() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let opts = SessionOptions::default();
        let plain = offline_if(Box::new(Spy(seen.clone())), false);
        let _ = plain.start(&image(true), &opts);
        let offline = offline_if(Box::new(Spy(seen.clone())), true);
        assert_eq!(offline.name(), "spy");
        let built = offline.prepare(&crate::task::Task::minimal("t")).unwrap();
        assert!(built.network, "prepare passes the task's network through");
        let _ = offline.start(&built, &opts);
        assert_eq!(*seen.lock().unwrap(), vec![true, false]);
    }
}
