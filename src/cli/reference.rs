//! The command-line reference (`docs/cli.md`), rendered from the clap
//! definitions so that it cannot drift from them: every visible
//! subcommand with its description, usage, arguments and options (help,
//! possible values, defaults, environment variables). Hidden commands and
//! arguments are left out. `tests/docs.rs` compares the file with this
//! rendering (and rewrites it with `UPDATE_DOCS=1`).

use std::fmt::Write as _;

use clap::{Arg, Command};

/// The first lines of the rendered page.
const HEADER: &str = "# Command-line reference\n\n\
<!-- Generated from the clap definitions (src/cli.rs) by src/cli/reference.rs: \
do not edit by hand. `UPDATE_DOCS=1 cargo test --test docs` rewrites it. -->\n\n\
Every command and option of `endless`, as `endless help` and `--help` describe them. \
With no command, `endless` opens the TUI on the workspace. \
`--workspace DIR` and `--create` are accepted by every command; `-h`/`--help` prints a \
command's help and `-V`/`--version` the version. For what the commands are for, see the \
[user guide](user-guide.md).\n";

/// The reference page for `endless`'s own command line.
pub fn markdown() -> String {
    use clap::CommandFactory;
    format!("{HEADER}\n{}", render(super::Cli::command()))
}

/// Renders `root` and every visible subcommand below it as Markdown: an
/// index, then one section per command, depth first, in declaration order.
pub fn render(mut root: Command) -> String {
    // Building fills in what clap derives late: usage strings with the full
    // command path, propagated global arguments, the help subcommand.
    root.build();
    let mut commands = Vec::new();
    collect(&mut root, &mut Vec::new(), &mut commands);
    let mut out = String::from("## Commands\n\n");
    for c in &commands {
        let summary = c.summary.as_deref().unwrap_or("");
        let _ = writeln!(
            out,
            "- [`{}`](#{}): {}",
            c.path,
            slug(&c.path),
            sentence(&one_line(summary))
        );
    }
    for c in &commands {
        out.push('\n');
        out.push_str(&c.section);
    }
    out
}

/// One rendered command.
struct Rendered {
    /// `endless tasks list`.
    path: String,
    /// Its one-line description, for the index.
    summary: Option<String>,
    /// Its whole section, heading first.
    section: String,
}

/// Renders `cmd` (reached through `parents`) and then its visible subcommands.
fn collect(cmd: &mut Command, parents: &mut Vec<String>, out: &mut Vec<Rendered>) {
    parents.push(cmd.get_name().to_string());
    let path = parents.join(" ");
    let usage = cmd.render_usage().to_string();
    let top = parents.len() == 1;
    out.push(Rendered {
        summary: cmd.get_about().map(|s| s.to_string()),
        section: section(cmd, &path, &usage, top),
        path,
    });
    for sub in cmd.get_subcommands_mut() {
        if sub.is_hide_set() || sub.get_name() == "help" {
            continue;
        }
        collect(sub, parents, out);
    }
    parents.pop();
}

/// The section of one command: heading, description, usage, subcommands,
/// arguments and options.
fn section(cmd: &Command, path: &str, usage: &str, top: bool) -> String {
    let mut s = format!("## `{path}`\n\n");
    let about = cmd.get_long_about().or(cmd.get_about());
    if let Some(about) = about {
        let _ = writeln!(s, "{}\n", sentence(&about.to_string()));
    }
    let usage = usage.trim().trim_start_matches("Usage:").trim();
    let _ = writeln!(s, "Usage: `{usage}`");
    let subs: Vec<&Command> = cmd
        .get_subcommands()
        .filter(|c| !c.is_hide_set() && c.get_name() != "help")
        .collect();
    if !subs.is_empty() {
        s.push_str("\nCommands:\n\n");
        for sub in subs {
            let sub_path = format!("{path} {}", sub.get_name());
            let about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
            let _ = writeln!(
                s,
                "- [`{}`](#{}): {}",
                sub.get_name(),
                slug(&sub_path),
                sentence(&one_line(&about))
            );
        }
    }
    // Global options are listed once, under `endless` itself.
    let visible = |a: &&Arg| !a.is_hide_set() && !is_builtin(a) && (top || !a.is_global_set());
    let positionals: Vec<&Arg> = cmd.get_positionals().filter(visible).collect();
    let options: Vec<&Arg> = cmd
        .get_arguments()
        .filter(|a| !a.is_positional())
        .filter(visible)
        .collect();
    if !positionals.is_empty() {
        s.push_str("\nArguments:\n\n");
        for a in positionals {
            let _ = writeln!(s, "{}", arg_item(a));
        }
    }
    if !options.is_empty() {
        s.push_str("\nOptions:\n\n");
        for a in options {
            let _ = writeln!(s, "{}", arg_item(a));
        }
    }
    s
}

/// `-h/--help` and `-V/--version`, which every command has.
fn is_builtin(a: &Arg) -> bool {
    matches!(a.get_id().as_str(), "help" | "version")
}

/// One list item: the argument as typed and its help, then what is
/// required, the default and the environment variable as sentences, then
/// the possible values (a nested list when they have help of their own).
fn arg_item(a: &Arg) -> String {
    let mut item = format!("- `{}`", spelling(a));
    let help = a.get_long_help().or(a.get_help()).map(|h| h.to_string());
    if let Some(help) = help {
        let _ = write!(item, ": {}", sentence(&indent(help.trim_end())));
    }
    let mut notes = Vec::new();
    if a.is_required_set() {
        notes.push("Required.".to_string());
    }
    let takes_values = a.get_action().takes_values();
    if takes_values && !a.is_hide_default_value_set() {
        let defaults: Vec<String> = a
            .get_default_values()
            .iter()
            .map(|d| format!("`{}`", d.to_string_lossy()))
            .collect();
        if !defaults.is_empty() {
            notes.push(format!("Default: {}.", defaults.join(", ")));
        }
    }
    if let Some(env) = a.get_env().filter(|_| !a.is_hide_env_set()) {
        notes.push(format!(
            "Environment variable: `{}`.",
            env.to_string_lossy()
        ));
    }
    let values: Vec<clap::builder::PossibleValue> =
        if takes_values && !a.is_hide_possible_values_set() {
            a.get_possible_values()
                .into_iter()
                .filter(|v| !v.is_hide_set())
                .collect()
        } else {
            Vec::new()
        };
    let described = values.iter().any(|v| v.get_help().is_some());
    if !values.is_empty() && !described {
        let names: Vec<String> = values
            .iter()
            .map(|v| format!("`{}`", v.get_name()))
            .collect();
        notes.push(format!("One of {}.", names.join(", ")));
    }
    for note in notes {
        let _ = write!(item, " {note}");
    }
    if described {
        for v in &values {
            let help = v.get_help().map(|h| format!(": {}", h)).unwrap_or_default();
            let _ = write!(item, "\n  - `{}`{help}", v.get_name());
        }
    }
    item
}

/// `text` ending in a full stop, so that notes can follow it.
fn sentence(text: &str) -> String {
    let text = text.trim_end();
    if text.ends_with(['.', '!', '?', ')', ':']) || text.ends_with("```") {
        text.to_string()
    } else {
        format!("{text}.")
    }
}

/// How the argument is typed: `--policy <POLICY>`, `-n, --n <N>`,
/// `<PATHS>...`, `--json`.
fn spelling(a: &Arg) -> String {
    let value = || {
        let names: Vec<String> = match a.get_value_names() {
            Some(names) => names.iter().map(|n| n.to_string()).collect(),
            None => vec![a.get_id().as_str().to_string()],
        };
        let many = a.get_num_args().is_some_and(|n| n.max_values() > 1) && names.len() == 1;
        let dots = if many { "..." } else { "" };
        names
            .iter()
            .map(|n| format!("<{n}>{dots}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    if a.is_positional() {
        return value();
    }
    let mut names = Vec::new();
    if let Some(short) = a.get_short() {
        names.push(format!("-{short}"));
    }
    if let Some(long) = a.get_long() {
        names.push(format!("--{long}"));
    }
    let mut s = names.join(", ");
    if a.get_action().takes_values() {
        s.push(' ');
        s.push_str(&value());
    }
    s
}

/// A help text of several paragraphs, indented to stay inside its list item.
fn indent(text: &str) -> String {
    text.lines()
        .map(|l| {
            if l.is_empty() {
                String::new()
            } else {
                format!("  {l}")
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        .trim_start()
        .to_string()
}

/// The text on one line (an index entry).
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// GitHub's anchor for a heading made of `text` in backticks.
fn slug(text: &str) -> String {
    text.to_lowercase().replace(' ', "-")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Command {
        Command::new("tool")
            .about("A tool.")
            .arg(Arg::new("dir").long("dir").global(true).help("Where."))
            .subcommand(
                Command::new("go")
                    .about("Go somewhere.")
                    .long_about("Go somewhere.\n\nFar, if asked.")
                    .arg(Arg::new("target").required(true).help("The target."))
                    .arg(
                        Arg::new("speed")
                            .long("speed")
                            .default_value("slow")
                            .value_parser(["slow", "fast"])
                            .help("How fast."),
                    )
                    .arg(Arg::new("secret").long("secret").hide(true)),
            )
            .subcommand(Command::new("hidden").hide(true))
    }

    #[test]
    fn every_visible_command_and_argument_is_rendered() {
        let page = render(sample());
        assert!(page.contains("## `tool go`"), "{page}");
        assert!(
            page.contains("- [`tool go`](#tool-go): Go somewhere.\n"),
            "{page}"
        );
        assert!(page.contains("Far, if asked."), "{page}");
        assert!(
            page.contains("Usage: `tool go [OPTIONS] <target>`"),
            "{page}"
        );
        assert!(
            page.contains("- `<target>`: The target. Required."),
            "{page}"
        );
        assert!(
            page.contains("- `--speed <speed>`: How fast. Default: `slow`. One of `slow`, `fast`."),
            "{page}"
        );
        // The global option once, at the top; hidden things never.
        assert_eq!(page.matches("`--dir <dir>`").count(), 1, "{page}");
        assert!(!page.contains("secret"), "{page}");
        assert!(!page.contains("hidden"), "{page}");
        assert!(!page.contains("tool help"), "{page}");
    }

    #[test]
    fn endless_reference_names_every_top_level_command() {
        let page = markdown();
        for name in [
            "tasks",
            "generate",
            "run",
            "eval",
            "train",
            "serve",
            "bench",
            "workspace",
        ] {
            assert!(
                page.contains(&format!("## `endless {name}`")),
                "{name} missing"
            );
        }
        assert!(page.contains("## `endless tasks list`"));
        assert!(page.contains("Environment variable: `ENDLESS_WORKSPACE`."));
        // Possible values with help of their own are listed with it.
        assert!(page.contains("\n  - `harbor`: Harbor tasks"), "{page}");
    }
}
