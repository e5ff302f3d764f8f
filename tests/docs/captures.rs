//! TUI captures in the documentation are the TUI's own snapshot tests: a
//! ```` ```text ```` block right below `<!-- snapshot: NAME -->` must be the
//! screen of `src/tui/tests/snapshots/*__NAME.snap`, so that the pictures
//! change when the screens do (`UPDATE_DOCS=1` copies them in).

use std::path::{Path, PathBuf};

use super::checks::rel;
use super::markdown::Doc;

/// The marker's prefix.
const MARKER: &str = "snapshot:";

/// The screen of an insta snapshot as plain text: its quoted rows, trailing
/// spaces removed (what `scripts/snapshot_text.py` prints).
pub fn screen(snap: &str) -> Result<String, String> {
    let mut parts = snap.splitn(3, "---\n");
    let body = match (parts.next(), parts.next(), parts.next()) {
        (Some(_), Some(_), Some(body)) => body,
        _ => return Err("not an insta snapshot (no header)".into()),
    };
    let mut rows = Vec::new();
    for (n, line) in body.lines().enumerate() {
        let row = line
            .split_once("\" Hidden by multi-width symbols: [")
            .map(|(row, _)| format!("{row}\""))
            .unwrap_or_else(|| line.to_string());
        let inner = row
            .strip_prefix('"')
            .and_then(|r| r.strip_suffix('"'))
            .ok_or_else(|| format!("line {} of the screen is not a quoted row", n + 1))?;
        rows.push(inner.trim_end().to_string());
    }
    Ok(rows.join("\n"))
}

/// The snapshot file named `name` in `snapshots`.
fn snapshot_file(snapshots: &Path, name: &str) -> Option<PathBuf> {
    let suffix = format!("__{name}.snap");
    let mut found: Vec<PathBuf> = std::fs::read_dir(snapshots)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .is_some_and(|f| f.to_string_lossy().ends_with(&suffix))
        })
        .collect();
    (found.len() == 1).then(|| found.remove(0))
}

/// Whether a text block looks like a screen of the TUI (its tab bar first).
fn is_screen(lines: &[String]) -> bool {
    lines
        .first()
        .is_some_and(|l| l.contains("Tasks") && l.contains("Live") && l.contains("Training"))
}

/// The problems of `doc`'s captures, and with `update` the file's text with
/// every marked capture replaced by its snapshot's screen.
pub fn check(
    root: &Path,
    file: &Path,
    text: &str,
    doc: &Doc,
    update: bool,
) -> (Vec<String>, Option<String>) {
    let name = rel(root, file);
    let snapshots = root.join("src/tui/tests/snapshots");
    let mut problems = Vec::new();
    // (first line index, line count, new lines) of each capture to rewrite.
    let mut edits: Vec<(usize, usize, Vec<String>)> = Vec::new();
    for block in &doc.blocks {
        let at = block.first_line;
        let marked = block
            .marker
            .as_deref()
            .and_then(|m| m.strip_prefix(MARKER))
            .map(str::trim);
        let Some(snap) = marked else {
            if block.lang == "text" && is_screen(&block.lines) {
                problems.push(format!(
                    "{name}:{at}: a TUI capture without `<!-- {MARKER} NAME -->` above it (name the snapshot it shows)"
                ));
            }
            continue;
        };
        let Some(path) = snapshot_file(&snapshots, snap) else {
            problems.push(format!(
                "{name}:{at}: no snapshot src/tui/tests/snapshots/*__{snap}.snap"
            ));
            continue;
        };
        let screen = match std::fs::read_to_string(&path)
            .map_err(|e| e.to_string())
            .and_then(|s| screen(&s))
        {
            Ok(s) => s,
            Err(e) => {
                problems.push(format!("{name}:{at}: {}: {e}", rel(root, &path)));
                continue;
            }
        };
        let shown: Vec<String> = block
            .lines
            .iter()
            .map(|l| l.trim_end().to_string())
            .collect();
        if shown.join("\n") == screen {
            continue;
        }
        if update {
            let new = screen.lines().map(str::to_string).collect();
            edits.push((at - 1, block.lines.len(), new));
        } else {
            problems.push(format!(
                "{name}:{at}: the capture differs from snapshot `{snap}` ({}): the screen changed; \
                 `UPDATE_DOCS=1 cargo test --test docs` copies it in (then check the text around it)",
                rel(root, &path)
            ));
        }
    }
    if edits.is_empty() {
        return (problems, None);
    }
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    // Last first, so that the earlier blocks' line numbers still hold.
    for (start, len, new) in edits.into_iter().rev() {
        lines.splice(start..start + len, new);
    }
    let mut out = lines.join("\n");
    out.push('\n');
    (problems, Some(out))
}
