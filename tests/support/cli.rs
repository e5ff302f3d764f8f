//! Running the real `endless` binary on a workspace with its own XDG dirs.

use std::path::Path;
use std::process::{Command, Output};

/// `endless --workspace WS ARGS...`, with cache, state and config under `ws`.
pub fn endless(ws: &Path, args: &[&str]) -> Output {
    command(ws, args).output().unwrap()
}

/// The command [`endless`] runs, to spawn it otherwise.
pub fn command(ws: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_endless"));
    cmd.arg("--workspace")
        .arg(ws)
        .args(args)
        .env("XDG_CACHE_HOME", ws.join(".cache"))
        .env("XDG_STATE_HOME", ws.join(".state"))
        .env("XDG_CONFIG_HOME", ws.join(".config"));
    cmd
}

/// The JSON a successful `--json` command printed (panics with its output otherwise).
pub fn json(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}
