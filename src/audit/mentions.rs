//! What a text names: paths and values in an instruction, string literals
//! (with their line) in Python tests. Static and approximate: used to
//! build shortcut policies and to find what the tests require that the
//! instruction never says.

/// Characters a path token is made of.
fn is_path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "/._~+@%$-".contains(c)
}

/// File extensions a bare name must end with to count as a file name.
const EXTENSIONS: [&str; 32] = [
    "txt", "csv", "tsv", "json", "jsonl", "log", "md", "py", "sh", "conf", "cfg", "ini", "yaml",
    "yml", "toml", "xml", "html", "out", "dat", "sql", "db", "tar", "gz", "zip", "bak", "env",
    "pem", "key", "list", "c", "js", "rs",
];

/// Whether `name` (no `/`) looks like a file name: `stem.ext` with a known
/// extension.
pub fn is_file_name(name: &str) -> bool {
    match name.rsplit_once('.') {
        Some((stem, ext)) => {
            !stem.is_empty()
                && !name.contains('/')
                && stem.chars().all(is_path_char)
                && EXTENSIONS.contains(&ext.to_ascii_lowercase().as_str())
        }
        None => false,
    }
}

/// Whether `token` looks like a path: absolute, `~/`, `./`, a relative
/// path with a `/` (not a URL, not `and/or`), or a file name.
pub fn is_path_like(token: &str) -> bool {
    if token.is_empty() || token.contains("://") || !token.chars().all(is_path_char) {
        return false;
    }
    if token.starts_with('/') || token.starts_with("~/") || token.starts_with("./") {
        return token.len() > 2;
    }
    if let Some((head, tail)) = token.split_once('/') {
        let word = |s: &str| s.chars().all(|c| c.is_ascii_alphabetic());
        // `and/or`, `read/write`: words, not paths.
        if word(head) && word(tail.trim_end_matches('/')) && !is_file_name(tail) {
            return false;
        }
        return !head.is_empty() && !tail.is_empty();
    }
    is_file_name(token)
}

/// The path tokens of `text` as written (trailing punctuation dropped).
pub fn path_tokens(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    // URLs are not paths: drop them whole first.
    let text: Vec<&str> = text
        .split_whitespace()
        .filter(|w| !w.contains("://"))
        .collect();
    let text = text.join(" ");
    for raw in text.split(|c: char| !is_path_char(c)) {
        let t = raw.trim_end_matches(['.', ',', ';', ':', '!', '?']);
        let t = t.trim_start_matches('$');
        let t = t
            .strip_prefix("HOME/")
            .map_or(t.to_string(), |r| format!("~/{r}"));
        if is_path_like(&t) && !out.contains(&t) {
            out.push(t);
        }
    }
    out
}

/// `token` as an absolute path in a sandbox whose user's home is `home`
/// and working directory `workdir`.
pub fn absolute(token: &str, home: &str, workdir: &str) -> String {
    let joined = if let Some(rest) = token.strip_prefix("~/") {
        format!("{home}/{rest}")
    } else if let Some(rest) = token.strip_prefix("./") {
        format!("{workdir}/{rest}")
    } else if token.starts_with('/') {
        token.to_string()
    } else {
        format!("{workdir}/{token}")
    };
    joined.trim_end_matches('/').to_string()
}

/// The absolute paths `text` names.
pub fn paths_in(text: &str, home: &str, workdir: &str) -> Vec<String> {
    let mut out = Vec::new();
    for t in path_tokens(text) {
        let p = absolute(&t, home, workdir);
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

/// The values an instruction shows: fenced code blocks, `inline code` and
/// "quoted strings" that are not paths.
pub fn values_in(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut push = |v: &str| {
        let v = v.trim_matches('\n');
        if !v.trim().is_empty() && !is_path_like(v.trim()) && !out.iter().any(|o| o == v) {
            out.push(v.to_string());
        }
    };
    let mut rest = text;
    let mut outside = String::new();
    while let Some(start) = rest.find("```") {
        outside.push_str(&rest[..start]);
        let after = &rest[start + 3..];
        let body_start = after.find('\n').map_or(after.len(), |i| i + 1);
        match after[body_start..].find("```") {
            Some(end) => {
                push(&after[body_start..body_start + end]);
                rest = &after[body_start + end + 3..];
            }
            None => {
                rest = after;
                break;
            }
        }
    }
    outside.push_str(rest);
    for delim in ['`', '"'] {
        let parts: Vec<&str> = outside.split(delim).collect();
        for (i, p) in parts.iter().enumerate() {
            if i % 2 == 1 && i + 1 < parts.len() && p.len() <= 200 && !p.contains('\n') {
                push(p);
            }
        }
    }
    out
}

/// A string literal of a Python source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Literal {
    /// 1-based line it starts on.
    pub line: usize,
    /// Its value (simple escapes resolved; f-string fields kept as `{...}`).
    pub value: String,
    /// It is an f-string.
    pub formatted: bool,
    /// It is triple-quoted (a docstring, a long message or text block).
    pub triple: bool,
}

/// The string literals of Python `source`, comments skipped.
pub fn python_strings(source: &str) -> Vec<Literal> {
    let chars: Vec<char> = source.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
            continue;
        }
        if c == '#' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
            continue;
        }
        if c != '\'' && c != '"' {
            i += 1;
            continue;
        }
        // Prefix letters just before the quote (r, b, f, rb, fr...).
        let mut j = i;
        while j > 0 && chars[j - 1].is_ascii_alphabetic() {
            j -= 1;
        }
        let prefix: String = chars[j..i].iter().collect::<String>().to_ascii_lowercase();
        let prefix_ok = prefix.len() <= 2 && prefix.chars().all(|p| "rbfu".contains(p));
        let (raw, formatted) = if prefix_ok {
            (prefix.contains('r'), prefix.contains('f'))
        } else {
            (false, false)
        };
        let triple = i + 2 < chars.len() && chars[i + 1] == c && chars[i + 2] == c;
        let start_line = line;
        let mut value = String::new();
        i += if triple { 3 } else { 1 };
        while i < chars.len() {
            let d = chars[i];
            if triple {
                if d == c && i + 2 < chars.len() && chars[i + 1] == c && chars[i + 2] == c {
                    i += 3;
                    break;
                }
            } else if d == c || d == '\n' {
                i += 1;
                break;
            }
            if d == '\n' {
                line += 1;
            }
            if d == '\\' && i + 1 < chars.len() {
                let e = chars[i + 1];
                if raw {
                    value.push('\\');
                    value.push(e);
                } else {
                    match e {
                        'n' => value.push('\n'),
                        't' => value.push('\t'),
                        '\n' => line += 1,
                        other => value.push(other),
                    }
                }
                i += 2;
                continue;
            }
            value.push(d);
            i += 1;
        }
        out.push(Literal {
            line: start_line,
            value,
            formatted,
            triple,
        });
    }
    out
}

/// `line` with the contents of its string literals blanked out (the
/// quotes kept): the code around them.
pub fn code_of(line: &str) -> String {
    let mut out = String::new();
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in line.chars() {
        match quote {
            Some(q) => {
                if escaped {
                    escaped = false;
                    out.push(' ');
                } else if c == '\\' {
                    escaped = true;
                    out.push(' ');
                } else if c == q {
                    quote = None;
                    out.push(c);
                } else {
                    out.push(' ');
                }
            }
            None => {
                if c == '#' {
                    break;
                }
                if c == '\'' || c == '"' {
                    quote = Some(c);
                }
                out.push(c);
            }
        }
    }
    out
}

/// The literal pieces of an f-string value (the text between its `{...}`
/// fields).
pub fn literal_pieces(value: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut depth = 0usize;
    for c in value.chars() {
        match c {
            '{' => {
                depth += 1;
                if depth == 1 && !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            '}' if depth > 0 => depth -= 1,
            _ if depth == 0 => cur.push(c),
            _ => {}
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instructions_name_paths_and_values() {
        let text = "Count ERROR lines in ~/logs/service.log and write the number to \
                    /home/user/error_count.txt, or to out/report.csv. Read and/or write. \
                    See https://example.com/x. Use the format `total: N` or \"done\".\n\
                    ```\nline one\nline two\n```\n";
        assert_eq!(
            path_tokens(text),
            vec![
                "~/logs/service.log",
                "/home/user/error_count.txt",
                "out/report.csv"
            ]
        );
        assert_eq!(
            paths_in(text, "/home/user", "/home/user/w"),
            vec![
                "/home/user/logs/service.log",
                "/home/user/error_count.txt",
                "/home/user/w/out/report.csv"
            ]
        );
        assert_eq!(
            values_in(text),
            vec!["line one\nline two", "total: N", "done"]
        );
        assert!(is_file_name("report.txt") && !is_file_name("e.g") && !is_file_name("v1.2"));
    }

    #[test]
    fn python_literals_with_lines() {
        let src = "import os\n# 'not this'\nP = '/home/user/a.txt'\n\
                   def test():\n    assert f\"{P}/b.log\" == r'x\\n'  # \"no\"\n    s = \"\"\"multi\nline\"\"\"\n    t = 'it\\'s'\n";
        let lits = python_strings(src);
        let got: Vec<(usize, &str, bool)> = lits
            .iter()
            .map(|l| (l.line, l.value.as_str(), l.formatted))
            .collect();
        assert_eq!(
            got,
            vec![
                (3, "/home/user/a.txt", false),
                (5, "{P}/b.log", true),
                (5, "x\\n", false),
                (6, "multi\nline", false),
                (8, "it's", false),
            ]
        );
        assert_eq!(literal_pieces("{P}/b.log"), vec!["/b.log"]);
        assert!(lits[3].triple && !lits[0].triple);
        assert_eq!(code_of("x == 'a in b' # c"), "x == '      ' ");
        assert_eq!(literal_pieces("a{x:{w}}b"), vec!["a", "b"]);
    }
}
