//! Markdown tables render: every run of `|` rows begins with a header row
//! and a `|---|` delimiter row, and every row has the header's number of
//! cells. A blank line inside a table ends it, and the rows after it then
//! render as plain text; this catches that.

use std::path::Path;

use super::checks::rel;
use super::markdown::Doc;

/// The cells of a table row: split on `|` that are not escaped (`\|`),
/// the outer pipes dropped. GitHub splits on a `|` inside a code span too,
/// so it must be escaped there as well.
pub fn cells(row: &str) -> Vec<String> {
    let row = row.trim();
    let row = row.strip_prefix('|').unwrap_or(row);
    let row = if row.ends_with('|') && !row.ends_with("\\|") {
        &row[..row.len() - 1]
    } else {
        row
    };
    let mut out = vec![String::new()];
    let mut escaped = false;
    for c in row.chars() {
        if c == '|' && !escaped {
            out.push(String::new());
        } else {
            out.last_mut().unwrap().push(c);
        }
        escaped = c == '\\' && !escaped;
    }
    out.into_iter().map(|c| c.trim().to_string()).collect()
}

/// Whether `row` is a delimiter row (`|---|:--:|`).
fn is_delimiter(row: &str) -> bool {
    let cells = cells(row);
    !cells.is_empty()
        && cells.iter().all(|c| {
            let c = c.trim_start_matches(':').trim_end_matches(':');
            !c.is_empty() && c.chars().all(|ch| ch == '-')
        })
}

/// The problems of `doc`'s tables, as `file:line: what`.
pub fn tables(root: &Path, file: &Path, doc: &Doc) -> Vec<String> {
    let name = rel(root, file);
    let mut problems = Vec::new();
    // Runs of consecutive prose lines that start with `|`.
    let mut runs: Vec<Vec<(usize, &str)>> = Vec::new();
    let mut last = 0;
    for (n, line) in &doc.prose {
        if !line.trim_start().starts_with('|') {
            continue;
        }
        match runs.last_mut() {
            Some(run) if last + 1 == *n => run.push((*n, line)),
            _ => runs.push(vec![(*n, line)]),
        }
        last = *n;
    }
    for run in runs {
        let (first, header) = run[0];
        if run.len() < 2 || !is_delimiter(run[1].1) {
            problems.push(format!(
                "{name}:{first}: table rows without a header and a `|---|` row above them render as \
                 text (a blank line ends a table: remove it, or give these rows a header)"
            ));
            continue;
        }
        let want = cells(header).len();
        for (n, row) in &run[1..] {
            let have = cells(row).len();
            if have != want {
                problems.push(format!(
                    "{name}:{n}: a table row with {have} cells under a header of {want} \
                     (escape a `|` inside a cell as `\\|`)"
                ));
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::markdown::parse;

    #[test]
    fn cells_split_on_unescaped_pipes() {
        assert_eq!(cells("| a | `b\\|c` |"), ["a", "`b\\|c`"]);
        assert_eq!(cells("|---|:-:|"), ["---", ":-:"]);
        assert!(is_delimiter("|---|:-:|"));
        assert!(!is_delimiter("| a | b |"));
    }

    #[test]
    fn a_blank_line_or_a_stray_pipe_breaks_a_table() {
        let root = Path::new("/r");
        let file = root.join("d.md");
        let text = "| a | b |\n|---|---|\n| 1 | 2 |\n\n| 3 | 4 |\n\nx\n\n| c | d |\n|---|---|\n| 1 | 2 | 3 |\n| `x|y` | z |\n";
        let found = tables(root, &file, &parse(text));
        assert_eq!(found.len(), 3, "{found:#?}");
        assert!(found[0].starts_with("d.md:5: table rows without a header"));
        assert!(found[1].starts_with("d.md:11: a table row with 3 cells under a header of 2"));
        assert!(found[2].starts_with("d.md:12: a table row with 3 cells"));
        assert!(tables(root, &file, &parse("| a |\n|---|\n| `x\\|y` |\n")).is_empty());
    }
}
