//! Git repository operations on generated histories.

use rand_chacha::ChaCha8Rng;

use crate::procgen::data::{self, PROJECTS};
use crate::procgen::pytest::Check;
use crate::procgen::spec::{Def, Spec};
use crate::procgen::util::home;
use crate::procgen::util::{py, sq, write_cmd, Pick};

pub(crate) const FAMILIES: &[Def] = &[
    Def {
        name: "git-commit-changes",
        category: "git",
        tools: &[],
        build: commit_changes,
    },
    Def {
        name: "git-find-commit",
        category: "git",
        tools: &[],
        build: find_commit,
    },
    Def {
        name: "git-restore-file",
        category: "git",
        tools: &[],
        build: restore_file,
    },
];

/// Setup lines: initialise `repo` on branch `main` with a local identity.
fn git_init(s: &mut Spec, repo: &str, author: &str) {
    s.setup.raw(format!(
        "mkdir -p {r} && git -C {r} init -q -b main && git -C {r} config user.name {n} && git -C {r} config user.email {e}",
        r = sq(repo),
        n = sq(author),
        e = sq(&format!("{}@example.com", author.to_lowercase().replace(' ', ".")))
    ));
}

/// Setup lines: write `files` (relative path, content) and commit them on day `day` of 2024.
fn git_commit(s: &mut Spec, repo: &str, files: &[(String, String)], msg: &str, day: i64) {
    for (p, c) in files {
        let full = format!("{repo}/{p}");
        s.setup.raw(format!(
            "mkdir -p {}",
            sq(crate::procgen::util::parent(&full))
        ));
        s.setup.raw(write_cmd(&full, c));
    }
    let date = format!("{}T10:00:00+00:00", data::date_of(day));
    s.setup.raw(format!(
        "git -C {r} add -A && GIT_AUTHOR_DATE={d} GIT_COMMITTER_DATE={d} git -C {r} commit -q -m {m}",
        r = sq(repo),
        d = sq(&date),
        m = sq(msg)
    ));
}

/// `git <args>` (space-separated) in `repo` prints `expected`.
fn git_check(repo: &str, args: &str, expected: impl Into<String>) -> Check {
    Check::Git(
        repo.into(),
        args.split_whitespace().map(String::from).collect(),
        expected.into(),
    )
}

fn module(rng: &mut ChaCha8Rng, name: &str) -> String {
    format!(
        "\"\"\"{name} helpers.\"\"\"\n\n\ndef {name}_value(x):\n    return x * {}\n\n\nLIMIT = {}\n",
        rng.int(2, 9),
        rng.int(10, 500)
    )
}

const SUBJECTS: &[&str] = &[
    "Add {f} module",
    "Refactor {f} for clarity",
    "Fix off-by-one in {f}",
    "Tune limits in {f}",
    "Document {f} helpers",
    "Speed up {f} lookups",
];

/// A small history: returns (module names, number of commits).
fn history(rng: &mut ChaCha8Rng, s: &mut Spec, repo: &str, n: usize) -> (Vec<String>, usize) {
    let names = data::distinct(rng, 3, |r| {
        r.pick(&[
            "billing", "search", "users", "export", "parser", "metrics", "cache",
        ])
        .to_string()
    });
    git_init(
        s,
        repo,
        &format!(
            "{} {}",
            cap(rng.pick(data::FIRST)),
            cap(rng.pick(data::LAST))
        ),
    );
    git_commit(
        s,
        repo,
        &[(
            "README.md".into(),
            format!("# {}\n\nInternal tool.\n", base(repo)),
        )],
        "Initial commit",
        10,
    );
    for i in 1..n {
        let f = &names[i % names.len()];
        let msg = SUBJECTS[i % SUBJECTS.len()].replace("{f}", f) + &format!(" (#{})", 100 + i);
        git_commit(
            s,
            repo,
            &[(format!("src/{f}.py"), module(rng, f))],
            &msg,
            10 + 3 * i as i64,
        );
    }
    (names, n)
}

fn base(p: &str) -> &str {
    crate::procgen::util::base(p)
}

fn cap(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().collect::<String>() + c.as_str(),
        None => String::new(),
    }
}

fn commit_changes(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    let repo = home(&format!("repos/{}", rng.pick(PROJECTS)));
    let mut s = Spec::default();
    let (names, n) = history(rng, &mut s, &repo, 3 + c as usize / 2);
    let msg = rng
        .pick(&[
            "Add retry settings and docs",
            "Update limits and add changelog",
            "Prepare config for staging",
            "Add notes for the next sprint",
        ])
        .to_string();
    s.title = format!("Commit the pending changes in {repo}");
    s.goals = vec![
        format!("The git repository `{repo}` has uncommitted work (modified and new files). Commit all of it in a single commit with the message `{msg}`."),
        format!("Please record everything that is pending in `{repo}` (changes and untracked files) as one commit whose message is exactly `{msg}`."),
    ];
    let changed = format!("src/{}.py", names[1 % names.len()]);
    let new_content = module(rng, &names[1 % names.len()]) + "\nRETRIES = 3\n";
    s.setup
        .raw(write_cmd(&format!("{repo}/{changed}"), &new_content));
    let notes = format!("# Changelog\n\n- {}\n", data::prose(rng, 1));
    s.setup
        .raw(write_cmd(&format!("{repo}/CHANGELOG.md"), &notes));
    s.initial
        .push(git_check(&repo, "rev-list --count HEAD", n.to_string()));
    let expect_count = n + 1;
    let mut steps = Vec::new();
    let g = format!("git -C {repo}");
    if c >= 3 {
        let branch = format!(
            "feature/{}",
            rng.pick(&["retries", "staging", "limits", "docs"])
        );
        s.reqs.push(format!("Make the commit on a new branch `{branch}` created from the current `main`; `main` itself must not move."));
        s.checks.push(git_check(
            &repo,
            "rev-parse --abbrev-ref HEAD",
            branch.clone(),
        ));
        s.checks
            .push(git_check(&repo, "rev-list --count main", n.to_string()));
        steps.push(format!("{g} checkout -q -b {branch}"));
    }
    if c >= 4 {
        let gone = format!("src/{}.py", names[2 % names.len()]);
        s.reqs.push(format!(
            "`{gone}` is obsolete: delete it as part of the same commit."
        ));
        s.checks.push(Check::Absent(format!("{repo}/{gone}")));
        s.checks.push(Check::Custom {
            name: "removed_from_head".into(),
            describe: format!("`{gone}` is not tracked in HEAD"),
            body: format!("res = _git({}, ['ls-files', {}])\nassert res.stdout.strip() == '', 'the obsolete file is still tracked'", py(&repo), py(&gone)),
        });
        steps.push(format!("rm {repo}/{gone}"));
    }
    steps.push(format!("{g} add -A\n{g} commit -q -m {}", sq(&msg)));
    s.checks
        .push(git_check(&repo, "log -1 --format=%s", msg.clone()));
    s.checks
        .push(git_check(&repo, "status --porcelain", String::new()));
    s.checks.push(git_check(
        &repo,
        "show HEAD:CHANGELOG.md",
        notes.trim().to_string(),
    ));
    s.checks.push(git_check(
        &repo,
        &format!("show HEAD:{changed}"),
        new_content.trim(),
    ));
    if c >= 5 {
        let tag = format!("v0.{}.0", rng.int(2, 9));
        s.reqs.push(format!(
            "Tag the new commit `{tag}` (a lightweight tag is fine)."
        ));
        s.checks
            .push(git_check(&repo, "tag --points-at HEAD", tag.clone()));
        steps.push(format!("{g} tag {tag}"));
    }
    s.checks.push(git_check(
        &repo,
        "rev-list --count HEAD",
        expect_count.to_string(),
    ));
    s.solve = steps;
    s
}

fn find_commit(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    let repo = home(&format!("src/{}", rng.pick(PROJECTS)));
    let mut s = Spec::default();
    let n = 5 + c as usize;
    let (names, _) = history(rng, &mut s, &repo, n);
    let flag = format!(
        "ENABLE_{}",
        rng.pick(&[
            "FAST_PATH",
            "NEW_BILLING",
            "BETA_SEARCH",
            "AUDIT_LOG",
            "DARK_MODE"
        ])
    );
    let target_day = 10 + 3 * n as i64 + 2;
    let subject = format!(
        "Wire up {} settings (#{})",
        rng.pick(&["runtime", "deployment", "service"]),
        300 + rng.int(0, 99)
    );
    git_commit(
        &mut s,
        &repo,
        &[(
            "settings.py".into(),
            format!(
                "DEBUG = False\n{flag} = True\nTIMEOUT = {}\n",
                rng.int(5, 60)
            ),
        )],
        &subject,
        target_day,
    );
    for k in 0..(1 + c as i64 / 2) {
        let f = &names[k as usize % names.len()];
        git_commit(
            &mut s,
            &repo,
            &[(format!("src/{f}.py"), module(rng, f))],
            &format!("Follow-up cleanup in {f} (#{})", 400 + k),
            target_day + 2 + k,
        );
    }
    let out = home(rng.pick(&["answer.txt", "culprit_commit.txt", "flag_commit.txt"]));
    s.title = format!("Find the commit that introduced {flag}");
    s.goals = vec![
        format!("In the git repository `{repo}`, find the commit that introduced the setting `{flag}` and write its full 40-character hash to `{out}`."),
        format!("Someone added `{flag}` to `{repo}` at some point. Which commit was it? Put its full SHA-1 in `{out}`."),
    ];
    s.output = Some(out.clone());
    let with_date = c >= 3;
    if with_date {
        s.reqs.push("Put the hash on the first line and the commit's author date as `YYYY-MM-DD` on the second line.".into());
    } else {
        s.reqs.push("The file should contain just the hash.".into());
    }
    s.reqs.push("Don't change the repository.".into());
    let date = data::date_of(target_day);
    let mut body = format!(
        "repo, subject = {}, {}\nres = _git(repo, ['log', '--format=%H%x09%s'])\nassert res.returncode == 0, res.stderr\nexpected = [l.split('\\t', 1)[0] for l in res.stdout.splitlines() if l.split('\\t', 1)[1] == subject]\nassert len(expected) == 1, 'the target commit is missing from the history'\nlines = _read({}).split()\nassert lines, 'the answer file is empty'\nassert lines[0] == expected[0], f'wrong commit: {{lines[0]}}'\nassert len(lines) == {}, f'expected {}, got {{len(lines)}} words'\n",
        py(&repo),
        py(&subject),
        py(&out),
        if with_date { 2 } else { 1 },
        if with_date { "the hash and the date only" } else { "just the hash" },
    );
    if with_date {
        body.push_str(&format!(
            "assert lines[1] == {}, f'expected the date {date} on line 2, got {{lines[1]}}'\n",
            py(&date)
        ));
    }
    s.checks.push(Check::Custom {
        name: "answer_is_commit".into(),
        describe: format!("`{out}` names the commit `{subject}` (dated {date})"),
        body,
    });
    s.checks
        .push(git_check(&repo, "status --porcelain", String::new()));
    let fmt = if with_date { "%H%n%ad" } else { "%H" };
    s.solve.push(format!(
        "git -C {repo} log -S {flag} --reverse --date=short --format={} -- settings.py | head -n {} > {out}",
        sq(fmt),
        if with_date { 2 } else { 1 }
    ));
    s.near_miss = Some(vec![format!(
        "git -C {repo} log -1 --date=short --format={} > {out}",
        sq(fmt)
    )]);
    s
}

fn restore_file(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    let repo = home(&format!("work/{}", rng.pick(PROJECTS)));
    let mut s = Spec::default();
    let (_, n) = history(rng, &mut s, &repo, 3);
    let file = rng
        .pick(&["config/app.ini", "config/limits.conf", "deploy/values.cfg"])
        .to_string();
    let good = format!(
        "[server]\nport = {}\nworkers = {}\n\n[limits]\nmax_upload_mb = {}\n",
        rng.int(8000, 8999),
        rng.int(2, 16),
        rng.int(5, 200)
    );
    let tag = format!("v1.{}.0", rng.int(0, 9));
    git_commit(
        &mut s,
        &repo,
        &[(file.clone(), good.clone())],
        "Add service configuration",
        60,
    );
    s.setup.raw(format!("git -C {} tag {tag}", sq(&repo)));
    let bad = good
        .replace("port = ", "port = 1")
        .replace("workers = ", "workers = 0");
    git_commit(
        &mut s,
        &repo,
        &[(file.clone(), bad.clone())],
        "Experiment with ports",
        70,
    );
    let bad2 = bad.clone() + "debug = yes\n";
    git_commit(
        &mut s,
        &repo,
        &[(file.clone(), bad2.clone())],
        "More experiments",
        75,
    );
    let total = n + 3;
    let msg = format!("Restore {file} from {tag}");
    s.title = format!("Restore {file} to its {tag} version");
    s.goals = vec![
        format!("Recent commits in `{repo}` broke `{file}`. Bring that file back to exactly how it was at tag `{tag}` and commit the fix with the message `{msg}`."),
        format!("Please restore `{file}` in the repo `{repo}` to its state at `{tag}` (don't rewrite history - add a new commit with message `{msg}`)."),
    ];
    s.reqs
        .push("Other files must stay as they are in the latest commit.".into());
    s.initial
        .push(git_check(&repo, "rev-list --count HEAD", total.to_string()));
    s.checks
        .push(Check::Content(format!("{repo}/{file}"), good.clone()));
    s.checks
        .push(git_check(&repo, "log -1 --format=%s", msg.clone()));
    s.checks.push(git_check(
        &repo,
        "rev-list --count HEAD",
        (total + 1).to_string(),
    ));
    s.checks
        .push(git_check(&repo, "status --porcelain", String::new()));
    let g = format!("git -C {repo}");
    s.solve.push(format!("{g} checkout {tag} -- {file}"));
    if c >= 3 {
        let note = format!("{repo}/RESTORED.md");
        let line = format!("{file} restored from {tag}");
        s.reqs.push(format!("In the same commit, add a file `RESTORED.md` at the repository root containing the single line `{line}`."));
        s.checks
            .push(git_check(&repo, "show HEAD:RESTORED.md", line.clone()));
        s.solve.push(format!("echo {} > {note}", sq(&line)));
    }
    s.solve
        .push(format!("{g} add -A\n{g} commit -q -m {}", sq(&msg)));
    let mut nm = s.solve.clone();
    nm[0] = format!("{g} checkout HEAD~1 -- {file}");
    s.near_miss = Some(nm);
    s
}
