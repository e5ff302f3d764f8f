//! AdamW with inspectable state (candle's keeps its moments private, so it
//! cannot be checkpointed), plus global-norm gradient clipping.

use super::error::{Result, RlError};
use candle_core::backprop::GradStore;
use candle_core::{Tensor, Var};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// AdamW hyper-parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AdamWConfig {
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

impl Default for AdamWConfig {
    fn default() -> Self {
        Self {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
        }
    }
}

/// AdamW over named variables. Moments are created lazily, on a variable's
/// first gradient.
#[derive(Debug)]
pub struct AdamW {
    cfg: AdamWConfig,
    vars: Vec<(String, Var)>,
    m: HashMap<String, Tensor>,
    v: HashMap<String, Tensor>,
    steps: u64,
}

/// Global L2 norm of the gradients of `vars`.
pub fn grad_norm(vars: &[(String, Var)], grads: &GradStore) -> Result<f64> {
    let mut sq = 0.0f64;
    for (_, v) in vars {
        if let Some(g) = grads.get(v.as_tensor()) {
            sq += g
                .sqr()?
                .sum_all()?
                .to_dtype(candle_core::DType::F64)?
                .to_scalar::<f64>()?;
        }
    }
    Ok(sq.sqrt())
}

/// The factor that brings a gradient of norm `norm` within `max_norm`.
pub fn clip_scale(norm: f64, max_norm: f64) -> f64 {
    if max_norm > 0.0 && norm > max_norm {
        max_norm / (norm + 1e-6)
    } else {
        1.0
    }
}

impl AdamW {
    /// An optimiser over `vars` (name, variable), sorted by name.
    pub fn new(mut vars: Vec<(String, Var)>, cfg: AdamWConfig) -> Self {
        vars.sort_by(|a, b| a.0.cmp(&b.0));
        Self {
            cfg,
            vars,
            m: HashMap::new(),
            v: HashMap::new(),
            steps: 0,
        }
    }

    /// The variables.
    pub fn vars(&self) -> &[(String, Var)] {
        &self.vars
    }

    /// Updates applied so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Hyper-parameters.
    pub fn config(&self) -> &AdamWConfig {
        &self.cfg
    }

    /// One update with learning rate `lr`, gradients multiplied by `grad_scale`
    /// (the clipping factor).
    pub fn step(&mut self, grads: &GradStore, lr: f64, grad_scale: f64) -> Result<()> {
        self.steps += 1;
        let t = self.steps as i32;
        let (b1, b2) = (self.cfg.beta1, self.cfg.beta2);
        let bc1 = 1.0 - b1.powi(t);
        let bc2 = 1.0 - b2.powi(t);
        for (name, var) in &self.vars {
            let Some(g) = grads.get(var.as_tensor()) else {
                continue;
            };
            let g = (g * grad_scale)?;
            let m = match self.m.get(name) {
                Some(m) => ((m * b1)? + (&g * (1.0 - b1))?)?,
                None => (&g * (1.0 - b1))?,
            };
            let v = match self.v.get(name) {
                Some(v) => ((v * b2)? + (g.sqr()? * (1.0 - b2))?)?,
                None => (g.sqr()? * (1.0 - b2))?,
            };
            let m_hat = (&m / bc1)?;
            let v_hat = (&v / bc2)?;
            let update = (m_hat / (v_hat.sqrt()? + self.cfg.eps)?)?;
            let w = var.as_tensor();
            let decayed = (w * (1.0 - lr * self.cfg.weight_decay))?;
            var.set(&(decayed - (update * lr)?)?)?;
            self.m.insert(name.clone(), m);
            self.v.insert(name.clone(), v);
        }
        Ok(())
    }

    /// The moments as named tensors (`m.<var>`, `v.<var>`), for checkpoints.
    pub fn state_tensors(&self) -> HashMap<String, Tensor> {
        let mut out = HashMap::new();
        for (k, t) in &self.m {
            out.insert(format!("m.{k}"), t.clone());
        }
        for (k, t) in &self.v {
            out.insert(format!("v.{k}"), t.clone());
        }
        out
    }

    /// Restore moments and the step count saved by [`AdamW::state_tensors`].
    pub fn load_state(&mut self, tensors: HashMap<String, Tensor>, steps: u64) -> Result<()> {
        let names: std::collections::HashSet<&str> =
            self.vars.iter().map(|(n, _)| n.as_str()).collect();
        let mut m = HashMap::new();
        let mut v = HashMap::new();
        for (k, t) in tensors {
            let (kind, name) = k
                .split_once('.')
                .ok_or_else(|| RlError::Batch(format!("optimizer state: bad tensor name `{k}`")))?;
            if !names.contains(name) {
                return Err(RlError::Batch(format!(
                    "optimizer state: `{name}` is not a variable of this model"
                )));
            }
            match kind {
                "m" => m.insert(name.to_string(), t),
                "v" => v.insert(name.to_string(), t),
                _ => {
                    return Err(RlError::Batch(format!(
                        "optimizer state: bad tensor name `{k}`"
                    )))
                }
            };
        }
        self.m = m;
        self.v = v;
        self.steps = steps;
        Ok(())
    }
}

/// Learning rate with linear warmup: `lr * min(1, (step + 1) / warmup)`.
pub fn warmup_lr(lr: f64, step: u64, warmup_steps: u64) -> f64 {
    if warmup_steps == 0 {
        lr
    } else {
        lr * ((step + 1) as f64 / warmup_steps as f64).min(1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn adamw_matches_hand_computation_and_clipping() {
        let w = Var::new(&[1.0f32, -2.0], &Device::Cpu).unwrap();
        let mut opt = AdamW::new(
            vec![("w".into(), w.clone())],
            AdamWConfig {
                weight_decay: 0.1,
                ..Default::default()
            },
        );
        // loss = 3 * sum(w) -> grad = [3, 3]; norm = sqrt(18).
        let loss = (w.as_tensor() * 3.0).unwrap().sum_all().unwrap();
        let grads = loss.backward().unwrap();
        let norm = grad_norm(opt.vars(), &grads).unwrap();
        assert!((norm - 18f64.sqrt()).abs() < 1e-5);
        let scale = clip_scale(norm, 1.0);
        assert!((norm * scale - 1.0).abs() < 1e-5);
        opt.step(&grads, 0.1, scale).unwrap();
        // First Adam step moves each weight by lr * sign(grad) (bias-corrected),
        // after decay: w * (1 - lr * wd) - lr.
        let got = w.as_tensor().to_vec1::<f32>().unwrap();
        let want = [1.0 * (1.0 - 0.01) - 0.1, -2.0 * (1.0 - 0.01) - 0.1];
        for (g, e) in got.iter().zip(want) {
            assert!((g - e).abs() < 1e-5, "{got:?}");
        }
        let state = opt.state_tensors();
        assert_eq!(state.len(), 2);
        let mut other = AdamW::new(vec![("w".into(), w.clone())], *opt.config());
        other.load_state(state, opt.steps()).unwrap();
        assert_eq!(other.steps(), 1);
        assert_eq!(warmup_lr(1.0, 0, 4), 0.25);
        assert_eq!(warmup_lr(1.0, 9, 4), 1.0);
    }
}
