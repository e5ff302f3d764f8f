//! Stage prompts: built-in Markdown templates in `assets/prompts/`, each
//! overridable by a file of the same name in `<workspace>/prompts/`.
//! Placeholders are `{{name}}`; a placeholder left unfilled is an error.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::task::text::read_text;
use crate::task::BundleError;

/// The prompt templates of the generation pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptName {
    /// Stage 1: the task and its truth (`generate_task.md`).
    Task,
    /// Stage 2: the environment definition and initial tests (`generate_environment.md`).
    Environment,
    /// Stage 2 repair round: the previous attempt's error (`generate_environment_repair.md`).
    EnvironmentRepair,
    /// Stage 3: the completion tests (`generate_final_tests.md`).
    FinalTests,
    /// A repair: the task, why it needs one, and a revised bundle (`repair_task.md`).
    Repair,
}

impl PromptName {
    /// File name under `assets/prompts/`.
    pub fn file_name(self) -> &'static str {
        match self {
            PromptName::Task => "generate_task.md",
            PromptName::Environment => "generate_environment.md",
            PromptName::EnvironmentRepair => "generate_environment_repair.md",
            PromptName::FinalTests => "generate_final_tests.md",
            PromptName::Repair => "repair_task.md",
        }
    }

    fn builtin(self) -> &'static str {
        match self {
            PromptName::Task => include_str!("../../assets/prompts/generate_task.md"),
            PromptName::Environment => include_str!("../../assets/prompts/generate_environment.md"),
            PromptName::EnvironmentRepair => {
                include_str!("../../assets/prompts/generate_environment_repair.md")
            }
            PromptName::FinalTests => include_str!("../../assets/prompts/generate_final_tests.md"),
            PromptName::Repair => include_str!("../../assets/prompts/repair_task.md"),
        }
    }
}

/// A filled-in prompt and the hash of its template (for provenance).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    /// The prompt with every placeholder filled.
    pub text: String,
    /// First 8 bytes of the template's SHA-256, hex (16 characters).
    pub template_hash: String,
}

/// Loads templates, preferring the workspace's own.
#[derive(Debug, Clone, Default)]
pub struct Prompts {
    override_dir: Option<PathBuf>,
}

impl Prompts {
    /// Templates for `workspace` (its `prompts/` folder overrides built-ins).
    pub fn new(workspace: Option<&Path>) -> Prompts {
        Prompts {
            override_dir: workspace.map(|w| w.join("prompts")),
        }
    }

    /// The template text and where it came from.
    pub fn template(&self, name: PromptName) -> Result<(String, PathBuf), BundleError> {
        if let Some(dir) = &self.override_dir {
            let p = dir.join(name.file_name());
            if p.is_file() {
                return Ok((read_text(&p)?, p));
            }
        }
        Ok((
            name.builtin().to_string(),
            Path::new("assets/prompts").join(name.file_name()),
        ))
    }

    /// Fill `{{key}}` placeholders.
    pub fn render(&self, name: PromptName, vars: &[(&str, &str)]) -> Result<Rendered, BundleError> {
        let (template, path) = self.template(name)?;
        let template_hash = hex::encode(&Sha256::digest(template.as_bytes())[..8]);
        let mut text = template;
        for (k, v) in vars {
            text = text.replace(&format!("{{{{{k}}}}}"), v);
        }
        if let Some(start) = text.find("{{") {
            let name = text[start + 2..].split("}}").next().unwrap_or("").trim();
            if !name.is_empty() && name.len() < 40 && !name.contains(char::is_whitespace) {
                return Err(BundleError::invalid(
                    path,
                    Some(name),
                    "placeholder has no value",
                ));
            }
        }
        Ok(Rendered {
            text,
            template_hash,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_and_names_missing_placeholders() {
        let p = Prompts::new(None);
        let err = p
            .render(PromptName::FinalTests, &[("task", "t")])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("generate_final_tests.md") && err.contains("truth"),
            "{err}"
        );
        let r = p
            .render(
                PromptName::FinalTests,
                &[("task", "T1"), ("truth", "TR"), ("initial_tests", "IT")],
            )
            .unwrap();
        assert!(r.text.contains("T1") && r.text.contains("TR") && !r.text.contains("{{"));
        let ws = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(ws.path().join("prompts")).unwrap();
        std::fs::write(
            ws.path().join("prompts/generate_final_tests.md"),
            "custom {{task}}",
        )
        .unwrap();
        let r2 = Prompts::new(Some(ws.path()))
            .render(PromptName::FinalTests, &[("task", "x")])
            .unwrap();
        assert_eq!(r2.text, "custom x");
        assert_ne!(r2.template_hash, r.template_hash);
    }
}
