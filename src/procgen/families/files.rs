//! File and directory management, find/xargs, permissions and symbolic links.

use rand_chacha::ChaCha8Rng;

use crate::procgen::data::{self, distinct, NOUNS, PROJECTS};
use crate::procgen::pytest::Check;
use crate::procgen::spec::{Def, Spec};
use crate::procgen::util::home;
use crate::procgen::util::{sq, Pick};

pub(crate) const FAMILIES: &[Def] = &[
    Def {
        name: "sort-by-extension",
        category: "file-management",
        tools: &[],
        build: sort_by_extension,
    },
    Def {
        name: "cleanup-temp-files",
        category: "file-management",
        tools: &[],
        build: cleanup_temp,
    },
    Def {
        name: "find-large-files",
        category: "find-xargs",
        tools: &[],
        build: find_large,
    },
    Def {
        name: "find-replace-config",
        category: "find-xargs",
        tools: &[],
        build: find_replace,
    },
    Def {
        name: "fix-permissions",
        category: "permissions",
        tools: &[],
        build: fix_permissions,
    },
    Def {
        name: "release-symlinks",
        category: "symlinks",
        tools: &[],
        build: release_symlinks,
    },
    Def {
        name: "symlink-repair",
        category: "symlinks",
        tools: &[],
        build: symlink_repair,
    },
];

fn file_stem(rng: &mut ChaCha8Rng) -> String {
    format!("{}_{}", rng.pick(NOUNS), rng.int(1, 99))
}

fn sort_by_extension(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    let dir = home(rng.pick(&["inbox", "downloads", "unsorted", "scans"]));
    let exts = rng.sample(
        &["pdf", "txt", "csv", "jpg", "png", "md", "log", "json"],
        2 + c as usize / 2,
    );
    let n = 4 + 2 * c as usize;
    let stems = distinct(rng, n, file_stem);
    let mut s = Spec {
        title: format!("Sort the files in {dir} into one folder per extension"),
        goals: vec![
            format!("The folder `{dir}` is a jumble of files. Please sort it: every file goes into a sub-folder of `{dir}` named after its extension."),
            format!("Could you organise `{dir}` by file type? Each file should be moved into `{dir}/<extension>/`, e.g. `report_3.pdf` into `{dir}/pdf/`."),
            format!("Tidy up `{dir}`: move each file into a directory named after its extension (without the dot), inside `{dir}` itself."),
        ],
        ..Default::default()
    };
    s.reqs
        .push("Move the files (don't copy them); keep their names and contents unchanged.".into());
    s.reqs
        .push("Extension directory names are the lowercase extension without the dot.".into());
    let misc = c >= 3;
    for (i, stem) in stems.iter().enumerate() {
        let no_ext = misc && i % 5 == 4;
        let name = if no_ext {
            stem.to_uppercase()
        } else {
            format!("{stem}.{}", exts[i % exts.len()])
        };
        let content = format!("{}\n", data::prose(rng, 2));
        let src = format!("{dir}/{name}");
        s.setup.file(&src, &content);
        s.initial.push(Check::Content(src.clone(), content.clone()));
        s.checks.push(Check::Absent(src));
        let dest = if no_ext {
            format!("{dir}/misc/{name}")
        } else {
            format!("{dir}/{}/{name}", exts[i % exts.len()])
        };
        s.checks.push(Check::Content(dest, content));
    }
    s.solve.push(format!(
        "cd {d}\nfor f in *.*; do\n  [ -f \"$f\" ] || continue\n  ext=\"${{f##*.}}\"\n  mkdir -p \"$ext\"\n  mv \"$f\" \"$ext/\"\ndone",
        d = sq(&dir)
    ));
    if misc {
        s.reqs
            .push(format!("Files without an extension go into `{dir}/misc/`."));
        s.solve.push(format!(
            "cd {d}\nmkdir -p misc\nfor f in *; do\n  [ -f \"$f\" ] && mv \"$f\" misc/\ndone\ntrue",
            d = sq(&dir)
        ));
    }
    s
}

fn cleanup_temp(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    let proj = home(&format!("projects/{}", rng.pick(PROJECTS)));
    let junk_pats: Vec<&str> = rng.sample(
        &["*.tmp", "*.bak", "*~", "*.swp"],
        if c >= 3 { 3 } else { 2 },
    );
    let subdirs = ["src", "docs", "src/util", "tests", "assets/img"];
    let mut s = Spec {
        title: format!("Delete editor and temp files under {proj}"),
        goals: vec![
            format!("My project at `{proj}` is littered with temporary files. Delete every file matching {} anywhere under it, and nothing else.", junk_pats.join(", ")),
            format!("Please clean `{proj}` (recursively): remove all files whose names match any of {}; leave every other file alone.", junk_pats.join(" ")),
        ],
        ..Default::default()
    };
    let mut deleted = Vec::new();
    for i in 0..(5 + 2 * c as usize) {
        let sub = subdirs[i % subdirs.len().min(2 + c as usize)];
        let stem = file_stem(rng);
        let keep = format!(
            "{proj}/{sub}/{stem}.{}",
            rng.pick(&["py", "md", "txt", "cfg"])
        );
        let content = format!("{}\n", data::prose(rng, 1));
        s.setup.file(&keep, &content);
        s.checks.push(Check::Content(keep.clone(), content.clone()));
        if i % 2 == 0 || c >= 4 {
            let pat = junk_pats[i % junk_pats.len()];
            let junk = format!("{keep}{}", &pat[1..]);
            s.setup.file(&junk, &content);
            s.initial.push(Check::File(junk.clone()));
            s.checks.push(Check::Absent(junk.clone()));
            deleted.push(junk.trim_start_matches(&format!("{proj}/")).to_string());
        }
    }
    let names: Vec<String> = junk_pats
        .iter()
        .map(|p| format!("-name {}", sq(p)))
        .collect();
    let expr = names.join(" -o ");
    if c >= 4 {
        deleted.sort();
        let log = home("cleanup.log");
        s.reqs.push(format!("Before deleting, write the paths of the files you remove, relative to `{proj}` (like `src/x.tmp`), one per line and sorted, to `{log}`."));
        s.checks.push(Check::Lines(log.clone(), deleted));
        s.solve.push(format!(
            "find {p} -type f \\( {expr} \\) | sed 's|^{p}/||' | LC_ALL=C sort > {log}",
            p = proj
        ));
        s.output = Some(log);
    }
    s.solve
        .push(format!("find {proj} -type f \\( {expr} \\) -delete"));
    if c >= 4 {
        // Dropping the deletion would be caught; the log is the follow-up target.
        s.near_miss = Some(vec![s.solve[0].clone()]);
    }
    s
}

fn find_large(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    let root = home(rng.pick(&["data", "media", "archive", "shared"]));
    let k = rng.pick(&[64i64, 100, 128, 200, 256]);
    let ext = if c >= 3 {
        Some(rng.pick(&["log", "bin", "dat"]))
    } else {
        None
    };
    let out = home(rng.pick(&["large_files.txt", "big_files.txt", "space_hogs.txt"]));
    let mut s = Spec {
        title: format!("List files over {k} KiB under {root}"),
        goals: vec![
            format!("I'm running out of disk space. Find every regular file under `{root}` (recursively) larger than {k} KiB{}.", ext.map(|e| format!(" whose name ends in `.{e}`")).unwrap_or_default()),
            format!("Which files under `{root}` are bigger than {k} KiB{}? I need a list.", ext.map(|e| format!(" (only `.{e}` files)")).unwrap_or_default()),
        ],
        output: Some(out.clone()),
        ..Default::default()
    };
    s.reqs.push(format!("Write their absolute paths to `{out}`, one per line, sorted in plain byte order (`LC_ALL=C sort`)."));
    s.reqs.push("Do not move or delete anything.".into());
    let mut big = Vec::new();
    let dirs = ["", "/old", "/2024/q1", "/2024/q2", "/tmp"];
    for i in 0..(6 + 2 * c as usize) {
        let d = dirs[i % dirs.len()];
        let e = if i % 3 == 0 {
            ext.unwrap_or("bin")
        } else {
            rng.pick(&["log", "bin", "dat", "txt"])
        };
        let path = format!("{root}{d}/{}.{e}", file_stem(rng));
        if big.contains(&path) {
            continue;
        }
        let is_big = rng.chance(0.45);
        let size = if is_big {
            (k + rng.int(4, 300)) * 1024
        } else {
            rng.int(1, (k - 4) * 1024)
        };
        s.setup.raw(format!(
            "mkdir -p {}",
            sq(crate::procgen::util::parent(&path))
        ));
        s.setup.raw(format!(
            "head -c {size} /dev/zero | tr '\\0' 'x' > {}",
            sq(&path)
        ));
        s.initial.push(Check::File(path.clone()));
        if is_big && ext.is_none_or(|x| x == e) {
            big.push(path);
        }
    }
    if big.is_empty() {
        let path = format!("{root}/forgotten_dump.{}", ext.unwrap_or("bin"));
        s.setup.raw(format!(
            "head -c {} /dev/zero | tr '\\0' 'x' > {}",
            (k + 50) * 1024,
            sq(&path)
        ));
        big.push(path);
    }
    big.sort();
    s.checks.push(Check::Lines(out.clone(), big));
    let name = ext.map(|e| format!(" -name '*.{e}'")).unwrap_or_default();
    s.solve.push(format!(
        "find {root} -type f{name} -size +{k}k | LC_ALL=C sort > {out}"
    ));
    s.near_miss = Some(vec![format!(
        "find {root} -type f{name} -size +{}k | LC_ALL=C sort > {out}",
        k * 4
    )]);
    s
}

fn find_replace(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    let root = home(&format!("{}-config", rng.pick(PROJECTS)));
    let hosts = distinct(rng, 2, data::host);
    let (old, new) = (hosts[0].clone(), hosts[1].clone());
    let mut s = Spec {
        title: format!("Replace {old} with {new} in every .conf file under {root}"),
        goals: vec![
            format!("We migrated a server. In every `*.conf` file under `{root}` (any depth), replace each occurrence of `{old}` with `{new}`."),
            format!("The host `{old}` is gone; its replacement is `{new}`. Update all `.conf` files below `{root}` accordingly."),
        ],
        ..Default::default()
    };
    s.reqs.push("Files that do not end in `.conf` (for example `.conf.bak` backups and READMEs) must stay untouched.".into());
    let subdirs = [
        "",
        "/services",
        "/services/extra",
        "/env/prod",
        "/env/staging",
    ];
    for i in 0..(3 + c as usize) {
        let path = format!(
            "{root}{}/{}.conf",
            subdirs[i % subdirs.len()],
            rng.pick(data::SERVICES)
        );
        let port = rng.int(1024, 9999);
        let mentions = i % 3 != 2;
        let host_line = if mentions {
            format!("host = {old}\nfallback = {old}:{port}\n")
        } else {
            format!("host = {}\n", data::host(rng))
        };
        let content = format!(
            "# {} settings\n{host_line}port = {port}\ntimeout = {}\n",
            base_name(&path),
            rng.int(5, 60)
        );
        if s.setup_has(&path) {
            continue;
        }
        s.setup.file(&path, &content);
        s.checks
            .push(Check::Content(path.clone(), content.replace(&old, &new)));
        if i == 0 {
            s.initial.push(Check::Contains(path.clone(), old.clone()));
        }
        if mentions && i % 2 == 1 {
            let bak = format!("{path}.bak");
            s.setup.file(&bak, &content);
            s.checks.push(Check::Content(bak, content.clone()));
        }
    }
    let readme = format!("{root}/README.txt");
    let rd = format!("Config for the cluster. Primary host was {old}.\n");
    s.setup.file(&readme, &rd);
    s.checks.push(Check::Content(readme, rd));
    let esc = old.replace('.', "\\.");
    s.solve.push(format!(
        "find {root} -type f -name '*.conf' -print0 | xargs -0 sed -i 's/{esc}/{new}/g'"
    ));
    s.near_miss = Some(vec![format!(
        "find {root} -type f -name '*.conf*' -print0 | xargs -0 sed -i 's/{esc}/{new}/g'"
    )]);
    s
}

fn base_name(p: &str) -> &str {
    crate::procgen::util::base(p).trim_end_matches(".conf")
}

fn fix_permissions(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    let root = home(&format!("deploy/{}", rng.pick(PROJECTS)));
    let mut s = Spec {
        title: format!("Fix file permissions under {root}"),
        goals: vec![
            format!("The permissions under `{root}` got mangled by a bad copy. Please fix them."),
            format!("Our deploy tree `{root}` has wrong file modes; set them as described below."),
        ],
        ..Default::default()
    };
    let rules: [(&str, &str, u32, &str); 3] = [
        ("scripts", "sh", 0o755, "shell scripts in `scripts/` must be executable by everyone and writable only by you (755)"),
        ("secrets", "key", 0o600, "key files in `secrets/` must be readable and writable only by you (600)"),
        ("conf", "conf", 0o644, "config files in `conf/` must be readable by everyone and writable only by you (644), not executable"),
    ];
    let nrules = (c as usize).clamp(1, 3);
    let mut cmds = Vec::new();
    for (dir, ext, mode, text) in rules.iter().take(nrules) {
        s.reqs.push(format!("All {text}."));
        let wrong = rng.pick(&[0o666u32, 0o644, 0o777, 0o640, 0o700]);
        let wrong = if wrong == *mode { 0o666 } else { wrong };
        for _ in 0..(2 + c as usize / 2) {
            let p = format!("{root}/{dir}/{}.{ext}", file_stem(rng));
            if s.setup_has(&p) {
                continue;
            }
            let body = match *ext {
                "sh" => format!(
                    "#!/bin/bash\necho \"running {}\"\n",
                    crate::procgen::util::base(&p)
                ),
                "key" => format!(
                    "-----BEGIN PRIVATE KEY-----\n{:x}{:x}\n-----END PRIVATE KEY-----\n",
                    rng.int(1 << 40, 1 << 50),
                    rng.int(1 << 40, 1 << 50)
                ),
                _ => format!("name = {}\nenabled = true\n", dir),
            };
            s.setup.file_mode(&p, &body, wrong);
            s.initial.push(Check::Content(p.clone(), body));
            s.checks.push(Check::Mode(p, *mode));
        }
        cmds.push(format!("chmod {mode:o} {root}/{dir}/*.{ext}"));
    }
    if c >= 4 {
        s.reqs
            .push("The `secrets/` directory itself must be accessible only by you (700).".into());
        s.setup.raw(format!("chmod 755 {root}/secrets"));
        s.checks.push(Check::Mode(format!("{root}/secrets"), 0o700));
        cmds.push(format!("chmod 700 {root}/secrets"));
    }
    s.reqs.push("Don't change any file contents.".into());
    s.solve = cmds;
    s
}

fn release_symlinks(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    let app = rng.pick(PROJECTS);
    let root = home(&format!("apps/{app}"));
    let major = rng.int(1, 3);
    let mut versions: Vec<(i64, i64, i64)> = Vec::new();
    while versions.len() < 3 + c as usize / 2 {
        let v = (major, rng.int(0, 12), rng.int(0, 15));
        if !versions.contains(&v) {
            versions.push(v);
        }
    }
    // Make sort -V matter: add a x.9 next to an x.10 where possible.
    let latest = *versions.iter().max().unwrap_or(&(1, 0, 0));
    let vs = |v: &(i64, i64, i64)| format!("v{}.{}.{}", v.0, v.1, v.2);
    let mut s = Spec {
        title: format!("Point {root}/current at the newest release"),
        goals: vec![
            format!("Releases of {app} live in `{root}/releases/`. Make `{root}/current` a symbolic link to the newest release (highest version number)."),
            format!("Switch `{app}` to its latest release: create the symlink `{root}/current` pointing at the newest directory in `{root}/releases/` by semantic version."),
        ],
        ..Default::default()
    };
    s.reqs.push(format!(
        "The link target must be the relative path `releases/<version>` (e.g. `releases/{}`).",
        vs(&versions[0])
    ));
    for v in &versions {
        let p = format!("{root}/releases/{}/bin/{app}", vs(v));
        let body = format!("#!/bin/bash\necho \"{app} {}\"\n", vs(v));
        s.setup.file_mode(&p, &body, 0o755);
        s.initial.push(Check::File(p));
    }
    let old = versions.iter().min().copied().unwrap_or(latest);
    s.setup
        .raw(format!("ln -sfn releases/{} {root}/current", vs(&old)));
    s.checks.push(Check::Symlink(
        format!("{root}/current"),
        format!("releases/{}", vs(&latest)),
    ));
    s.solve.push(format!(
        "latest=$(ls {root}/releases | sort -V | tail -n 1)\nln -sfn \"releases/$latest\" {root}/current"
    ));
    if c >= 3 {
        let link = home(&format!("bin/{app}"));
        let target = format!("{root}/current/bin/{app}");
        s.reqs.push(format!("Also make `{link}` a symlink with the absolute target `{target}` (create `~/bin` if needed)."));
        s.checks.push(Check::Symlink(link.clone(), target.clone()));
        s.solve
            .push(format!("mkdir -p /home/user/bin\nln -sfn {target} {link}"));
    }
    if c >= 5 {
        let prev = versions
            .iter()
            .filter(|v| **v < latest)
            .max()
            .copied()
            .unwrap_or(old);
        s.reqs.push(format!("Keep a rollback link `{root}/previous` pointing at the second-newest release (relative target, like `current`)."));
        s.checks.push(Check::Symlink(
            format!("{root}/previous"),
            format!("releases/{}", vs(&prev)),
        ));
        s.solve.push(format!(
            "prev=$(ls {root}/releases | sort -V | tail -n 2 | head -n 1)\nln -sfn \"releases/$prev\" {root}/previous"
        ));
    }
    s
}

fn symlink_repair(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    let dir = home(rng.pick(&["links", "shortcuts", "quick"]));
    let targets_dir = home("documents");
    let out = home("broken_links.txt");
    let mut s = Spec {
        title: format!("Remove dangling symlinks from {dir}"),
        goals: vec![
            format!("Some of the shortcuts in `{dir}` point at files that no longer exist. Delete those broken symbolic links (and only those), and write their names, sorted, one per line, to `{out}`."),
            format!("Please audit the symlinks in `{dir}`: remove every dangling one, keep the working ones, and list the removed link names (just the names, sorted) in `{out}`."),
        ],
        output: Some(out.clone()),
        ..Default::default()
    };
    let names = distinct(rng, 4 + c as usize, file_stem);
    let mut broken = Vec::new();
    for (i, n) in names.iter().enumerate() {
        let target = format!("{targets_dir}/{n}.txt");
        let link = format!("{dir}/{n}");
        if i % 2 == 0 || i == 1 {
            let body = format!("{}\n", data::prose(rng, 1));
            s.setup.file(&target, &body);
            s.checks.push(Check::Symlink(link.clone(), target.clone()));
        } else {
            broken.push(n.clone());
            s.checks.push(Check::Absent(link.clone()));
        }
        s.setup.raw(format!(
            "mkdir -p {dir} && ln -s {} {}",
            sq(&target),
            sq(&link)
        ));
        s.initial.push(Check::Symlink(link, target));
    }
    let keep_file = format!("{dir}/README");
    s.setup
        .file(&keep_file, "Shortcuts to frequently used documents.\n");
    s.checks.push(Check::File(keep_file));
    broken.sort();
    s.checks.push(Check::Lines(out.clone(), broken));
    s.solve.push(format!(
        "find {dir} -maxdepth 1 -xtype l -printf '%f\\n' | LC_ALL=C sort > {out}"
    ));
    s.solve
        .push(format!("find {dir} -maxdepth 1 -xtype l -delete"));
    s
}
