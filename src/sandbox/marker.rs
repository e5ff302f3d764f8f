//! The exec protocol: how a command is typed into the shell, how the end
//! marker carrying its exit status is found, and how output is cleaned.

use super::MAX_OUTPUT_CHARS;

/// Longest line typed into the PTY (the tty's canonical line limit is 4095).
const CHUNK: usize = 900;

/// What every end marker starts with: `__ENDLESS_<tag>_<status>__`.
pub const MARKER_START: &str = "__ENDLESS_";

/// Raw bytes a session keeps per command before cleaning (enough for the
/// character cap).
pub const MAX_KEPT_BYTES: usize = 4 * MAX_OUTPUT_CHARS + 4096;

/// Quote `bytes` as the body of a bash `$'...'` string that uses only
/// printable ASCII, so no byte can act as a tty control character.
fn ansi_c_escape(bytes: &[u8], out: &mut String) {
    for &b in bytes {
        match b {
            b'\\' => out.push_str("\\\\"),
            b'\'' => out.push_str("\\'"),
            0x20..=0x7e => out.push(b as char),
            _ => out.push_str(&format!("\\x{b:02x}")),
        }
    }
}

/// The text typed into the shell to run `cmd` and print the marker for
/// `tag` (unique per session and command) with the exit status afterwards.
///
/// The command travels inside a variable (`$'...'` quoted, in short lines)
/// and runs with `eval` in the shell itself, so `cd` and `export` persist,
/// heredocs and multi-line commands work, an unbalanced quote is a syntax
/// error instead of a hang, and stdin is `/dev/null` so nothing waits on it.
pub fn wrap_command(cmd: &str, tag: &str) -> String {
    let bytes = cmd.as_bytes();
    let mut out = String::with_capacity(bytes.len() + 128);
    let mut first = true;
    for chunk in bytes.chunks(CHUNK) {
        out.push_str(if first {
            "__endless_c=$'"
        } else {
            "__endless_c+=$'"
        });
        ansi_c_escape(chunk, &mut out);
        out.push_str("'\n");
        first = false;
    }
    if first {
        out.push_str("__endless_c=''\n");
    }
    out.push_str("eval \"$__endless_c\" </dev/null; ");
    out.push_str(&marker_printf(tag, "$?"));
    out
}

/// `printf` line that prints the marker for `tag` with status `status`.
pub fn marker_printf(tag: &str, status: &str) -> String {
    format!("printf '\\n{MARKER_START}%s_%s__\\n' '{tag}' \"{status}\"\n")
}

/// The marker prefix to look for in the output.
pub fn marker_prefix(tag: &str) -> Vec<u8> {
    format!("{MARKER_START}{tag}_").into_bytes()
}

/// Find the marker for `prefix` in `buf`, searching from `from`: returns
/// (start of marker, end of marker, exit status).
pub fn find_marker(buf: &[u8], prefix: &[u8], from: usize) -> Option<(usize, usize, i32)> {
    let mut start = from.min(buf.len());
    while let Some(pos) = find(&buf[start..], prefix) {
        let at = start + pos;
        let rest = &buf[at + prefix.len()..];
        let digits = rest
            .iter()
            .take_while(|b| b.is_ascii_digit() || **b == b'-')
            .count();
        if digits > 0 && rest.len() >= digits + 2 && &rest[digits..digits + 2] == b"__" {
            let code = std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()?;
            // Wait for the marker line's newline so that it does not leak
            // into the next command's output.
            let after = &rest[digits + 2..];
            let tail = if after.starts_with(b"\r\n") {
                2
            } else if after.starts_with(b"\n") {
                1
            } else if after.is_empty() || after == b"\r" {
                return None;
            } else {
                0
            };
            return Some((at, at + prefix.len() + digits + 2 + tail, code));
        }
        if rest.len() < digits + 2 {
            return None; // marker still arriving
        }
        start = at + 1;
    }
    None
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || hay.len() < needle.len() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Remove the newline the marker `printf` put in front of the marker.
pub fn trim_marker_newline(out: &mut Vec<u8>) {
    if out.ends_with(b"\r\n") {
        out.truncate(out.len() - 2);
    } else if out.ends_with(b"\n") {
        out.truncate(out.len() - 1);
    }
}

/// Strip ANSI escape sequences (CSI, OSC, DCS, two-byte escapes) and other
/// control characters except newline and tab; turn CRLF into LF.
pub fn clean_output(raw: &[u8]) -> String {
    let text = String::from_utf8_lossy(raw);
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\x1b' => match chars.next() {
                Some('[') => {
                    // CSI: parameters and intermediates (0x20..=0x3f), then a
                    // final byte 0x40..=0x7e; anything else aborts it.
                    while let Some(&c) = chars.peek() {
                        if ('\x40'..='\x7e').contains(&c) {
                            chars.next();
                            break;
                        }
                        if !('\x20'..='\x3f').contains(&c) {
                            break;
                        }
                        chars.next();
                    }
                }
                Some(']') | Some('P') | Some('X') | Some('^') | Some('_') => {
                    // String sequences end with BEL or ESC '\'; a newline or
                    // 512 characters end a runaway one (e.g. binary output).
                    let mut n = 0;
                    while let Some(&c) = chars.peek() {
                        if c == '\n' || n > 512 {
                            break;
                        }
                        chars.next();
                        n += 1;
                        if c == '\x07' {
                            break;
                        }
                        if c == '\x1b' {
                            if chars.peek() == Some(&'\\') {
                                chars.next();
                            }
                            break;
                        }
                    }
                }
                Some('(') | Some(')') | Some('*') | Some('+') | Some('#') | Some('%') => {
                    chars.next();
                }
                _ => {}
            },
            '\r' => {
                if chars.peek() != Some(&'\n') {
                    out.push('\r');
                }
            }
            '\n' | '\t' => out.push(c),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

/// Keep the first [`MAX_OUTPUT_CHARS`] characters, adding a note when cut.
/// Returns the text and whether it was cut.
pub fn cap_output(text: String, raw_len: usize) -> (String, bool) {
    let count = text.chars().count();
    if count <= MAX_OUTPUT_CHARS && raw_len <= MAX_KEPT_BYTES {
        return (text, false);
    }
    let kept: String = text.chars().take(MAX_OUTPUT_CHARS).collect();
    let note = format!(
        "\n[output truncated: kept the first {MAX_OUTPUT_CHARS} characters of at least {} ({} bytes received)]",
        count.max(MAX_OUTPUT_CHARS),
        raw_len
    );
    (kept + &note, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_keeps_printable_and_hexes_the_rest() {
        let mut s = String::new();
        ansi_c_escape("a'b\\c\n\x03é".as_bytes(), &mut s);
        assert_eq!(s, "a\\'b\\\\c\\x0a\\x03\\xc3\\xa9");
    }

    #[test]
    fn wrapped_command_is_printable_short_lines() {
        let cmd = "cat <<EOF\nhello\nEOF\n".repeat(200);
        let w = wrap_command(&cmd, "tok_1");
        for line in w.lines() {
            assert!(line.len() < 4000, "line too long: {}", line.len());
            assert!(line.bytes().all(|b| (0x20..0x7f).contains(&b)));
        }
        assert!(w.ends_with("'tok_1' \"$?\"\n"));
        assert!(!w.contains("__ENDLESS_tok_1_"));
    }

    #[test]
    fn marker_found_with_code_and_fake_ignored() {
        let p = marker_prefix("abc_3");
        let buf = b"x __ENDLESS_abc_3_zz__ y\r\n__ENDLESS_abc_3_42__\r\n";
        let (s, e, code) = find_marker(buf, &p, 0).unwrap();
        assert_eq!(code, 42);
        assert_eq!(&buf[s..e], b"__ENDLESS_abc_3_42__\r\n");
        assert!(find_marker(b"__ENDLESS_abc_3_42__", &p, 0).is_none());
        assert!(find_marker(b"__ENDLESS_abc_3_4", &p, 0).is_none());
        assert!(find_marker(b"__ENDLESS_abc_2_4__", &p, 0).is_none());
    }

    #[test]
    fn clean_strips_ansi_and_crlf() {
        let raw = b"\x1b[1;31mred\x1b[0m\r\nok\x1b]0;title\x07\ttab\x1b(B\r\n";
        assert_eq!(clean_output(raw), "red\nok\ttab\n");
        assert_eq!(clean_output(&[0xff, b'a']), "\u{fffd}a");
        assert_eq!(clean_output(b"\x1b]junk\ndone\n"), "\ndone\n");
        assert_eq!(clean_output(b"\x1b[12\xc3\xa9x"), "\u{e9}x");
    }

    #[test]
    fn cap_keeps_first_chars_with_note() {
        let text = "é".repeat(MAX_OUTPUT_CHARS + 10);
        let (out, cut) = cap_output(text, 10);
        assert!(cut);
        assert!(out.starts_with(&"é".repeat(MAX_OUTPUT_CHARS)));
        assert!(out.contains("[output truncated"));
        let (out, cut) = cap_output("short".into(), 5);
        assert!(!cut);
        assert_eq!(out, "short");
    }
}
