//! AdamW with inspectable state (candle's keeps its moments private, so it
//! cannot be checkpointed), plus global-norm gradient clipping.

use super::error::{Result, RlError};
use candle_core::backprop::GradStore;
use candle_core::{CpuStorage, DType, InplaceOp1, Layout, Storage, Tensor, Var};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// AdamW hyper-parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AdamWConfig {
    /// Decay of the first-moment (mean) estimate. Default 0.9.
    pub beta1: f64,
    /// Decay of the second-moment (variance) estimate. Default 0.999.
    pub beta2: f64,
    /// Added to the denominator for stability. Default 1e-8.
    pub eps: f64,
    /// Decoupled weight decay: each update scales weights by
    /// `1 - lr * weight_decay`. Default 0 (the recipe sets `[train] weight_decay`).
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
            sq += sum_squares(g)?;
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

/// The moment tensor of `name` (zeros on first use), checked against the
/// variable's shape and dtype (a checkpoint's moments may not fit).
fn moment(moments: &mut HashMap<String, Tensor>, name: &str, var: &Var) -> Result<Tensor> {
    let t = match moments.get(name) {
        Some(t) => t.clone(),
        None => {
            let t = Tensor::zeros(var.shape(), DType::F32, var.device())?;
            moments.insert(name.to_string(), t.clone());
            t
        }
    };
    if t.shape() != var.shape() || t.dtype() != DType::F32 || !t.is_contiguous() {
        return Err(RlError::Batch(format!(
            "optimizer state: the moments of `{name}` are {:?} {:?}, the variable {:?} f32",
            t.dtype(),
            t.dims(),
            var.dims()
        )));
    }
    Ok(t)
}

/// The f32 values of contiguous CPU storage.
fn f32_values<'a>(s: &'a Storage, l: &Layout) -> candle_core::Result<&'a [f32]> {
    match (s, l.contiguous_offsets()) {
        (Storage::Cpu(CpuStorage::F32(all)), Some((a, b))) => Ok(&all[a..b]),
        _ => candle_core::bail!("adamw: expected contiguous f32 CPU values"),
    }
}

/// `f` on the f32 values of `t` (contiguous, on the CPU), changed in place.
fn with_values_mut(
    t: &Tensor,
    f: impl FnOnce(&mut [f32]) -> candle_core::Result<()>,
) -> candle_core::Result<()> {
    struct InPlace<F>(std::cell::Cell<Option<F>>);
    impl<F: FnOnce(&mut [f32]) -> candle_core::Result<()>> InplaceOp1 for InPlace<F> {
        fn name(&self) -> &'static str {
            "adamw-in-place"
        }
        fn cpu_fwd(&self, s: &mut CpuStorage, l: &Layout) -> candle_core::Result<()> {
            let (CpuStorage::F32(all), Some((a, b)), Some(f)) =
                (s, l.contiguous_offsets(), self.0.take())
            else {
                candle_core::bail!("adamw: expected contiguous f32 CPU values");
            };
            f(&mut all[a..b])
        }
    }
    t.inplace_op1(&InPlace(std::cell::Cell::new(Some(f))))
}

/// The sum of the squares of `t`'s values, in f64: over fixed blocks in
/// parallel on contiguous f32 CPU values (the same sum whatever the
/// thread count), else through tensor ops.
fn sum_squares(t: &Tensor) -> Result<f64> {
    use rayon::prelude::*;
    if t.device().is_cpu() && t.dtype() == DType::F32 && t.is_contiguous() {
        let (storage, layout) = t.storage_and_layout();
        let xs = f32_values(&storage, layout)?;
        let blocks: Vec<f64> = xs
            .par_chunks(1 << 14)
            .map(|c| c.iter().map(|&x| (x as f64) * (x as f64)).sum())
            .collect();
        return Ok(blocks.iter().sum());
    }
    Ok(t.sqr()?
        .sum_all()?
        .to_dtype(DType::F64)?
        .to_scalar::<f64>()?)
}

impl AdamW {
    /// Change the hyper-parameters (the moments are kept).
    pub fn set_config(&mut self, cfg: AdamWConfig) {
        self.cfg = cfg;
    }

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
        let vars = self.vars.clone();
        for (name, var) in &vars {
            let Some(g) = grads.get(var.as_tensor()) else {
                continue;
            };
            if var.device().is_cpu() && var.dtype() == DType::F32 && g.dtype() == DType::F32 {
                self.step_fused(name, var, g, lr, grad_scale, bc1, bc2)?;
                continue;
            }
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

    /// One variable's update in a single pass over f32 CPU memory (the same
    /// arithmetic as the tensor-op path below, without a dozen temporaries),
    /// in place: the weight, both moments and the gradient are read and
    /// written where they lie, with no copies.
    #[allow(clippy::too_many_arguments)]
    fn step_fused(
        &mut self,
        name: &str,
        var: &Var,
        g: &Tensor,
        lr: f64,
        grad_scale: f64,
        bc1: f64,
        bc2: f64,
    ) -> Result<()> {
        let m = moment(&mut self.m, name, var)?;
        let v = moment(&mut self.v, name, var)?;
        let g = g.contiguous()?;
        let (g_storage, g_layout) = g.storage_and_layout();
        let g = f32_values(&g_storage, g_layout)?;
        let c = self.cfg;
        let (b1, b2, gs) = (c.beta1 as f32, c.beta2 as f32, grad_scale as f32);
        let (inv_bc1, inv_bc2) = (1.0 / bc1 as f32, 1.0 / bc2 as f32);
        let (eps, lr32) = (c.eps as f32, lr as f32);
        let decay = (1.0 - lr * c.weight_decay) as f32;
        let update = |(((w, m), v), g): (((&mut f32, &mut f32), &mut f32), &f32)| {
            let g = g * gs;
            *m = b1 * *m + (1.0 - b1) * g;
            *v = b2 * *v + (1.0 - b2) * g * g;
            let u = (*m * inv_bc1) / ((*v * inv_bc2).sqrt() + eps);
            *w = *w * decay - lr32 * u;
        };
        let run = |w: &mut [f32], m: &mut [f32], v: &mut [f32]| {
            if w.len() >= 1 << 16 {
                use rayon::prelude::*;
                w.par_iter_mut()
                    .zip(m.par_iter_mut())
                    .zip(v.par_iter_mut())
                    .zip(g.par_iter())
                    .with_min_len(1 << 14)
                    .for_each(update);
            } else {
                w.iter_mut()
                    .zip(m.iter_mut())
                    .zip(v.iter_mut())
                    .zip(g.iter())
                    .for_each(update);
            }
        };
        with_values_mut(var.as_tensor(), |w| {
            with_values_mut(&m, |m| {
                with_values_mut(&v, |v| {
                    run(w, m, v);
                    Ok(())
                })
            })
        })?;
        Ok(())
    }

    /// The moments as named tensors (`m.<var>`, `v.<var>`), for checkpoints.
    pub fn state_tensors(&self) -> HashMap<String, Tensor> {
        let mut out = HashMap::new();
        // Copies: the update changes the moments in place.
        for (kind, moments) in [("m", &self.m), ("v", &self.v)] {
            for (k, t) in moments {
                if let Ok(t) = t.copy() {
                    out.insert(format!("{kind}.{k}"), t);
                }
            }
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
            // A storage of its own: the update changes it in place.
            let t = t.copy()?;
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
    }

    /// The fused f32 CPU update and the tensor-op update (taken here by f64) agree.
    #[test]
    fn fused_update_matches_tensor_ops() {
        let init: Vec<f32> = (0..300)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0)
            .collect();
        let w32 = Var::from_vec(init.clone(), 300, &Device::Cpu).unwrap();
        let w64 = Var::from_tensor(
            &Tensor::from_vec(init, 300, &Device::Cpu)
                .unwrap()
                .to_dtype(candle_core::DType::F64)
                .unwrap(),
        )
        .unwrap();
        let cfg = AdamWConfig {
            weight_decay: 0.05,
            ..Default::default()
        };
        let mut o32 = AdamW::new(vec![("w".into(), w32.clone())], cfg);
        let mut o64 = AdamW::new(vec![("w".into(), w64.clone())], cfg);
        for step in 0..4 {
            // loss = sum(w^3) / 3 -> grad = w^2, different at each step.
            let g32 = (w32.as_tensor().sqr().unwrap() * w32.as_tensor())
                .unwrap()
                .sum_all()
                .unwrap()
                / 3.0;
            let g64 = (w64.as_tensor().sqr().unwrap() * w64.as_tensor())
                .unwrap()
                .sum_all()
                .unwrap()
                / 3.0;
            let (g32, g64) = (
                g32.unwrap().backward().unwrap(),
                g64.unwrap().backward().unwrap(),
            );
            o32.step(&g32, 0.01, 0.5 + step as f64 * 0.1).unwrap();
            o64.step(&g64, 0.01, 0.5 + step as f64 * 0.1).unwrap();
        }
        let a = w32.as_tensor().to_vec1::<f32>().unwrap();
        let b = w64
            .as_tensor()
            .to_dtype(candle_core::DType::F32)
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() < 1e-5, "{x} vs {y}");
        }
        let m = &o32.state_tensors()["m.w"];
        assert_eq!(m.dims(), &[300]);
        assert_eq!(warmup_lr(1.0, 9, 4), 1.0);
    }

    /// The update changes weights and moments in place: saved moments are
    /// copies, and restored moments that do not fit the variable are an
    /// error naming it, with the weight left as it was.
    #[test]
    fn in_place_moments_are_copied_out_and_checked_in() {
        let dev = Device::Cpu;
        // Above the parallel threshold.
        let w = Var::from_vec(vec![1f32; 70_000], 70_000, &dev).unwrap();
        let grads = |w: &Var| w.as_tensor().sqr().unwrap().sum_all().unwrap().backward();
        let mut opt = AdamW::new(vec![("w".into(), w.clone())], AdamWConfig::default());
        opt.step(&grads(&w).unwrap(), 0.1, 1.0).unwrap();
        let saved = opt.state_tensors();
        let before = saved["m.w"].to_vec1::<f32>().unwrap();
        opt.step(&grads(&w).unwrap(), 0.1, 1.0).unwrap();
        assert_eq!(saved["m.w"].to_vec1::<f32>().unwrap(), before);
        let w1 = w.as_tensor().to_vec1::<f32>().unwrap();
        assert!(w1.iter().all(|&x| (x - w1[0]).abs() == 0.0 && x < 1.0));

        let bad: HashMap<String, Tensor> = [
            (
                "m.w".to_string(),
                Tensor::zeros(3, DType::F32, &dev).unwrap(),
            ),
            (
                "v.w".to_string(),
                Tensor::zeros(3, DType::F32, &dev).unwrap(),
            ),
        ]
        .into();
        opt.load_state(bad, 2).unwrap();
        let err = opt.step(&grads(&w).unwrap(), 0.1, 1.0).unwrap_err();
        assert!(err.to_string().contains("`w`"), "{err}");
        assert_eq!(w.as_tensor().to_vec1::<f32>().unwrap(), w1);
    }
}
