//! Safetensors weight files of a model directory: finding them, checking
//! names and shapes against the config, and loading them into a `VarMap`.

use crate::model::config::ModelConfig;
use crate::model::error::{LocalError, Result};
use crate::model::models::transformer::weight_shapes;
use candle_core::safetensors::MmapedSafetensors;
use candle_core::Device;
use candle_nn::VarMap;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The weight files of `dir`: those named by `model.safetensors.index.json`,
/// else every `*.safetensors` file, sorted.
pub fn weight_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let index = dir.join("model.safetensors.index.json");
    if index.is_file() {
        let text = std::fs::read_to_string(&index).map_err(|e| LocalError::io(&index, e))?;
        let v: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| LocalError::BadFile {
                path: index.clone(),
                message: e.to_string(),
            })?;
        let map = v
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| LocalError::field(&index, "weight_map", "missing or not an object"))?;
        let mut files: Vec<PathBuf> = map
            .values()
            .filter_map(|f| f.as_str())
            .map(|f| dir.join(f))
            .collect();
        files.sort();
        files.dedup();
        for f in &files {
            if !f.is_file() {
                return Err(LocalError::MissingFile {
                    path: f.clone(),
                    what: format!("listed in {}", index.display()),
                });
            }
        }
        return Ok(files);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| LocalError::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(LocalError::MissingFile {
            path: dir.join("model.safetensors"),
            what: "no *.safetensors weight file in the model directory".into(),
        });
    }
    Ok(files)
}

/// Memory-map the weight files (they must not change while mapped).
pub fn mmap(files: &[PathBuf]) -> Result<MmapedSafetensors> {
    // SAFETY: the files are only read; the caller owns the model directory.
    unsafe { MmapedSafetensors::multi(files) }.map_err(|e| LocalError::BadFile {
        path: files.first().cloned().unwrap_or_default(),
        message: format!("not a valid safetensors file: {e}"),
    })
}

fn names_and_shapes(st: &MmapedSafetensors) -> HashMap<String, Vec<usize>> {
    st.tensors()
        .into_iter()
        .map(|(n, v)| (n, v.shape().to_vec()))
        .collect()
}

fn files_label(files: &[PathBuf]) -> String {
    files
        .iter()
        .map(|f| f.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Check that the files hold every weight of `cfg` with the right shape.
pub fn check_weights(files: &[PathBuf], st: &MmapedSafetensors, cfg: &ModelConfig) -> Result<()> {
    let have = names_and_shapes(st);
    for (name, shape) in weight_shapes(cfg) {
        match have.get(&name) {
            None => {
                return Err(LocalError::Weight {
                    file: files_label(files),
                    name,
                    message: "missing".into(),
                })
            }
            Some(s) if *s != shape => {
                return Err(LocalError::Weight {
                    file: files_label(files),
                    name,
                    message: format!("shape {s:?}, config.json implies {shape:?}"),
                })
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// Overwrite every variable of `varmap` whose name the files hold, converting
/// dtype; variables listed in `required` must be present. Returns how many
/// variables were loaded.
pub fn load_into_varmap(
    varmap: &VarMap,
    files: &[PathBuf],
    required: &[String],
    device: &Device,
) -> Result<usize> {
    let st = mmap(files)?;
    let have = names_and_shapes(&st);
    let data = varmap
        .data()
        .lock()
        .map_err(|_| LocalError::Generation("var map lock poisoned".into()))?;
    for name in required {
        if !have.contains_key(name) {
            return Err(LocalError::Weight {
                file: files_label(files),
                name: name.clone(),
                message: "missing".into(),
            });
        }
    }
    let mut loaded = 0;
    for (name, var) in data.iter() {
        let Some(shape) = have.get(name) else {
            continue;
        };
        if shape.as_slice() != var.dims() {
            return Err(LocalError::Weight {
                file: files_label(files),
                name: name.clone(),
                message: format!("shape {shape:?}, expected {:?}", var.dims()),
            });
        }
        let t = st
            .load(name, device)
            .and_then(|t| t.to_dtype(var.dtype()))
            .map_err(|e| LocalError::Weight {
                file: files_label(files),
                name: name.clone(),
                message: e.to_string(),
            })?;
        var.set(&t)?;
        loaded += 1;
    }
    Ok(loaded)
}
