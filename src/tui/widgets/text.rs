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

/// `path` in at most `max` columns: whole when it fits, else with its
/// middle (or its start) given up to an ellipsis, keeping whole components:
/// as many of the last ones as fit, then of the first ones
/// (`/home/…/work/ws`). Only a last component wider than `max` is cut, from
/// its left.
pub fn shorten_path(path: &str, max: usize) -> String {
    let width = |s: &str| s.chars().count();
    if width(path) <= max {
        return path.to_string();
    }
    let parts: Vec<&str> = path.split('/').collect();
    let Some((last, _)) = parts.split_last() else {
        return truncate_left(path, max);
    };
    // "…/" plus the tail, grown from the right while it fits.
    let mut tail = last.to_string();
    let mut first_in_tail = parts.len() - 1;
    if width(&tail) + 2 > max {
        return truncate_left(last, max);
    }
    while first_in_tail > 0 {
        let grown = format!("{}/{tail}", parts[first_in_tail - 1]);
        if width(&grown) + 2 > max {
            break;
        }
        tail = grown;
        first_in_tail -= 1;
    }
    // Then whole components from the left, in the room left over.
    let mut head = String::new();
    for part in &parts[..first_in_tail] {
        let grown = format!("{head}{part}/");
        if width(&grown) + 2 + width(&tail) > max {
            break;
        }
        head = grown;
    }
    format!("{head}…/{tail}")
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
    use super::{once_per_url, shorten_path};

    #[test]
    fn a_path_is_whole_when_it_fits_and_keeps_whole_components_when_not() {
        let p = "/home/alice/projects/rl/endless-workspace";
        assert_eq!(shorten_path(p, 80), p);
        assert_eq!(shorten_path(p, p.len()), p);
        // The last components first, then the first ones, never half a name.
        assert_eq!(shorten_path(p, 37), "…/alice/projects/rl/endless-workspace");
        assert_eq!(shorten_path(p, 36), "/…/projects/rl/endless-workspace");
        assert_eq!(shorten_path(p, 30), "/home/…/rl/endless-workspace");
        assert_eq!(shorten_path(p, 25), "/…/rl/endless-workspace");
        assert_eq!(shorten_path(p, 22), "…/rl/endless-workspace");
        assert_eq!(shorten_path(p, 19), "…/endless-workspace");
        // Only a last component wider than the room is cut.
        assert_eq!(shorten_path(p, 10), "…workspace");
        assert_eq!(shorten_path("relative/ws", 5), "…/ws");
        assert_eq!(shorten_path("", 0), "");
    }

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
