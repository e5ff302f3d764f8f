//! A small keyword highlighter for Python and shell (also used for
//! Dockerfiles and Apptainer definitions). Chosen over `syntect` to keep the
//! build light on shared machines; it colours comments, strings, numbers,
//! keywords and decorators / variables, which is what a reviewer scans for.

use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};

use crate::tui::theme::Theme;

/// Which keyword set to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lang {
    /// Test files.
    Python,
    /// Set-up scripts and solutions.
    Shell,
    /// No highlighting.
    Plain,
}

impl Lang {
    /// Guess from a file name.
    pub fn from_path(path: &str) -> Lang {
        let lower = path.to_ascii_lowercase();
        if lower.ends_with(".py") {
            Lang::Python
        } else if lower.ends_with(".sh")
            || lower.ends_with(".def")
            || lower.ends_with("dockerfile")
            || lower.ends_with(".bash")
        {
            Lang::Shell
        } else {
            Lang::Plain
        }
    }

    fn keywords(self) -> &'static [&'static str] {
        match self {
            Lang::Python => &[
                "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class",
                "continue", "def", "del", "elif", "else", "except", "finally", "for", "from",
                "global", "if", "import", "in", "is", "lambda", "nonlocal", "not", "or", "pass",
                "raise", "return", "try", "while", "with", "yield",
            ],
            Lang::Shell => &[
                "if",
                "then",
                "else",
                "elif",
                "fi",
                "for",
                "while",
                "until",
                "do",
                "done",
                "case",
                "esac",
                "in",
                "function",
                "return",
                "exit",
                "export",
                "local",
                "set",
                "cd",
                "echo",
                "printf",
                "mkdir",
                "cat",
                "chmod",
                "chown",
                "cp",
                "mv",
                "rm",
                "touch",
                "ln",
                "FROM",
                "RUN",
                "COPY",
                "ADD",
                "ENV",
                "WORKDIR",
                "USER",
                "Bootstrap",
                "From",
            ],
            Lang::Plain => &[],
        }
    }
}

/// Highlight one line of `lang` into spans.
pub fn highlight_line(line: &str, lang: Lang, theme: &Theme) -> Vec<Span<'static>> {
    let base = Style::new().fg(theme.foreground);
    if lang == Lang::Plain {
        return vec![Span::styled(line.to_string(), base)];
    }
    let comment = Style::new().fg(theme.muted).add_modifier(Modifier::ITALIC);
    let string = Style::new().fg(theme.success);
    let number = Style::new().fg(theme.warning);
    let keyword = Style::new().fg(theme.accent).add_modifier(Modifier::BOLD);
    let special = Style::new().fg(theme.privileged);

    let chars: Vec<char> = line.chars().collect();
    let mut spans: Vec<Span<'static>> = Vec::new();
    let mut plain = String::new();
    let flush = |plain: &mut String, spans: &mut Vec<Span<'static>>| {
        if !plain.is_empty() {
            spans.push(Span::styled(std::mem::take(plain), base));
        }
    };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '#' && !(lang == Lang::Shell && i > 0 && chars[i - 1] == '$') {
            flush(&mut plain, &mut spans);
            spans.push(Span::styled(chars[i..].iter().collect::<String>(), comment));
            break;
        }
        if c == '"' || c == '\'' {
            flush(&mut plain, &mut spans);
            let start = i;
            i += 1;
            while i < chars.len() && chars[i] != c {
                if chars[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            let end = (i + 1).min(chars.len());
            spans.push(Span::styled(
                chars[start..end].iter().collect::<String>(),
                string,
            ));
            i = end;
            continue;
        }
        if (lang == Lang::Python && c == '@' && spans.is_empty() && plain.trim().is_empty())
            || (lang == Lang::Shell && c == '$')
        {
            flush(&mut plain, &mut spans);
            let start = i;
            i += 1;
            while i < chars.len()
                && (chars[i].is_alphanumeric() || matches!(chars[i], '_' | '.' | '{' | '}'))
            {
                i += 1;
            }
            spans.push(Span::styled(
                chars[start..i].iter().collect::<String>(),
                special,
            ));
            continue;
        }
        if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            if lang.keywords().contains(&word.as_str()) {
                flush(&mut plain, &mut spans);
                spans.push(Span::styled(word, keyword));
            } else {
                plain.push_str(&word);
            }
            continue;
        }
        if c.is_ascii_digit() {
            flush(&mut plain, &mut spans);
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
            spans.push(Span::styled(
                chars[start..i].iter().collect::<String>(),
                number,
            ));
            continue;
        }
        plain.push(c);
        i += 1;
    }
    flush(&mut plain, &mut spans);
    spans
}

/// Highlight lines `[from, from + count)` of `text` with line numbers.
pub fn highlight_window(
    text: &str,
    lang: Lang,
    theme: &Theme,
    from: usize,
    count: usize,
) -> Vec<Line<'static>> {
    let total = text.lines().count().max(1);
    let width = total.to_string().len();
    text.lines()
        .enumerate()
        .skip(from)
        .take(count)
        .map(|(n, l)| {
            let mut spans = vec![Span::styled(
                format!("{:>width$} ", n + 1),
                Style::new().fg(theme.muted),
            )];
            spans.extend(highlight_line(&l.replace('\t', "    "), lang, theme));
            Line::from(spans)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text_of(spans: &[Span<'_>]) -> String {
        spans.iter().map(|s| s.content.as_ref()).collect()
    }

    #[test]
    fn keeps_text_and_marks_tokens() {
        let t = Theme::default();
        let line = "def test_x(): assert open('a#b').read() == \"1\"  # note";
        let spans = highlight_line(line, Lang::Python, &t);
        assert_eq!(text_of(&spans), line);
        let kw = spans.iter().find(|s| s.content == "def").unwrap();
        assert_eq!(kw.style.fg, Some(t.accent));
        let s = spans.iter().find(|s| s.content == "'a#b'").unwrap();
        assert_eq!(s.style.fg, Some(t.success));
        assert!(spans.last().unwrap().content.starts_with("# note"));

        let sh = "echo \"$HOME\" > $OUT/x # done";
        let spans = highlight_line(sh, Lang::Shell, &t);
        assert_eq!(text_of(&spans), sh);
        assert!(spans.iter().any(|s| s.content == "$OUT"));
    }
}
