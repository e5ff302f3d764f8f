//! The checks themselves, each over one Markdown file and returning its
//! problems as `file:line: what` lines (empty when the file is fine).

use std::path::{Component, Path, PathBuf};

use clap::{CommandFactory, Parser};
use endless::cli::Cli;

use super::markdown::{self, Doc};

/// Marks a code-block line whose `endless` command is not parsed (it holds
/// placeholders). Keep it rare: prefer commands that run as written.
pub const UNCHECKED: &str = "# (placeholders)";

/// Directories of the repository whose paths the documentation names and
/// that must exist.
const CHECKED_DIRS: &[&str] = &[
    "scripts/",
    "python/",
    "src/",
    "assets/",
    "themes/",
    "benches/",
    "examples/",
];

/// Every relative link resolves: the file (or directory) exists, and an
/// `#anchor` is a heading of the Markdown file it points into.
pub fn links(root: &Path, file: &Path, doc: &Doc) -> Vec<String> {
    let mut problems = Vec::new();
    let name = rel(root, file);
    for (n, line) in &doc.prose {
        let (text, _) = markdown::split_inline_code(line);
        for target in markdown::links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            let dest = if path.is_empty() {
                file.to_path_buf()
            } else {
                normalize(&file.parent().unwrap_or(root).join(path))
            };
            if !dest.exists() {
                problems.push(format!(
                    "{name}:{n}: link to `{target}`: {} does not exist",
                    rel(root, &dest)
                ));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            if dest.extension().is_none_or(|e| e != "md") {
                continue;
            }
            let text = std::fs::read_to_string(&dest).unwrap_or_default();
            if !markdown::anchors(&text).iter().any(|a| a == anchor) {
                problems.push(format!(
                    "{name}:{n}: link to `{target}`: {} has no heading with anchor #{anchor}",
                    rel(root, &dest)
                ));
            }
        }
    }
    problems
}

/// Every `endless ...` command in a code block parses with the real clap
/// definitions, and every `endless ...` quoted inline names real
/// subcommands, bench targets and options.
pub fn commands(root: &Path, file: &Path, doc: &Doc) -> Vec<String> {
    let name = rel(root, file);
    let mut problems = Vec::new();
    for block in &doc.blocks {
        let mut joined = String::new();
        let mut start = block.first_line;
        for (n, line) in (block.first_line..).zip(&block.lines) {
            if joined.is_empty() {
                start = n;
            }
            if let Some(head) = line.strip_suffix('\\') {
                joined.push_str(head);
                joined.push(' ');
                continue;
            }
            joined.push_str(line);
            let full = std::mem::take(&mut joined);
            if full.contains(UNCHECKED) {
                continue;
            }
            for problem in shell_line(&full) {
                problems.push(format!("{name}:{start}: {problem}"));
            }
        }
    }
    for (n, line) in &doc.prose {
        for span in markdown::split_inline_code(line).1 {
            // `endless a && endless b` (a shell block's setup) is two commands.
            for command in span.split(" && ").map(str::trim) {
                if command == "endless" || command.starts_with("endless ") {
                    for problem in inline_command(command) {
                        problems.push(format!("{name}:{n}: `{command}`: {problem}"));
                    }
                }
            }
        }
    }
    problems
}

/// The problems of one shell line of a code block: each `endless` command
/// in it (after `$ `, `VAR=value` prefixes, `&&`, `;`, `|`, `&`) must parse.
pub fn shell_line(line: &str) -> Vec<String> {
    let line = line.trim_start();
    let line = line.strip_prefix("$ ").unwrap_or(line);
    let words = match shell_words::split(line) {
        Ok(words) => words,
        // Not shell (a table row, a config file): only an `endless` line matters.
        Err(e) if line.starts_with("endless ") => {
            return vec![format!("cannot split `{line}`: {e}")]
        }
        Err(_) => return Vec::new(),
    };
    let mut problems = Vec::new();
    let mut segment: Vec<String> = Vec::new();
    let mut segments = Vec::new();
    for word in words {
        if matches!(word.as_str(), "&&" | "||" | "|" | ";" | "&") {
            segments.push(std::mem::take(&mut segment));
            continue;
        }
        let ends = word.len() > 1 && (word.ends_with(';') || word.ends_with('&'));
        segment.push(if ends {
            word[..word.len() - 1].to_string()
        } else {
            word
        });
        if ends {
            segments.push(std::mem::take(&mut segment));
        }
    }
    segments.push(segment);
    for segment in segments {
        let args: Vec<&String> = segment
            .iter()
            .skip_while(|w| {
                w.contains('=') && !w.starts_with('-') && w.split('=').next().is_some_and(is_var)
            })
            .collect();
        let Some(program) = args.first() else {
            continue;
        };
        if Path::new(program.as_str())
            .file_name()
            .is_none_or(|f| f != "endless")
        {
            continue;
        }
        if let Err(e) = Cli::try_parse_from(args.iter().map(|a| a.as_str())) {
            use clap::error::ErrorKind::*;
            if !matches!(e.kind(), DisplayHelp | DisplayVersion) {
                let first = e.to_string();
                let first = first
                    .lines()
                    .next()
                    .unwrap_or("")
                    .trim_start_matches("error: ");
                let quoted: Vec<&str> = args.iter().map(|a| a.as_str()).collect();
                problems.push(format!("`{}` does not parse: {first}", quoted.join(" ")));
            }
        }
    }
    problems
}

/// A shell variable name (`ENDLESS_WORKSPACE` in `ENDLESS_WORKSPACE=x endless`).
fn is_var(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The problems of an inline `endless ...` synopsis, which may hold
/// placeholders (`ID`, `[--json]`, `a\|b`): its leading words must be
/// subcommands (or values of a command's first argument, like `bench
/// sandbox`), and every `--option` must be one of the command it names.
pub fn inline_command(span: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let mut cmd = Cli::command();
    cmd.build();
    let mut path = vec!["endless".to_string()];
    let mut cmd = &cmd;
    let mut words = span.split_whitespace().skip(1).peekable();
    while let Some(word) = words.peek() {
        let bare = word.chars().all(|c| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '|' || c == '\\'
        }) && !word.starts_with('-');
        if !bare {
            break;
        }
        let alternatives: Vec<&str> = word
            .split('|')
            .map(|w| w.trim_end_matches('\\'))
            .filter(|w| !w.is_empty())
            .collect();
        if cmd.has_subcommands() {
            let subs: Vec<&clap::Command> = alternatives
                .iter()
                .filter_map(|a| cmd.find_subcommand(a))
                .collect();
            if subs.len() != alternatives.len() {
                problems.push(format!("`{}` has no subcommand `{word}`", path.join(" ")));
                return problems;
            }
            if subs.len() > 1 {
                break;
            }
            path.push(alternatives[0].to_string());
            cmd = subs[0];
            words.next();
            continue;
        }
        if let Some(first) = cmd.get_positionals().next() {
            let values: Vec<String> = first
                .get_possible_values()
                .iter()
                .map(|v| v.get_name().to_string())
                .collect();
            if !values.is_empty() {
                for a in &alternatives {
                    if !values.iter().any(|v| v == a) {
                        problems.push(format!(
                            "`{}` does not take `{a}` (one of {})",
                            path.join(" "),
                            values.join(", ")
                        ));
                    }
                }
            }
        }
        break;
    }
    for option in long_options(span) {
        let known = cmd
            .get_arguments()
            .any(|a| a.get_long() == Some(option.as_str()))
            || matches!(option.as_str(), "help" | "version");
        if !known {
            problems.push(format!("`{}` has no option `--{option}`", path.join(" ")));
        }
    }
    problems
}

/// The `--name`s in a synopsis.
fn long_options(span: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = span;
    while let Some(pos) = rest.find("--") {
        let before = rest[..pos].chars().last();
        let after = &rest[pos + 2..];
        let name: String = after
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        if before.is_none_or(|c| !c.is_ascii_alphanumeric() && c != '-') && !name.is_empty() {
            out.push(name.clone());
        }
        rest = &after[name.len()..];
    }
    out
}

/// Every repository path the text names under [`CHECKED_DIRS`]
/// (`scripts/replicate.sh`, `python/examples/ray_rollouts.py`) exists; a
/// path with a placeholder or glob is checked up to it. A path may be
/// relative to the repository or to the file's own directory.
pub fn paths(root: &Path, file: &Path, text: &str) -> Vec<String> {
    let name = rel(root, file);
    let mut problems = Vec::new();
    for (i, line) in text.lines().enumerate() {
        for dir in CHECKED_DIRS {
            let mut from = 0;
            while let Some(pos) = line[from..].find(dir) {
                let at = from + pos;
                from = at + dir.len();
                // `./scripts/x` counts; `foo/src/x`, `$HOME/python/x` do not.
                let head = line[..at].strip_suffix("./").unwrap_or(&line[..at]);
                let before = head.chars().last();
                if before.is_some_and(|c| {
                    c.is_alphanumeric() || matches!(c, '_' | '.' | '-' | '/' | '$' | '~' | '<')
                }) {
                    continue;
                }
                let path: String = line[at..]
                    .chars()
                    .take_while(|c| !c.is_whitespace() && !"`)]\"',;:<>*{|#\\".contains(*c))
                    .collect();
                let path = path.trim_end_matches('.');
                // A path with a placeholder counts up to its last whole directory.
                let path = if line[at + path.len()..].starts_with(['<', '*', '{']) {
                    &path[..path.rfind('/').map_or(0, |p| p + 1)]
                } else {
                    path
                };
                let here = file.parent().unwrap_or(root);
                if !root.join(path).exists() && !here.join(path).exists() {
                    problems.push(format!("{name}:{}: `{path}` does not exist", i + 1));
                }
            }
        }
    }
    problems
}

/// The path of `file` relative to `root`, for messages.
pub fn rel(root: &Path, file: &Path) -> String {
    file.strip_prefix(root)
        .unwrap_or(file)
        .display()
        .to_string()
}

/// `a/b/../c` as `a/c`, without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}
