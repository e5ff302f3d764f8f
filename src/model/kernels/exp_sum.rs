//! The normaliser of a softmax over a whole vocabulary, once per sampled
//! token: f32 exponentials the compiler vectorises (16 lanes), summed in f64
//! per stretch, instead of one libm `exp` per logit in f64 (49,152 of them a
//! token for SmolLM2, a few percent of a decoding step).

use super::train_ops::exp_nonpositive;

/// Lanes summed side by side.
const LANES: usize = 16;
/// Values summed in f32 before their sum joins the f64 total.
const STRETCH: usize = 512;

/// `Σ e^(scale·x − top)` over `xs`, where `top` is `scale` times their
/// maximum (so every exponent is at most 0) and `scale > 0`.
pub fn sum_exp_below_max(xs: &[f32], scale: f32, top: f32) -> f64 {
    let e = |x: f32| exp_nonpositive((x * scale - top).min(0.0));
    let mut total = 0f64;
    for stretch in xs.chunks(STRETCH) {
        let mut acc = [0f32; LANES];
        let mut lanes = stretch.chunks_exact(LANES);
        for c in &mut lanes {
            for (a, &x) in acc.iter_mut().zip(c) {
                *a += e(x);
            }
        }
        let rest: f32 = lanes.remainder().iter().map(|&x| e(x)).sum();
        total += acc.iter().map(|&a| a as f64).sum::<f64>() + rest as f64;
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_libm_in_f64() {
        let xs: Vec<f32> = (0..49_157)
            .map(|i| ((i * 7919) % 2003) as f32 / 97.0 - 11.0)
            .collect();
        for scale in [1.0f32, 0.7, 1.3] {
            let max = xs.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
            let top = max * scale;
            let exact: f64 = xs
                .iter()
                .map(|&x| (x as f64 * scale as f64 - top as f64).exp())
                .sum();
            let ours = sum_exp_below_max(&xs, scale, top);
            assert!(
                ((ours - exact) / exact).abs() < 1e-6,
                "{ours} against {exact}"
            );
        }
        assert_eq!(sum_exp_below_max(&[], 1.0, 0.0), 0.0);
    }
}
