//! ATIF (Agent Trajectory Interchange Format, Harbor's RFC 0001) both
//! ways: every endless episode written as an ATIF document
//! ([`episode_to_atif`], `endless episodes export --format atif`, and
//! `<n>.atif.json` beside each result with `[record] atif = true`), and
//! ATIF documents from other harnesses read back as endless steps
//! ([`parse_atif`], [`atif_to_steps`]) for `endless episodes import`.

mod lines;
mod reader;
mod schema;
mod tokens;
mod writer;

use std::path::{Path, PathBuf};

pub use lines::{read_recorded, RecordedLines};
pub use reader::{atif_to_steps, parse_atif, ImportedTrajectory};
pub use schema::{
    Agent, AtifStep, Content, FinalMetrics, Metrics, Observation, ObservationResult, Source,
    ToolCall, Trajectory, SCHEMA_VERSION,
};
pub use tokens::{read_turn_tokens, tokens_path, turns_from_stream, write_turn_tokens, TurnTokens};
pub use writer::{episode_to_atif, model_name, policy_uses_model, EpisodeSource, BASH_TOOL};

use super::episode_io::EpisodePaths;
use super::result::EpisodeResult;

/// Why an ATIF document could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum AtifError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A field is missing, of the wrong type, or breaks a rule of the spec.
    #[error("{path}: field `{field}`: {why}")]
    Field {
        /// The file.
        path: PathBuf,
        /// The field, as a JSON path (`steps[3].source`).
        field: String,
        /// What is wrong with it.
        why: String,
    },
}

/// The ATIF document of the episode whose files are `paths` in run `run`
/// (its conversation and times from `<n>.jsonl`, its tokens from
/// `<n>.tokens.jsonl` when a local policy recorded them). Fails only on a
/// malformed tokens file.
pub fn episode_document(
    run: &str,
    paths: &EpisodePaths,
    result: &EpisodeResult,
) -> Result<Trajectory, AtifError> {
    let recorded = read_recorded(&paths.trajectory);
    let tokens = read_turn_tokens(&tokens_path(paths))?;
    Ok(episode_to_atif(EpisodeSource {
        run,
        result,
        recorded: &recorded,
        tokens: &tokens,
    }))
}

/// Write `doc` to `path` atomically, as pretty JSON.
pub fn write_atif(path: &Path, doc: &Trajectory) -> Result<(), AtifError> {
    let io = |source| AtifError::Io {
        path: path.to_path_buf(),
        source,
    };
    let json = serde_json::to_vec_pretty(doc).map_err(|e| io(std::io::Error::other(e)))?;
    crate::fsutil::write_atomic(path, &json).map_err(io)
}

/// `<sample>.atif.json` beside an episode's result.
pub fn atif_path(paths: &EpisodePaths) -> PathBuf {
    paths.result.with_extension("atif.json")
}

#[cfg(test)]
mod tests;
