//! Just enough Markdown for the documentation checks: fenced code blocks,
//! the prose around them with inline code spans apart, links, headings and
//! their GitHub anchors.

/// A fenced code block.
#[derive(Debug)]
pub struct CodeBlock {
    /// The info string after the opening fence (`sh`, `text`, empty).
    pub lang: String,
    /// Line number (1-based) of the first line inside the fence.
    pub first_line: usize,
    /// The lines inside the fence.
    pub lines: Vec<String>,
    /// The comment line right above the fence, if it is one
    /// (`<!-- snapshot: NAME -->`).
    pub marker: Option<String>,
}

/// A Markdown file taken apart.
#[derive(Debug, Default)]
pub struct Doc {
    /// Fenced code blocks, in order.
    pub blocks: Vec<CodeBlock>,
    /// Lines outside code blocks, with their numbers.
    pub prose: Vec<(usize, String)>,
}

/// Splits `text` into code blocks and prose lines.
pub fn parse(text: &str) -> Doc {
    let mut doc = Doc::default();
    let mut open: Option<(String, CodeBlock)> = None;
    let mut previous: Option<&str> = None;
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let trimmed = line.trim_start();
        if let Some((fence, block)) = open.as_mut() {
            if trimmed.starts_with(fence.as_str()) && trimmed.trim_end() == fence.as_str() {
                let (_, done) = open.take().unwrap();
                doc.blocks.push(done);
            } else {
                block.lines.push(line.to_string());
            }
            continue;
        }
        let fence: String = trimmed
            .chars()
            .take_while(|c| *c == '`' || *c == '~')
            .collect();
        if fence.len() >= 3 && fence.chars().all(|c| c == fence.chars().next().unwrap()) {
            let marker = previous
                .map(str::trim)
                .filter(|p| p.starts_with("<!--") && p.ends_with("-->"))
                .map(|p| {
                    p.trim_start_matches("<!--")
                        .trim_end_matches("-->")
                        .trim()
                        .to_string()
                });
            open = Some((
                fence.clone(),
                CodeBlock {
                    lang: trimmed[fence.len()..].trim().to_string(),
                    first_line: n + 1,
                    lines: Vec::new(),
                    marker,
                },
            ));
        } else {
            doc.prose.push((n, line.to_string()));
        }
        previous = Some(line);
    }
    if let Some((_, block)) = open {
        doc.blocks.push(block);
    }
    doc
}

/// A prose line split into its inline code spans and the text around them.
pub fn split_inline_code(line: &str) -> (String, Vec<String>) {
    let mut text = String::new();
    let mut spans = Vec::new();
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        let ticks = rest[start..].chars().take_while(|c| *c == '`').count();
        let fence = &rest[start..start + ticks];
        let after = &rest[start + ticks..];
        match after.find(fence) {
            Some(end) => {
                text.push_str(&rest[..start]);
                text.push(' ');
                spans.push(after[..end].trim().to_string());
                rest = &after[end + ticks..];
            }
            None => break,
        }
    }
    text.push_str(rest);
    (text, spans)
}

/// The targets of the links and images in `text` (prose, inline code
/// removed): `[label](target)`, `![alt](target "title")`, and reference
/// definitions `[label]: target`.
pub fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let trimmed = text.trim_start();
    if trimmed.starts_with('[') {
        if let Some(close) = trimmed.find("]:") {
            let target = trimmed[close + 2..].split_whitespace().next().unwrap_or("");
            if !target.is_empty() {
                out.push(target.to_string());
            }
        }
    }
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(pos) = text[i..].find("](") {
        let open = i + pos + 2;
        let mut depth = 1;
        let mut j = open;
        while j < bytes.len() {
            match bytes[j] {
                b'(' => depth += 1,
                b')' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            j += 1;
        }
        let inside = text[open..j.min(text.len())].trim();
        let target = inside.split_whitespace().next().unwrap_or("");
        let target = target.trim_start_matches('<').trim_end_matches('>');
        if !target.is_empty() {
            out.push(target.to_string());
        }
        i = j.min(text.len());
    }
    out
}

/// The anchors GitHub gives the headings of a Markdown file, in order
/// (`## The partial reward` is `#the-partial-reward`; a repeated heading
/// gets `-1`, `-2`, ...).
pub fn anchors(text: &str) -> Vec<String> {
    let doc = parse(text);
    let mut seen: Vec<String> = Vec::new();
    for (_, line) in &doc.prose {
        let t = line.trim_start();
        let hashes = t.chars().take_while(|c| *c == '#').count();
        if !(1..=6).contains(&hashes) || !t[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(t[hashes..].trim());
        let mut anchor = base.clone();
        let mut k = 0;
        while seen.contains(&anchor) {
            k += 1;
            anchor = format!("{base}-{k}");
        }
        seen.push(anchor);
    }
    seen
}

/// GitHub's slug of a heading's text: inline markup dropped (backticks,
/// emphasis, link targets), lower case, only letters, digits, `-`, `_` and
/// spaces kept, spaces as `-`.
pub fn slug(heading: &str) -> String {
    // A link's text stays, its target goes.
    let mut text = String::new();
    let mut rest = heading;
    while let Some(pos) = rest.find("](") {
        text.push_str(&rest[..pos]);
        match rest[pos..].find(')') {
            Some(end) => rest = &rest[pos + end + 1..],
            None => {
                rest = "";
            }
        }
    }
    text.push_str(rest);
    text.to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_follow_github() {
        assert_eq!(
            slug("Serving environments to RL trainers (`endless serve`)"),
            "serving-environments-to-rl-trainers-endless-serve"
        );
        assert_eq!(slug("`endless tasks list`"), "endless-tasks-list");
        assert_eq!(slug("The TUI, view by view"), "the-tui-view-by-view");
        assert_eq!(slug("See [the guide](x.md) now"), "see-the-guide-now");
        assert_eq!(
            anchors("# A\n## A\n```\n# not a heading\n```\n## A\n"),
            ["a", "a-1", "a-2"]
        );
    }

    #[test]
    fn links_and_inline_code_are_found() {
        assert_eq!(
            links("see [a](docs/a.md#x) and ![i](img.png \"t\")"),
            ["docs/a.md#x", "img.png"]
        );
        assert_eq!(links("[ref]: other.md"), ["other.md"]);
        let (text, spans) = split_inline_code("run `endless tasks list` then `[x](y)`");
        assert_eq!(spans, ["endless tasks list", "[x](y)"]);
        assert!(links(&text).is_empty());
    }

    #[test]
    fn code_blocks_keep_their_marker_and_language() {
        let doc = parse("text\n<!-- snapshot: a_80x24 -->\n```text\nrow\n```\nafter\n");
        assert_eq!(doc.blocks.len(), 1);
        assert_eq!(doc.blocks[0].marker.as_deref(), Some("snapshot: a_80x24"));
        assert_eq!(doc.blocks[0].lang, "text");
        assert_eq!(doc.blocks[0].lines, ["row"]);
        assert_eq!(doc.blocks[0].first_line, 4);
        assert_eq!(doc.prose.len(), 3);
    }
}
