//! Text that fits narrow cells: left-truncated paths, progress bars.

/// Keep the end of `s` (paths are most telling at the end).
pub fn truncate_left(s: &str, max: usize) -> String {
    let n = s.chars().count();
    if n <= max {
        return s.to_string();
    }
    if max == 0 {
        return String::new();
    }
    let keep: String = s.chars().skip(n + 1 - max).collect();
    format!("…{keep}")
}

/// A text progress bar ``████░░░░`` of `width` cells.
pub fn bar(fraction: f64, width: usize) -> String {
    let filled = ((fraction.clamp(0.0, 1.0) * width as f64).round() as usize).min(width);
    format!("{}{}", "█".repeat(filled), "░".repeat(width - filled))
}
