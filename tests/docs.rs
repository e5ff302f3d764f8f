//! The documentation, checked against the code it describes:
//!
//! - `docs/cli.md` is exactly what `endless::cli::reference` renders from
//!   the clap definitions, and `endless bench --help` names every bench;
//! - every relative link in README.md, python/README.md and docs/**/*.md
//!   resolves (the file exists, an `#anchor` is one of its headings);
//! - every `endless ...` command in their code blocks parses, and every one
//!   quoted inline names real subcommands and options;
//! - every `scripts/...`, `python/...`, `src/...` (and other repository
//!   directory) path they name exists;
//! - every table renders (a header and a `|---|` row above its rows, no
//!   blank line inside, each row with the header's number of cells);
//! - every TUI capture is the screen of the snapshot test it names;
//! - every shell block runs (below);
//! - README.md stays a short guide.
//!
//! `UPDATE_DOCS=1 cargo test --test docs` rewrites docs/cli.md and the
//! captures instead of failing on them.
//!
//! # Shell blocks are run
//!
//! Every ```` ```sh ````, ```` ```bash ````, ```` ```shell ```` and
//! ```` ```console ```` block of README.md and docs/*.md is run, unless the
//! line right above it says why not:
//!
//! ```text
//! <!-- not run: needs a model server (vLLM) -->
//! ```
//!
//! (an HTML comment: GitHub shows nothing; the reason is required). Use it
//! for setup (apt-get, the test suite itself), the TUI, and what needs a
//! GPU, Slurm, the network, an LLM or minutes. Everything else runs:
//!
//! - The blocks of one file run in order, each as `bash -c` with `set -e`,
//!   in one fresh temporary directory: `HOME` and the XDG directories lie
//!   in it (so the default workspace, the cache and `serve.token` are
//!   fresh), the working directory is empty at first and kept from block to
//!   block, and `endless` on `PATH` is the binary under test
//!   (`$DOCS_REPO` is the repository, for setups). Files run in parallel.
//! - Each block has a budget of 120 s, or what its marker says, and may
//!   need setup that the doc's reader has already done (the TUI seeding
//!   the default workspace, say), run first with its output unchecked:
//!   `` <!-- run: within 300 s; setup: `endless generate --offline --count 5` --> ``
//!   (either part alone is fine). Past its budget a block is killed with
//!   its background processes (also killed when it ends), and fails.
//! - The block must exit 0. Where a ```` ```console ```` block shows
//!   output (lines under a `$ command` line), the command must print it
//!   (stdout and stderr together), under this rule: trailing spaces and
//!   trailing empty lines do not count; a line `...` stands for any lines
//!   (none too), and `...` within a line for any text on that line (a time,
//!   a count, a path); everything else is exact.
#![allow(clippy::unwrap_used)] // tests fail loudly

#[path = "docs/captures.rs"]
mod captures;
#[path = "docs/checks.rs"]
mod checks;
#[path = "docs/markdown.rs"]
mod markdown;
#[path = "docs/run.rs"]
mod run;
#[path = "docs/tables.rs"]
mod tables;

use std::path::{Path, PathBuf};

/// README.md's length limit: the guide people read first stays short; the
/// rest belongs in docs/.
const README_MAX_LINES: usize = 250;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn update() -> bool {
    std::env::var_os("UPDATE_DOCS").is_some_and(|v| v == "1")
}

/// The Markdown files the checks read, below `root`.
fn doc_files(root: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = ["README.md", "python/README.md"]
        .iter()
        .map(|f| root.join(f))
        .filter(|f| f.exists())
        .collect();
    let docs = root.join("docs");
    if docs.is_dir() {
        let mut found: Vec<PathBuf> = walkdir::WalkDir::new(&docs)
            .into_iter()
            .filter_map(Result::ok)
            .map(|e| e.into_path())
            .filter(|p| p.extension().is_some_and(|e| e == "md"))
            .collect();
        found.sort();
        files.extend(found);
    }
    files
}

/// Every problem the link, command, path, table and capture checks find below
/// `root`; with `update`, captures that differ are rewritten instead.
fn problems(root: &Path, update: bool) -> Vec<String> {
    let mut out = Vec::new();
    for file in doc_files(root) {
        let text = std::fs::read_to_string(&file).unwrap();
        let doc = markdown::parse(&text);
        out.extend(checks::links(root, &file, &doc));
        out.extend(checks::commands(root, &file, &doc));
        out.extend(checks::paths(root, &file, &text));
        out.extend(tables::tables(root, &file, &doc));
        let (found, rewritten) = captures::check(root, &file, &text, &doc, update);
        out.extend(found);
        if let Some(new) = rewritten {
            endless::fsutil::write_atomic(&file, new.as_bytes()).unwrap();
            eprintln!("rewrote the captures of {}", file.display());
        }
    }
    out
}

#[test]
fn cli_reference_is_generated_from_clap() {
    let path = root().join("docs/cli.md");
    let want = endless::cli::reference::markdown();
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    if have == want {
        return;
    }
    if update() {
        endless::fsutil::write_atomic(&path, want.as_bytes()).unwrap();
        eprintln!("rewrote {}", path.display());
        return;
    }
    let line = have
        .lines()
        .zip(want.lines())
        .position(|(a, b)| a != b)
        .unwrap_or_else(|| have.lines().count().min(want.lines().count()));
    panic!(
        "docs/cli.md is not what the clap definitions render (first difference at line {}:\n  file:      {:?}\n  rendered:  {:?})\n\
         After changing src/cli.rs, run `UPDATE_DOCS=1 cargo test --test docs` to regenerate it.",
        line + 1,
        have.lines().nth(line).unwrap_or("<end of file>"),
        want.lines().nth(line).unwrap_or("<end of file>"),
    );
}

#[test]
fn links_commands_paths_and_captures_hold() {
    let found = problems(&root(), update());
    assert!(
        found.is_empty(),
        "{} problem(s) in the documentation:\n{}",
        found.len(),
        found.join("\n")
    );
}

#[test]
fn readme_is_short() {
    let n = std::fs::read_to_string(root().join("README.md"))
        .unwrap()
        .lines()
        .count();
    assert!(
        n <= README_MAX_LINES,
        "README.md has {n} lines (at most {README_MAX_LINES}): move the details into docs/"
    );
}

/// The checks on a made-up repository with one mistake of each kind: each
/// is reported, naming the file and line.
#[test]
fn checks_catch_each_kind_of_mistake() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("docs")).unwrap();
    std::fs::create_dir_all(root.join("scripts")).unwrap();
    std::fs::write(root.join("scripts/run.sh"), "").unwrap();
    std::fs::create_dir_all(root.join("src/tui/tests/snapshots")).unwrap();
    std::fs::write(
        root.join("src/tui/tests/snapshots/endless__tui__tests__x__tiny_80x24.snap"),
        "---\nsource: x\nexpression: y\n---\n\" Tasks | Live | Training  \"\n\"row one\"\n",
    )
    .unwrap();
    std::fs::write(
        root.join("docs/guide.md"),
        "# Guide\n\n## Good part\n\nBack to [the start](../README.md#start).\n",
    )
    .unwrap();
    let readme = [
        "# Start",                                                                         // 1
        "",                                                                                // 2
        "[fine](docs/guide.md#good-part) [self](#start)",                                  // 3
        "[gone](docs/missing.md)",                                                         // 4
        "[bad anchor](docs/guide.md#no-such-part)",                                        // 5
        "",                                                                                // 6
        "```sh",                                                                           // 7
        "./scripts/run.sh",                                                                // 8
        "endless tasks list --json",                                                       // 9
        "endless frobnicate --now",                                                        // 10
        "endless tasks list --no-such-flag && endless eval --policy oracle",               // 11
        "endless tasks show <ID>   # (placeholders)",                                      // 12
        "```",                                                                             // 13
        "",                                                                                // 14
        "Run `endless tasks lst` or `endless bench bogus` or `endless eval --samplez 3`.", // 15
        "See `scripts/missing.sh` and scripts/run.sh.",                                    // 16
        "",                                                                                // 17
        "<!-- snapshot: tiny_80x24 -->",                                                   // 18
        "```text",                                                                         // 19
        " Tasks | Live | Training",                                                        // 20
        "row two",                                                                         // 21
        "```",                                                                             // 22
        "",                                                                                // 23
        "```text",                                                                         // 24
        " Tasks | Live | Training",                                                        // 25
        "```",                                                                             // 26
        "",                                                                                // 27
        "| a | b |",                                                                       // 28
        "|---|---|",                                                                       // 29
        "",                                                                                // 30
        "| c | d |",                                                                       // 31
    ]
    .join("\n");
    std::fs::write(root.join("README.md"), &readme).unwrap();

    let found = problems(root, false);
    let expect = [
        "README.md:4: link to `docs/missing.md`: docs/missing.md does not exist",
        "README.md:5: link to `docs/guide.md#no-such-part`: docs/guide.md has no heading with anchor #no-such-part",
        "README.md:10: `endless frobnicate --now` does not parse: unrecognized subcommand 'frobnicate'",
        "README.md:11: `endless tasks list --no-such-flag` does not parse: unexpected argument '--no-such-flag' found",
        "README.md:15: `endless tasks lst`: `endless tasks` has no subcommand `lst`",
        "README.md:15: `endless bench bogus`: `endless bench` does not take `bogus`",
        "README.md:15: `endless eval --samplez 3`: `endless eval` has no option `--samplez`",
        "README.md:16: `scripts/missing.sh` does not exist",
        "README.md:20: the capture differs from snapshot `tiny_80x24`",
        "README.md:25: a TUI capture without `<!-- snapshot: NAME -->` above it",
        "README.md:31: table rows without a header",
    ];
    for e in expect {
        assert!(
            found.iter().any(|f| f.starts_with(e)),
            "not reported: {e}\nfound:\n{}",
            found.join("\n")
        );
    }
    assert_eq!(
        found.len(),
        expect.len(),
        "unexpected reports:\n{}",
        found.join("\n")
    );

    // UPDATE_DOCS rewrites the stale capture from its snapshot and leaves the rest.
    let after = problems(root, true);
    assert_eq!(after.len(), expect.len() - 1, "{}", after.join("\n"));
    let text = std::fs::read_to_string(root.join("README.md")).unwrap();
    assert!(
        text.contains(
            "<!-- snapshot: tiny_80x24 -->\n```text\n Tasks | Live | Training\nrow one\n```"
        ),
        "{text}"
    );
    assert!(problems(root, false)
        .iter()
        .all(|p| !p.contains("tiny_80x24")));
}

/// Every shell block of README.md and docs/ runs as the opening comment
/// says, or says why not.
#[test]
fn shell_blocks_run_or_say_why_not() {
    let root = root();
    let endless = Path::new(env!("CARGO_BIN_EXE_endless"));
    let files = doc_files(&root);
    let found: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = files
            .iter()
            .map(|file| {
                let root = &root;
                s.spawn(move || {
                    let text = std::fs::read_to_string(file).unwrap();
                    run::run_blocks(root, file, &markdown::parse(&text), endless)
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    assert!(
        found.is_empty(),
        "{} shell block(s) of the documentation failed (see tests/docs.rs for the rules):\n{}",
        found.len(),
        found.join("\n\n")
    );
}

/// The runner on a made-up document: a block that fails, one over its
/// budget, output that differs, markers without a reason or unknown are each
/// reported with their line; blocks share the working directory and a
/// fresh home, and `endless` is the binary under test.
#[test]
fn the_shell_block_runner_catches_each_kind_of_mistake() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let doc = [
        "# Doc",                                                              // 1
        "",                                                                   // 2
        "```sh",                                                              // 3
        "echo kept > note.txt",                                               // 4
        "test \"$HOME\" != \"$REAL_HOME\" && test -z \"$ENDLESS_WORKSPACE\"", // 5
        "```",                                                                // 6
        "",                                                                   // 7
        "```console",                                                         // 8
        "$ cat note.txt",                                                     // 9
        "kept",                                                               // 10
        "$ endless --version",                                                // 11
        "endless ...",                                                        // 12
        "$ printf 'a\\nb\\nc\\n'",                                            // 13
        "a",                                                                  // 14
        "...",                                                                // 15
        "```",                                                                // 16
        "",                                                                   // 17
        "```console",                                                         // 18
        "$ echo 3 of 4 passed",                                               // 19
        "4 of 4 passed",                                                      // 20
        "```",                                                                // 21
        "",                                                                   // 22
        "```bash",                                                            // 23
        "echo printed; false; echo never",                                    // 24
        "```",                                                                // 25
        "",                                                                   // 26
        "<!-- run: within 1 s -->",                                           // 27
        "```sh",                                                              // 28
        "sleep 30 &",                                                         // 29
        "sleep 30",                                                           // 30
        "```",                                                                // 31
        "",                                                                   // 32
        "<!-- not run: -->",                                                  // 33
        "```sh",                                                              // 34
        "false",                                                              // 35
        "```",                                                                // 36
        "",                                                                   // 37
        "<!-- not run: needs a GPU -->",                                      // 38
        "```sh",                                                              // 39
        "false",                                                              // 40
        "```",                                                                // 41
        "<!-- run: setup: `echo seeded > seed` -->",                          // 42
        "```console",                                                         // 43
        "$ cat seed",                                                         // 44
        "seeded",                                                             // 45
        "```",                                                                // 46
        "<!-- snapshot: x -->",                                               // 47
        "```shell",                                                           // 48
        "true",                                                               // 49
        "```",                                                                // 50
    ]
    .join("\n");
    let real_home = std::env::var("HOME").unwrap_or_default();
    let doc = doc.replace("$REAL_HOME", &real_home);
    let file = root.join("doc.md");
    std::fs::write(&file, &doc).unwrap();
    let found = run::run_blocks(
        root,
        &file,
        &markdown::parse(&doc),
        Path::new(env!("CARGO_BIN_EXE_endless")),
    );
    let expect = [
        "doc.md:33: `<!-- not run: -->` without a reason",
        "doc.md:47: unknown marker `<!-- snapshot: x -->`",
        "doc.md:19: `echo 3 of 4 passed` printed what the doc does not show",
        "doc.md:24: exited with status 1",
        "doc.md:29: ran past its budget of 1 s",
    ];
    for e in expect {
        assert!(
            found.iter().any(|f| f.starts_with(e)),
            "not reported: {e}\nfound:\n{}",
            found.join("\n")
        );
    }
    assert_eq!(found.len(), expect.len(), "{}", found.join("\n"));
    let failed = found.iter().find(|f| f.starts_with("doc.md:24")).unwrap();
    assert!(
        failed.contains("printed") && !failed.contains("never"),
        "{failed}"
    );
}

/// Every bench is named where people look for it: `endless --help`,
/// `endless bench --help` and the user guide's command table.
#[test]
fn bench_help_names_every_benchmark() {
    use clap::ValueEnum;
    let help = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_endless"))
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let top = help(&["--help"]);
    // `bench`'s entry in the command list, with the lines clap wrapped it
    // onto (indented deeper than the command names).
    let bench_line: String = top
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("bench "))
        .enumerate()
        .take_while(|(i, l)| *i == 0 || l.starts_with("   "))
        .map(|(_, l)| l.trim())
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        !bench_line.is_empty(),
        "no `bench` in `endless --help`:\n{top}"
    );
    let bench_help = help(&["bench", "--help"]);
    let guide = std::fs::read_to_string(root().join("docs/user-guide.md")).unwrap();
    let synopsis = guide
        .lines()
        .find(|l| l.starts_with("| `endless bench "))
        .expect("the user guide's table has `endless bench`");
    let synopsis = synopsis.split('`').nth(1).unwrap();
    let listed: Vec<&str> = synopsis["endless bench ".len()..]
        .split("\\|")
        .map(str::trim)
        .collect();
    for target in endless::cli::BenchTarget::value_variants() {
        let name = target.to_possible_value().unwrap().get_name().to_string();
        let word = |text: &str| {
            text.split(|c: char| !c.is_ascii_alphanumeric() && c != '-')
                .any(|w| w == name)
        };
        assert!(
            word(&bench_line),
            "`endless --help` does not name bench `{name}`: {bench_line}"
        );
        assert!(
            bench_help.contains(&format!("- {name}:")),
            "`endless bench --help` does not list `{name}`:\n{bench_help}"
        );
        assert!(
            listed.contains(&name.as_str()),
            "docs/user-guide.md's `{synopsis}` does not name bench `{name}`"
        );
    }
}
