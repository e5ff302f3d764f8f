//! The exact tokens of a local policy's turns, for ATIF's per-step
//! `prompt_token_ids`, `completion_token_ids` and `logprobs`: the trainer
//! records each rollout as one token stream (context and sampled tokens,
//! with each sampled token's log-probability), and writes it beside the
//! episode's result as `<n>.tokens.jsonl`, one line per turn.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::AtifError;
use crate::agent::episode_io::EpisodePaths;

/// One turn's tokens: the whole prompt the model saw, what it sampled,
/// and the log-probability of each sampled token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnTokens {
    /// Every token before the completion.
    pub prompt_token_ids: Vec<u32>,
    /// The sampled tokens.
    pub completion_token_ids: Vec<u32>,
    /// One per sampled token.
    pub logprobs: Vec<f64>,
}

/// `<sample>.tokens.jsonl` beside an episode's result.
pub fn tokens_path(paths: &EpisodePaths) -> PathBuf {
    paths.result.with_extension("tokens.jsonl")
}

/// Split a token stream into turns: each run of sampled tokens
/// (`agent_mask` true) is one completion, its prompt every token before it.
pub fn turns_from_stream(tokens: &[u32], agent_mask: &[bool], logprobs: &[f32]) -> Vec<TurnTokens> {
    let n = tokens.len().min(agent_mask.len()).min(logprobs.len());
    let mut turns = Vec::new();
    let mut i = 0;
    while i < n {
        if !agent_mask[i] {
            i += 1;
            continue;
        }
        let start = i;
        while i < n && agent_mask[i] {
            i += 1;
        }
        turns.push(TurnTokens {
            prompt_token_ids: tokens[..start].to_vec(),
            completion_token_ids: tokens[start..i].to_vec(),
            logprobs: logprobs[start..i].iter().map(|&l| f64::from(l)).collect(),
        });
    }
    turns
}

/// Write `turns` to `path` atomically, one JSON line per turn.
pub fn write_turn_tokens(path: &Path, turns: &[TurnTokens]) -> Result<(), AtifError> {
    let io = |source| AtifError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut out = Vec::new();
    for t in turns {
        serde_json::to_writer(&mut out, t).map_err(|e| io(std::io::Error::other(e)))?;
        out.write_all(b"\n").map_err(io)?;
    }
    crate::fsutil::write_atomic(path, &out).map_err(io)
}

/// The turns recorded at `path`; empty when there is no such file (the
/// policy is not local, or the episode was not a training rollout).
pub fn read_turn_tokens(path: &Path) -> Result<Vec<TurnTokens>, AtifError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(AtifError::Io {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| AtifError::Field {
                path: path.to_path_buf(),
                field: format!("line {}", i + 1),
                why: e.to_string(),
            })
        })
        .collect()
}
