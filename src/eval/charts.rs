//! PNG charts drawn with plotters, without text (fonts may be missing).

use std::path::Path;

use plotters::prelude::*;

/// A chart could not be drawn or saved.
#[derive(Debug, thiserror::Error)]
#[error("cannot draw chart {path}: {message}")]
pub struct ChartError {
    /// The PNG file that was being written.
    pub path: String,
    /// The plotters error, as text.
    pub message: String,
}

fn err(path: &Path, e: impl std::fmt::Display) -> ChartError {
    ChartError {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

const W: u32 = 800;
const H: u32 = 400;
const PAD: i32 = 20;

/// One bar per category (pass rate 0..=1, in the given order) over a grey
/// 100% bar, with grid lines at 25/50/75%.
pub fn draw_pass_rate_chart(bars: &[(String, f64)], path: &Path) -> Result<(), ChartError> {
    let root = BitMapBackend::new(path, (W, H)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(path, e))?;
    let (w, h) = (W as i32 - 2 * PAD, H as i32 - 2 * PAD);
    let n = bars.len().max(1) as i32;
    let slot = w / n;
    for (i, (_, rate)) in bars.iter().enumerate() {
        let x0 = PAD + slot * i as i32 + slot / 8;
        let x1 = PAD + slot * (i as i32 + 1) - slot / 8;
        let rate = if rate.is_finite() {
            rate.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let top = PAD + h - (h as f64 * rate).round() as i32;
        root.draw(&Rectangle::new(
            [(x0, PAD), (x1, PAD + h)],
            RGBColor(235, 235, 235).filled(),
        ))
        .map_err(|e| err(path, e))?;
        root.draw(&Rectangle::new(
            [(x0, top), (x1, PAD + h)],
            RGBColor(44, 160, 44).filled(),
        ))
        .map_err(|e| err(path, e))?;
    }
    for q in 1..4 {
        let y = PAD + h - h * q / 4;
        root.draw(&PathElement::new(
            vec![(PAD, y), (PAD + w, y)],
            RGBColor(120, 120, 120),
        ))
        .map_err(|e| err(path, e))?;
    }
    root.draw(&PathElement::new(
        vec![(PAD, PAD + h), (PAD + w, PAD + h)],
        BLACK,
    ))
    .map_err(|e| err(path, e))?;
    root.present().map_err(|e| err(path, e))
}

/// One stacked horizontal bar: each failure mode's share, in `colors`.
pub fn draw_failure_mix(
    counts: &[usize],
    colors: &[(u8, u8, u8)],
    path: &Path,
) -> Result<(), ChartError> {
    let root = BitMapBackend::new(path, (W, 120)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(path, e))?;
    let total: usize = counts.iter().sum();
    let w = W as i32 - 2 * PAD;
    if total == 0 {
        root.draw(&Rectangle::new(
            [(PAD, PAD), (PAD + w, 100)],
            RGBColor(235, 235, 235).filled(),
        ))
        .map_err(|e| err(path, e))?;
        return root.present().map_err(|e| err(path, e));
    }
    let mut x = PAD;
    let mut acc = 0usize;
    for (i, &c) in counts.iter().enumerate() {
        acc += c;
        let x_end = PAD + (w as f64 * acc as f64 / total as f64).round() as i32;
        if x_end > x {
            let (r, g, b) = colors.get(i).copied().unwrap_or((0, 0, 0));
            root.draw(&Rectangle::new(
                [(x, PAD), (x_end, 100)],
                RGBColor(r, g, b).filled(),
            ))
            .map_err(|e| err(path, e))?;
        }
        x = x_end;
    }
    root.present().map_err(|e| err(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_are_pngs() {
        let dir = tempfile::tempdir().unwrap();
        let out = std::env::var_os("ENDLESS_CHART_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or(dir.path().into());
        let bars = vec![
            ("a".to_string(), 0.25),
            ("b".to_string(), 1.0),
            ("c".to_string(), 0.0),
            ("d".to_string(), f64::NAN),
        ];
        draw_pass_rate_chart(&bars, &out.join("rate.png")).unwrap();
        draw_failure_mix(
            &[3, 1, 0, 2, 0, 1],
            &crate::eval::CHART_COLORS,
            &out.join("mix.png"),
        )
        .unwrap();
        draw_failure_mix(&[0; 6], &crate::eval::CHART_COLORS, &out.join("empty.png")).unwrap();
        for f in ["rate.png", "mix.png", "empty.png"] {
            assert_eq!(&std::fs::read(out.join(f)).unwrap()[..4], b"\x89PNG");
        }
    }
}
