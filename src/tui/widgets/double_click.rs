//! Telling a double click from two clicks: the same row clicked again
//! within [`DOUBLE_CLICK`] (terminals report each press on its own).

use std::time::{Duration, Instant};

/// Longest gap between the two presses of a double click.
pub const DOUBLE_CLICK: Duration = Duration::from_millis(500);

/// The last click, to compare the next with.
#[derive(Debug, Clone, Default)]
pub struct DoubleClick {
    last: Option<(Instant, usize)>,
}

impl DoubleClick {
    /// A left click on row `row` at `now`: whether it completes a double
    /// click (then the next click starts afresh).
    pub fn click(&mut self, row: usize, now: Instant) -> bool {
        let double = self
            .last
            .is_some_and(|(t, r)| r == row && now.saturating_duration_since(t) <= DOUBLE_CLICK);
        self.last = if double { None } else { Some((now, row)) };
        double
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_row_twice_quickly_is_a_double_click() {
        let t0 = Instant::now();
        let mut d = DoubleClick::default();
        assert!(!d.click(3, t0));
        assert!(d.click(3, t0 + Duration::from_millis(200)));
        assert!(
            !d.click(3, t0 + Duration::from_millis(300)),
            "a third starts afresh"
        );
        assert!(!d.click(4, t0 + Duration::from_millis(400)), "another row");
        assert!(!d.click(4, t0 + Duration::from_secs(2)), "too slow");
    }
}
