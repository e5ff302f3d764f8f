//! Environment definitions (setup.sh, Apptainer .def, Dockerfile subset)
//! parsed into one list of build steps, shared by the sandbox (which runs
//! them) and the exporters (which render them in another format).

mod apptainer;
mod definition;
mod dockerfile;
mod render;

pub use apptainer::localimage_note;
pub use definition::{EnvDefinition, Stage, Step};
pub use render::{render_apptainer, render_dockerfile, DEFAULT_BASE, GENERATED_MARKER};

use super::{BundleError, EnvKind, Task};

/// Parse a definition of `kind` whose text is `text`.
pub fn parse(kind: EnvKind, text: &str) -> Result<EnvDefinition, BundleError> {
    let file = format!("environment/{}", kind.file_name());
    let mut def = match kind {
        EnvKind::SetupSh => EnvDefinition {
            steps: vec![Step::Script(kind.file_name().into())],
            ..Default::default()
        },
        EnvKind::ApptainerDef => apptainer::parse(text, &file)?,
        EnvKind::Dockerfile => dockerfile::parse(text, &file)?,
    };
    def.file = file;
    Ok(def)
}

/// Parse the task's environment definition; a task without one has no steps.
pub fn parse_task(task: &Task) -> Result<EnvDefinition, BundleError> {
    match task.environment_definition() {
        Some((kind, text)) => parse(kind, text),
        None => Ok(EnvDefinition::default()),
    }
}
