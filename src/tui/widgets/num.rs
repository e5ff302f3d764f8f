//! Numbers for narrow columns and chart labels.

/// A number in a few characters: `0.42`, `12.5`, `3104`, `1.2e-4`, `NaN`.
pub fn num(x: f64) -> String {
    if !x.is_finite() {
        return format!("{x}");
    }
    let a = x.abs();
    if a == 0.0 {
        "0".into()
    } else if a >= 1000.0 {
        format!("{x:.0}")
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else if a >= 0.01 {
        format!("{x:.2}")
    } else {
        format!("{x:.1e}")
    }
}

#[cfg(test)]
mod tests {
    use super::num;

    #[test]
    fn numbers_stay_short() {
        let got: Vec<String> = [0.0, 0.4213, -0.0123, 12.34, 3104.2, 1.2e-4, f64::NAN]
            .into_iter()
            .map(num)
            .collect();
        assert_eq!(got, ["0", "0.42", "-0.01", "12.3", "3104", "1.2e-4", "NaN"]);
    }
}
