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

/// `message` with each URL said once: a later ` for url (URL)` or ` (URL)`
/// naming a URL already given (the transport's error repeats the one its
/// caller named) is dropped, a bare repeat becomes `it`.
pub fn once_per_url(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut seen: Vec<String> = Vec::new();
    let mut rest = message;
    loop {
        // The earlier of the two schemes.
        let start = match (rest.find("http://"), rest.find("https://")) {
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) => break,
        };
        let len = rest[start..]
            .find(|c: char| c.is_whitespace() || matches!(c, ')' | '"' | '\'' | ',' | ';'))
            .unwrap_or(rest.len() - start);
        let url = rest[start..start + len].trim_end_matches([':', '.']);
        let end = start + url.len();
        let before = &rest[..start];
        // Compare without a trailing path (`…/v1` and `…/v1/chat/completions`).
        let repeat = seen
            .iter()
            .any(|s| url.starts_with(s.as_str()) || s.starts_with(url));
        if !repeat {
            out.push_str(&rest[..end]);
            seen.push(url.to_string());
            rest = &rest[end..];
            continue;
        }
        let closes = rest[end..].starts_with(')');
        if closes && before.ends_with(" for url (") {
            out.push_str(&before[..before.len() - " for url (".len()]);
            rest = &rest[end + 1..];
        } else if closes && before.ends_with(" (") {
            out.push_str(&before[..before.len() - 2]);
            rest = &rest[end + 1..];
        } else {
            out.push_str(before);
            out.push_str("it");
            rest = &rest[end..];
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::once_per_url;

    #[test]
    fn a_url_is_said_once() {
        let m = "cannot reach the model server at http://127.0.0.1:9/v1/chat/completions: error sending request for url (http://127.0.0.1:9/v1/chat/completions): client error (Connect)";
        assert_eq!(
            once_per_url(m),
            "cannot reach the model server at http://127.0.0.1:9/v1/chat/completions: error sending request: client error (Connect)"
        );
        assert_eq!(
            once_per_url("http://a/v1 failed (http://a/v1/x); retry http://a/v1"),
            "http://a/v1 failed; retry it"
        );
        assert_eq!(once_per_url("no url here"), "no url here");
        assert_eq!(
            once_per_url("http://a and https://b differ"),
            "http://a and https://b differ"
        );
    }
}
