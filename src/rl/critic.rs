//! The critic. The reference trains a separate value model (its own copy of
//! the base model, its own optimizer, learning rate 1e-6, value clipping
//! 0.2); `--critic shared` keeps the cheaper value head on the policy's trunk.
//!
//! A separate [`Critic`] starts as a copy of the policy's decoder (as the
//! reference's critic starts from the policy's checkpoint) with a fresh value
//! head at zero; its variables are named `critic.*`, so its weights can sit
//! in a checkpoint directory beside the policy's without clashing.

use super::error::{Result, RlError};
use super::policy::{Policy, VALUE_HEAD};
use crate::model::weights::load_into_varmap;
use crate::model::{LocalError, Transformer};
use candle_core::{DType, Module, Tensor, Var, D};
use candle_nn::{Init, Linear, VarBuilder, VarMap};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Prefix of every critic variable.
pub const CRITIC_PREFIX: &str = "critic";

/// Where the values come from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CriticMode {
    /// A value head on the policy's trunk, trained with the policy's loss
    /// (`policy + value_coef * value`) and optimizer.
    Shared,
    /// A separate value model with its own optimizer and learning rate (the
    /// reference's).
    #[default]
    Separate,
}

impl CriticMode {
    /// `shared` or `separate`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Shared => "shared",
            Self::Separate => "separate",
        }
    }

    /// Parse `shared` or `separate`.
    pub fn parse(s: &str) -> std::result::Result<Self, String> {
        match s.trim() {
            "shared" => Ok(Self::Shared),
            "separate" => Ok(Self::Separate),
            other => Err(format!("{other:?}: expected shared or separate")),
        }
    }
}

/// A separate value model: a decoder trunk and a linear value head.
pub struct Critic {
    varmap: VarMap,
    model: Transformer,
    head: Linear,
}

impl std::fmt::Debug for Critic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Critic")
            .field("config", self.model.config())
            .finish()
    }
}

impl Critic {
    /// A critic whose trunk is a copy of `policy`'s current decoder weights
    /// (no storage shared; a LoRA policy's adapters merged, every weight of
    /// the copy trained) and whose value head starts at zero.
    pub fn from_policy(policy: &Policy) -> Result<Self> {
        let varmap = VarMap::new();
        {
            let mut data = varmap.data().lock().map_err(|_| {
                RlError::Model(LocalError::Generation("var map lock poisoned".into()))
            })?;
            for (name, weight) in policy.model().merged_weights()? {
                data.insert(
                    format!("{CRITIC_PREFIX}.{name}"),
                    Var::from_tensor(&weight)?,
                );
            }
        }
        let vb = VarBuilder::from_varmap(&varmap, DType::F32, policy.device()).pp(CRITIC_PREFIX);
        let model = Transformer::new(policy.config(), vb.clone())?;
        let vh = vb.pp(VALUE_HEAD);
        let w = vh.get_with_hints((1, policy.config().hidden_size), "weight", Init::Const(0.0))?;
        let b = vh.get_with_hints(1, "bias", Init::Const(0.0))?;
        Ok(Self {
            varmap,
            model,
            head: Linear::new(w, Some(b)),
        })
    }

    /// Differentiable values `(n,)` at `positions` `(n,)`, flat indices into
    /// `b * t` of the right-padded `ids` `(b, t)`.
    pub fn values_at(&self, ids: &Tensor, positions: &Tensor) -> Result<Tensor> {
        let h = self.model.hidden_states(ids)?;
        let (b, t, d) = h.dims3()?;
        let h = h.reshape((b * t, d))?.index_select(positions, 0)?;
        Ok(self.head.forward(&h)?.squeeze(D::Minus1)?)
    }

    /// Every variable, by name (`critic.*`).
    pub fn vars(&self) -> Vec<(String, Var)> {
        self.varmap
            .data()
            .lock()
            .map(|d| d.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default()
    }

    /// Save every variable as safetensors.
    pub fn save_weights(&self, path: &Path) -> Result<()> {
        self.varmap.save(path).map_err(|e| {
            RlError::Model(LocalError::Weight {
                file: path.display().to_string(),
                name: "*".into(),
                message: e.to_string(),
            })
        })
    }

    /// Load every variable from a file written by [`Critic::save_weights`].
    pub fn load_weights(&self, path: &Path) -> Result<()> {
        let required: Vec<String> = self.vars().into_iter().map(|(n, _)| n).collect();
        load_into_varmap(
            &self.varmap,
            &[path.to_path_buf()],
            &required,
            self.model.device(),
        )?;
        Ok(())
    }
}
