//! Colour themes: `themes/*.toml` embedded in the binary, plus any
//! `<config dir>/themes/*.toml` (which win over built-ins of the same name).

use std::path::{Path, PathBuf};
use std::str::FromStr;

use ratatui::style::{Color, Modifier, Style};

/// Built-in themes: `(name, file, text)`.
const BUILTIN: &[(&str, &str, &str)] = &[
    (
        "dark",
        "themes/dark.toml",
        include_str!("../../themes/dark.toml"),
    ),
    (
        "light",
        "themes/light.toml",
        include_str!("../../themes/light.toml"),
    ),
];

/// The colour names every theme must define under `[colors]`.
pub const FIELDS: [&str; 9] = [
    "background",
    "foreground",
    "accent",
    "muted",
    "success",
    "failure",
    "warning",
    "selection",
    "privileged",
];

/// Named colours the views draw with.
#[derive(Debug, Clone, PartialEq)]
pub struct Theme {
    /// The theme's name (built-in or the file's stem).
    pub name: String,
    /// Screen background.
    pub background: Color,
    /// Ordinary text.
    pub foreground: Color,
    /// Titles, the focused tab, progress bars.
    pub accent: Color,
    /// Secondary text and hints.
    pub muted: Color,
    /// Passed, accepted.
    pub success: Color,
    /// Failed, rejected, errors.
    pub failure: Color,
    /// Candidates, ratings, warnings.
    pub warning: Color,
    /// The selected row's background.
    pub selection: Color,
    /// Privileged text the agent never sees (a task's truth).
    pub privileged: Color,
}

/// Why a theme could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ThemeError {
    /// A field with a bad value.
    #[error("{file}: {field}: {message}")]
    Invalid {
        /// The theme file.
        file: String,
        /// The field.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// The file is not valid TOML.
    #[error("{file}: {message}")]
    Syntax {
        /// The theme file.
        file: String,
        /// The parser's message.
        message: String,
    },
    /// The file could not be read.
    #[error("{file}: {source}")]
    Io {
        /// The theme file.
        file: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// No built-in or user theme has that name.
    #[error("no theme named {name:?} (available: {available})")]
    Unknown {
        /// The name asked for.
        name: String,
        /// The themes there are, comma-separated.
        available: String,
    },
}

impl Default for Theme {
    fn default() -> Self {
        // The embedded dark theme is checked by a unit test.
        Theme::parse(BUILTIN[0].1, BUILTIN[0].2).unwrap_or_else(|_| Theme {
            name: "fallback".into(),
            background: Color::Reset,
            foreground: Color::Reset,
            accent: Color::Cyan,
            muted: Color::DarkGray,
            success: Color::Green,
            failure: Color::Red,
            warning: Color::Yellow,
            selection: Color::DarkGray,
            privileged: Color::Magenta,
        })
    }
}

impl Theme {
    /// Parse a theme file; errors name `file` and the offending field.
    pub fn parse(file: &str, text: &str) -> Result<Theme, ThemeError> {
        let table: toml::Table = toml::from_str(text).map_err(|e| ThemeError::Syntax {
            file: file.into(),
            message: e.to_string().trim().to_string(),
        })?;
        let invalid = |field: &str, message: String| ThemeError::Invalid {
            file: file.into(),
            field: field.into(),
            message,
        };
        let name = match table.get("name") {
            None => Path::new(file)
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
            Some(toml::Value::String(s)) => s.clone(),
            Some(v) => {
                return Err(invalid(
                    "name",
                    format!("expected a string, found {}", v.type_str()),
                ))
            }
        };
        for key in table.keys() {
            if key != "name" && key != "colors" {
                return Err(invalid(
                    key,
                    "unknown key (expected `name` and `[colors]`)".into(),
                ));
            }
        }
        let colors = match table.get("colors") {
            Some(toml::Value::Table(t)) => t,
            Some(v) => {
                return Err(invalid(
                    "colors",
                    format!("expected a table, found {}", v.type_str()),
                ))
            }
            None => return Err(invalid("colors", "missing table [colors]".into())),
        };
        for key in colors.keys() {
            if !FIELDS.contains(&key.as_str()) {
                return Err(invalid(
                    &format!("colors.{key}"),
                    format!("unknown colour (expected one of {})", FIELDS.join(", ")),
                ));
            }
        }
        // Wrong values first (more telling than a missing field).
        for (key, v) in colors {
            if !v.is_str() {
                return Err(invalid(
                    &format!("colors.{key}"),
                    format!("expected a colour string, found {}", v.type_str()),
                ));
            }
        }
        let mut out = [Color::Reset; 9];
        for (slot, field) in out.iter_mut().zip(FIELDS) {
            let path = format!("colors.{field}");
            let text = match colors.get(field) {
                Some(toml::Value::String(s)) => s,
                Some(v) => {
                    return Err(invalid(
                        &path,
                        format!("expected a colour string, found {}", v.type_str()),
                    ))
                }
                None => return Err(invalid(&path, "missing".into())),
            };
            *slot = Color::from_str(text).map_err(|_| {
                invalid(
                    &path,
                    format!("{text:?} is not a colour (expected \"#rrggbb\", a name like \"red\", or an index 0-255)"),
                )
            })?;
        }
        let [background, foreground, accent, muted, success, failure, warning, selection, privileged] =
            out;
        Ok(Theme {
            name,
            background,
            foreground,
            accent,
            muted,
            success,
            failure,
            warning,
            selection,
            privileged,
        })
    }

    /// `<config dir>/themes`, where user themes live.
    pub fn user_dir() -> Option<PathBuf> {
        directories::ProjectDirs::from("", "", "endless").map(|d| d.config_dir().join("themes"))
    }

    /// Load theme `name`: `<user_dir>/<name>.toml` if present, else a built-in.
    pub fn load(name: &str, user_dir: Option<&Path>) -> Result<Theme, ThemeError> {
        if let Some(dir) = user_dir {
            let path = dir.join(format!("{name}.toml"));
            if path.is_file() {
                let file = path.display().to_string();
                let text = std::fs::read_to_string(&path).map_err(|source| ThemeError::Io {
                    file: file.clone(),
                    source,
                })?;
                return Theme::parse(&file, &text);
            }
        }
        if let Some((_, file, text)) = BUILTIN.iter().find(|(n, _, _)| *n == name) {
            return Theme::parse(file, text);
        }
        Err(ThemeError::Unknown {
            name: name.into(),
            available: Theme::available(user_dir).join(", "),
        })
    }

    /// Names of all themes: built-ins and user files.
    pub fn available(user_dir: Option<&Path>) -> Vec<String> {
        let mut names: Vec<String> = BUILTIN.iter().map(|(n, _, _)| n.to_string()).collect();
        if let Some(entries) = user_dir.and_then(|d| std::fs::read_dir(d).ok()) {
            for e in entries.flatten() {
                let p = e.path();
                if p.extension().is_some_and(|x| x == "toml") {
                    if let Some(stem) = p.file_stem() {
                        names.push(stem.to_string_lossy().into_owned());
                    }
                }
            }
        }
        names.sort();
        names.dedup();
        names
    }

    /// Plain text on the background.
    pub fn base(&self) -> Style {
        Style::new().fg(self.foreground).bg(self.background)
    }

    /// Secondary text.
    pub fn muted(&self) -> Style {
        Style::new().fg(self.muted)
    }

    /// Headings, focused borders, the active tab.
    pub fn accent(&self) -> Style {
        Style::new().fg(self.accent).add_modifier(Modifier::BOLD)
    }

    /// The selected row.
    pub fn selected(&self) -> Style {
        Style::new().bg(self.selection).add_modifier(Modifier::BOLD)
    }

    /// Passing, accepted.
    pub fn success(&self) -> Style {
        Style::new().fg(self.success)
    }

    /// Failing, rejected, errors.
    pub fn failure(&self) -> Style {
        Style::new().fg(self.failure)
    }

    /// Warnings, candidates.
    pub fn warning(&self) -> Style {
        Style::new().fg(self.warning)
    }

    /// Privileged content (the truth): never shown to the agent.
    pub fn privileged(&self) -> Style {
        Style::new()
            .fg(self.privileged)
            .add_modifier(Modifier::BOLD)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_parse() {
        for (name, file, text) in BUILTIN {
            let t = Theme::parse(file, text).unwrap();
            assert_eq!(&t.name, name);
        }
        assert_eq!(Theme::default().name, "dark");
    }

    /// WCAG 2 relative luminance of an sRGB colour.
    fn luminance(c: Color) -> f64 {
        let Color::Rgb(r, g, b) = c else {
            panic!("built-in themes use #rrggbb colours, not {c:?}");
        };
        let lin = |v: u8| {
            let v = f64::from(v) / 255.0;
            if v <= 0.04045 {
                v / 12.92
            } else {
                ((v + 0.055) / 1.055).powf(2.4)
            }
        };
        0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b)
    }

    /// WCAG 2 contrast ratio of two colours (1 to 21).
    fn contrast(a: Color, b: Color) -> f64 {
        let (x, y) = (luminance(a), luminance(b));
        (x.max(y) + 0.05) / (x.min(y) + 0.05)
    }

    #[test]
    fn contrast_ratio_matches_known_values() {
        let black = Color::Rgb(0, 0, 0);
        let white = Color::Rgb(255, 255, 255);
        assert!((contrast(black, white) - 21.0).abs() < 1e-9);
        assert!((contrast(white, white) - 1.0).abs() < 1e-9);
        // #777777 on white is the classic just-below-AA grey (4.48:1).
        assert!((contrast(Color::Rgb(0x77, 0x77, 0x77), white) - 4.48).abs() < 0.01);
    }

    #[test]
    fn every_builtin_theme_meets_wcag_aa_for_text() {
        let mut low = Vec::new();
        for (_, file, text) in BUILTIN {
            let t = Theme::parse(file, text).unwrap();
            // Every colour text is drawn in, on the screen's background:
            // WCAG AA asks 4.5:1 for ordinary text.
            for (field, fg) in [
                ("foreground", t.foreground),
                ("muted", t.muted),
                ("accent", t.accent),
                ("success", t.success),
                ("failure", t.failure),
                ("warning", t.warning),
                ("privileged", t.privileged),
            ] {
                let ratio = contrast(fg, t.background);
                if ratio < 4.5 {
                    low.push(format!("{file}: {field} on background is {ratio:.2}:1"));
                }
            }
            // The selected row's text stays readable too.
            let ratio = contrast(t.foreground, t.selection);
            if ratio < 4.5 {
                low.push(format!("{file}: foreground on selection is {ratio:.2}:1"));
            }
        }
        assert!(low.is_empty(), "below WCAG AA (4.5:1):\n{}", low.join("\n"));
    }

    #[test]
    fn errors_name_file_and_field() {
        let bad = "name = \"x\"\n[colors]\nbackground = \"#000000\"\nforeground = \"#ffffff\"\naccent = \"notacolour\"\n";
        let err = Theme::parse("themes/x.toml", bad).unwrap_err().to_string();
        assert!(
            err.contains("themes/x.toml") && err.contains("colors.accent"),
            "{err}"
        );
        let missing = "[colors]\nbackground = \"#000000\"\n";
        let err = Theme::parse("t.toml", missing).unwrap_err().to_string();
        assert!(
            err.contains("colors.foreground") && err.contains("missing"),
            "{err}"
        );
        let err = Theme::parse("t.toml", "[colors\n").unwrap_err().to_string();
        assert!(err.starts_with("t.toml"), "{err}");
    }

    #[test]
    fn user_dir_overrides_and_unknown_names() {
        let dir = tempfile::tempdir().unwrap();
        let text = include_str!("../../themes/light.toml").replace("\"light\"", "\"mine\"");
        std::fs::write(dir.path().join("mine.toml"), text).unwrap();
        assert_eq!(Theme::load("mine", Some(dir.path())).unwrap().name, "mine");
        let err = Theme::load("nope", Some(dir.path()))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("nope") && err.contains("mine") && err.contains("dark"),
            "{err}"
        );
        std::fs::write(dir.path().join("broken.toml"), "[colors]\naccent = 3\n").unwrap();
        let err = Theme::load("broken", Some(dir.path()))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("broken.toml") && err.contains("colors.accent"),
            "{err}"
        );
    }
}
