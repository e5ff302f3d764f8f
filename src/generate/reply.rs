//! Pulling tagged sections out of an LLM's reply, robustly: extra prose
//! around the tags, code fences inside or around them, a missing closing tag
//! at the very end, different letter case. Anything else is a clear reason
//! to reject the candidate.

/// Why a reply could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    /// No `<tag>` section (the tag is given).
    #[error("the reply has no <{0}> section")]
    Missing(String),
    /// The `<tag>` section holds only whitespace.
    #[error("the <{0}> section is empty")]
    Empty(String),
    /// The model replied with nothing.
    #[error("the reply is empty")]
    EmptyReply,
}

/// The content of the last `<tag>...</tag>` section, trimmed and without a
/// surrounding code fence. A section opened but never closed runs to the
/// next opening tag of another section or the end of the reply.
pub fn section(reply: &str, tag: &str) -> Result<String, ReplyError> {
    if reply.trim().is_empty() {
        return Err(ReplyError::EmptyReply);
    }
    let lower = reply.to_ascii_lowercase();
    let open = format!("<{}>", tag.to_ascii_lowercase());
    let close = format!("</{}>", tag.to_ascii_lowercase());
    let start = lower
        .rfind(&open)
        .ok_or_else(|| ReplyError::Missing(tag.into()))?
        + open.len();
    let rest = &lower[start..];
    let end = match rest.find(&close) {
        Some(e) => start + e,
        None => start + next_open_tag(rest).unwrap_or(rest.len()),
    };
    let body = strip_fence(reply[start..end].trim());
    if body.trim().is_empty() {
        return Err(ReplyError::Empty(tag.into()));
    }
    Ok(body)
}

/// Offset of the next `<word>` opening tag, if any.
fn next_open_tag(s: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = s[from..].find('<') {
        let at = from + i;
        let after = &s[at + 1..];
        let name_len = after.find('>')?;
        let name = &after[..name_len];
        if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// Remove one surrounding Markdown code fence (```lang ... ```).
pub fn strip_fence(text: &str) -> String {
    let t = text.trim();
    if let Some(rest) = t.strip_prefix("```") {
        let body = rest.split_once('\n').map(|(_, b)| b).unwrap_or("");
        let body = body.trim_end();
        let body = body.strip_suffix("```").unwrap_or(body);
        return format!("{}\n", body.trim_end_matches('\n'));
    }
    format!("{t}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_sections_among_prose_and_fences() {
        let reply = "Sure! Here you go.\n<TASK>\nCount the lines.\n</TASK>\n\n<truth>\n```text\n/home/user/a.txt has 3 lines\n```\n</truth>\nHope this helps.";
        assert_eq!(section(reply, "task").unwrap(), "Count the lines.\n");
        assert_eq!(
            section(reply, "truth").unwrap(),
            "/home/user/a.txt has 3 lines\n"
        );
    }

    #[test]
    fn last_section_wins_and_unclosed_runs_to_next_tag() {
        let reply = "<setup>old</setup>\n<setup>\n```bash\necho new\n```\n<test_initial_state>\ndef test_x():\n    pass";
        assert_eq!(section(reply, "setup").unwrap(), "echo new\n");
        assert_eq!(
            section(reply, "test_initial_state").unwrap(),
            "def test_x():\n    pass\n"
        );
    }

    #[test]
    fn missing_or_empty_sections_are_reasons() {
        assert_eq!(section("", "task"), Err(ReplyError::EmptyReply));
        assert_eq!(
            section("no tags here", "task"),
            Err(ReplyError::Missing("task".into()))
        );
        assert_eq!(
            section("<task>  </task>", "task"),
            Err(ReplyError::Empty("task".into()))
        );
        assert_eq!(
            section("<task>```\n```</task>", "task"),
            Err(ReplyError::Empty("task".into()))
        );
        // Python comparisons are not tags.
        let py = "<test_final_state>\nassert a < b and c > d\n</test_final_state>";
        assert_eq!(
            section(py, "test_final_state").unwrap(),
            "assert a < b and c > d\n"
        );
    }
}
