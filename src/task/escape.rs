//! Text from task files, agent commands and their outputs, made safe to
//! print on an operator's terminal.

use std::borrow::Cow;
use std::fmt::Write as _;

/// `text` with every character a terminal would act on shown as a visible
/// escape instead: C0 controls but newline and tab (`ESC` becomes `\x1b`,
/// so OSC 52 clipboard writes, clear-screen and cursor moves print as
/// text), DEL, C1 controls (`\u{9b}`) and the bidirectional overrides that
/// reorder what is shown (`\u{202e}`). A carriage return before a newline
/// is dropped; a lone one is escaped (it would overwrite the line).
/// Borrows when there is nothing to escape.
pub fn terminal_safe(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' if chars.peek() == Some(&'\n') => {}
            c if needs_escape(c) && (c as u32) < 0x80 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if needs_escape(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

fn needs_escape(c: char) -> bool {
    match c {
        '\n' | '\t' => false,
        c if c.is_control() => true,
        '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_become_visible_text() {
        let osc52 = "copy \x1b]52;c;aGk=\x07 done";
        assert_eq!(terminal_safe(osc52), "copy \\x1b]52;c;aGk=\\x07 done");
        assert_eq!(terminal_safe("\x1b[2J\x1b[H"), "\\x1b[2J\\x1b[H");
        assert_eq!(terminal_safe("a\u{9b}31mb"), "a\\u{9b}31mb");
        assert_eq!(terminal_safe("x\u{202e}y\x7f"), "x\\u{202e}y\\x7f");
        assert_eq!(terminal_safe("over\rwrite\r\nline"), "over\\x0dwrite\nline");
    }

    #[test]
    fn plain_text_is_borrowed_unchanged() {
        let text = "tabs\tand\nnewlines, ünïcode ✓";
        assert!(matches!(terminal_safe(text), Cow::Borrowed(t) if t == text));
    }
}
