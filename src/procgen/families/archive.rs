//! Backup and archiving, compression and checksum verification.

use rand_chacha::ChaCha8Rng;
use sha2::{Digest, Sha256};

use crate::procgen::data::{self, distinct, text, NOUNS, PROJECTS, SERVICES};
use crate::procgen::pytest::Check;
use crate::procgen::spec::{Def, Spec};
use crate::procgen::util::home;
use crate::procgen::util::{sq, Pick};

pub(crate) const FAMILIES: &[Def] = &[
    Def {
        name: "tar-backup-exclude",
        category: "backup-archiving",
        tools: &[],
        build: tar_backup,
    },
    Def {
        name: "extract-archive-subset",
        category: "backup-archiving",
        tools: &[],
        build: extract_subset,
    },
    Def {
        name: "compress-old-logs",
        category: "compression",
        tools: &[],
        build: compress_logs,
    },
    Def {
        name: "zip-and-xz-bundle",
        category: "compression",
        tools: &[],
        build: zip_xz,
    },
    Def {
        name: "verify-checksums",
        category: "checksums",
        tools: &[],
        build: verify_checksums,
    },
    Def {
        name: "checksum-manifest",
        category: "checksums",
        tools: &[],
        build: make_manifest,
    },
];

fn sha256_hex(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

/// A small project tree: (relative path, content) pairs.
fn project_tree(rng: &mut ChaCha8Rng, n: usize) -> Vec<(String, String)> {
    let dirs = ["src", "docs", "config", "src/lib", "data"];
    let mut out: Vec<(String, String)> = Vec::new();
    while out.len() < n {
        let d = dirs[out.len() % dirs.len()];
        let ext = match d {
            "docs" => "md",
            "config" => "yaml",
            "data" => "csv",
            _ => "py",
        };
        let p = format!("{d}/{}_{}.{ext}", rng.pick(NOUNS), rng.int(1, 99));
        if out.iter().any(|(q, _)| q == &p) {
            continue;
        }
        out.push((p, format!("{}\n", data::prose(rng, 2))));
    }
    out
}

fn tar_backup(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    let name = rng.pick(PROJECTS);
    let proj = home(name);
    let out = home(&format!("backups/{name}-backup.tar.gz"));
    let files = project_tree(rng, 4 + c as usize);
    let mut s = Spec {
        title: format!("Back up {proj} without logs"),
        goals: vec![
            format!("Create a gzip-compressed tar backup of `{proj}` at `{out}`, leaving out every `*.log` file."),
            format!("Before I reorganise `{proj}`, I want a `.tar.gz` snapshot of it at `{out}` - but skip the `.log` files, they're huge."),
        ],
        output: Some(out.clone()),
        ..Default::default()
    };
    s.reqs.push(format!("Paths inside the archive must start with `{name}/` (archive it from `/home/user`, e.g. `{name}/{}`).", files[0].0));
    let skip_tmp = c >= 3;
    if skip_tmp {
        s.reqs.push(format!(
            "Also leave out the `{name}/tmp/` directory entirely."
        ));
    }
    s.reqs
        .push("The original directory must stay untouched.".into());
    let mut members = Vec::new();
    for (p, body) in &files {
        s.setup.file(&format!("{proj}/{p}"), body);
        members.push(format!("{name}/{p}"));
    }
    for i in 0..2 {
        let l = format!("{proj}/logs/{}-{i}.log", rng.pick(SERVICES));
        s.setup.file(
            &l,
            &format!("{}\n", data::log_lines(rng, 1, 40, SERVICES)[0].render()),
        );
        s.initial.push(Check::File(l));
    }
    let tmpf = format!("{name}/tmp/scratch_{}.txt", rng.int(1, 9));
    s.setup.file(&home(&tmpf), "scratch\n");
    if !skip_tmp {
        members.push(tmpf);
    }
    s.checks.push(Check::TarMembers(out.clone(), members));
    s.checks.push(Check::File(format!("{proj}/{}", files[0].0)));
    s.initial.push(Check::Absent(out.clone()));
    let ex = if skip_tmp {
        format!(" --exclude={}", sq(&format!("{name}/tmp")))
    } else {
        String::new()
    };
    s.solve.push(format!("mkdir -p {}", home("backups")));
    s.solve.push(format!(
        "tar -czf {out} --exclude='*.log'{ex} -C /home/user {name}"
    ));
    s.near_miss = Some(vec![
        s.solve[0].clone(),
        format!("tar -czf {out}{ex} -C /home/user {name}"),
    ]);
    s
}

fn extract_subset(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    let arch = home(rng.pick(&[
        "incoming/export.tar.gz",
        "downloads/dataset.tar.gz",
        "inbox/bundle.tar.gz",
    ]));
    let dest = home(rng.pick(&["extracted", "restore", "unpacked"]));
    let want = rng.pick(&["csv", "json", "md"]);
    let mut s = Spec {
        title: format!("Extract only the .{want} files from {arch}"),
        goals: vec![
            format!("From the archive `{arch}`, extract only the `.{want}` files into `{dest}`, keeping their paths from the archive."),
            format!("I only need the `*.{want}` files out of `{arch}`. Unpack just those into `{dest}` (directory structure preserved)."),
        ],
        ..Default::default()
    };
    s.reqs.push("No other files from the archive should appear in the destination. Keep the archive itself.".into());
    let top = rng.pick(&["export", "dataset", "bundle"]);
    let stage = format!("/tmp/stage-{}", rng.int(1000, 9999));
    let exts = ["csv", "json", "md", "log", "bin"];
    let mut any = false;
    for i in 0..(5 + 2 * c as usize) {
        let e = if i == 0 {
            want
        } else {
            exts[rng.int(0, 4) as usize]
        };
        let sub = ["", "/part1", "/part2/nested"][i % if c >= 3 { 3 } else { 1 }];
        let rel = format!("{top}{sub}/{}_{i}.{e}", rng.pick(NOUNS));
        let body = format!("{}\n", data::prose(rng, 1));
        s.setup.file(&format!("{stage}/{rel}"), &body);
        let target = format!("{dest}/{rel}");
        if e == want {
            any = true;
            s.checks.push(Check::Content(target, body));
        } else {
            s.checks.push(Check::Absent(target));
        }
    }
    let _ = any;
    s.setup.raw(format!(
        "mkdir -p {} && tar -czf {} -C {stage} {top} && rm -rf {stage}",
        sq(crate::procgen::util::parent(&arch)),
        sq(&arch)
    ));
    s.initial.push(Check::File(arch.clone()));
    s.checks.push(Check::File(arch.clone()));
    s.solve.push(format!("mkdir -p {dest}"));
    s.solve
        .push(format!("tar -xzf {arch} -C {dest} --wildcards '*.{want}'"));
    s.near_miss = Some(vec![
        s.solve[0].clone(),
        format!("tar -xzf {arch} -C {dest}"),
    ]);
    s
}

fn compress_logs(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    let dir = home(rng.pick(&["logs", "var/log/app", "service/logs"]));
    let svc = rng.pick(SERVICES);
    let days: Vec<i64> = {
        let start = rng.int(50, 200);
        (0..(4 + c as i64)).map(|k| start + k).collect()
    };
    let keep = if c >= 3 { 2 } else { 1 };
    let cutoff = data::date_of(days[days.len() - keep]);
    let mut s = Spec {
        title: format!("Compress {svc} logs older than {cutoff}"),
        goals: vec![
            format!("`{dir}` has one log per day named `{svc}-YYYY-MM-DD.log`. Compress every log dated before `{cutoff}` with gzip (replacing the original by `<name>.gz`); leave the newer ones as they are."),
            format!("Disk is filling up: gzip the daily logs in `{dir}` whose date (in the file name) is earlier than `{cutoff}`, so that `{svc}-2024-..-...log` becomes `{svc}-2024-..-...log.gz`. Logs from `{cutoff}` on stay uncompressed."),
        ],
        ..Default::default()
    };
    s.reqs
        .push("The compressed files must decompress to exactly the original content.".into());
    for d in &days {
        let date = data::date_of(*d);
        let path = format!("{dir}/{svc}-{date}.log");
        let lines: Vec<String> = data::log_lines(rng, 5 + c as usize, *d, &[svc])
            .iter()
            .map(|l| l.render())
            .collect();
        let body = text(&lines);
        s.setup.file(&path, &body);
        s.initial.push(Check::Content(path.clone(), body.clone()));
        if date < cutoff {
            s.checks.push(Check::Gzip(format!("{path}.gz"), body));
            s.checks.push(Check::Absent(path));
        } else {
            s.checks.push(Check::Content(path.clone(), body));
            s.checks.push(Check::Absent(format!("{path}.gz")));
        }
    }
    s.solve.push(format!(
        "for f in {dir}/{svc}-*.log; do\n  d=$(basename \"$f\" .log); d=${{d#{svc}-}}\n  if [[ \"$d\" < {cutoff} ]]; then gzip \"$f\"; fi\ndone"
    ));
    s.near_miss = Some(vec![format!(
        "for f in {dir}/{svc}-*.log; do\n  d=$(basename \"$f\" .log); d=${{d#{svc}-}}\n  if [[ \"$d\" < {cutoff} ]]; then gzip -k \"$f\"; fi\ndone"
    )]);
    s
}

fn zip_xz(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    let rep = home(rng.pick(&["reports", "deliverables", "handover"]));
    let zip = home(&format!("{}.zip", crate::procgen::util::base(&rep)));
    let mut s = Spec {
        title: format!("Zip the Markdown files of {rep}"),
        goals: vec![
            format!("Bundle every `.md` file directly inside `{rep}` into a zip archive `{zip}`; the entries should be the bare file names (no directories)."),
            format!("Please create `{zip}` containing just the Markdown files from `{rep}`, stored at the top level of the zip."),
        ],
        ..Default::default()
    };
    let names = distinct(rng, 3 + c as usize / 2, |r| {
        format!("{}_{}", r.pick(NOUNS), r.int(1, 50))
    });
    let mut members = Vec::new();
    for (i, n) in names.iter().enumerate() {
        let ext = if i == 0 { "txt" } else { "md" };
        s.setup.file(
            &format!("{rep}/{n}.{ext}"),
            &format!("# {n}\n\n{}\n", data::prose(rng, 2)),
        );
        if ext == "md" {
            members.push(format!("{n}.md"));
        }
    }
    s.checks.push(Check::ZipMembers(zip.clone(), members));
    s.initial.push(Check::Absent(zip.clone()));
    s.solve.push(format!("cd {rep} && zip -q {zip} *.md"));
    if c >= 3 {
        let big = home(&format!(
            "data/{}.csv",
            rng.pick(&["events", "metrics", "clicks"])
        ));
        let mut rows = vec!["ts,user,value".to_string()];
        for k in 0..(40 + 10 * c as i64) {
            rows.push(format!(
                "{},{},{}",
                data::timestamp(86_400 * 90 + 37 * k),
                data::user(rng),
                rng.int(0, 999)
            ));
        }
        let body = text(&rows);
        s.setup.file(&big, &body);
        s.reqs.push(format!(
            "Also compress `{big}` with xz into `{big}.xz`, keeping the original file."
        ));
        s.checks.push(Check::Xz(format!("{big}.xz"), body.clone()));
        s.checks.push(Check::Content(big.clone(), body));
        s.solve.push(format!("xz -k {big}"));
    }
    s.near_miss = if c >= 3 {
        Some(vec![s.solve[0].clone(), s.solve[1].replace("xz -k", "xz")])
    } else {
        Some(vec![format!("cd /home/user && zip -q {zip} {rep}/*.md")])
    };
    s
}

fn verify_checksums(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    let dir = home(rng.pick(&["downloads/release", "mirror/files", "transfer/batch"]));
    let out = home(rng.pick(&["corrupted.txt", "bad_files.txt", "checksum_failures.txt"]));
    let n = 5 + 2 * c as usize;
    let names = distinct(rng, n, |r| {
        format!(
            "{}-{}.{}",
            r.pick(NOUNS),
            r.int(1, 99),
            r.pick(&["dat", "bin", "txt", "csv"])
        )
    });
    let mut s = Spec {
        title: format!("Find files in {dir} that fail their SHA-256 check"),
        goals: vec![
            format!("`{dir}/SHA256SUMS` lists the expected checksums of the files in `{dir}`. Some files were corrupted in transfer: write the names of the files that do not match, one per line, sorted, to `{out}`."),
            format!("Verify the downloads in `{dir}` against `{dir}/SHA256SUMS` and list the names of the broken files (sorted, one per line) in `{out}`."),
        ],
        output: Some(out.clone()),
        ..Default::default()
    };
    s.reqs
        .push("List only file names as they appear in SHA256SUMS. Don't modify the files.".into());
    let mut sums = Vec::new();
    let mut bad = Vec::new();
    for (i, nme) in names.iter().enumerate() {
        let body = format!("{}\n", data::prose(rng, 2));
        sums.push(format!("{}  {nme}", sha256_hex(&body)));
        let corrupt = i == 1 || (i > 1 && rng.chance(0.3));
        let actual = if corrupt {
            body.replacen(' ', "_", 1) + "\n"
        } else {
            body
        };
        if corrupt {
            bad.push(nme.clone());
        }
        s.setup.file(&format!("{dir}/{nme}"), &actual);
        s.initial
            .push(Check::Content(format!("{dir}/{nme}"), actual));
    }
    s.setup.file(&format!("{dir}/SHA256SUMS"), &text(&sums));
    bad.sort();
    s.checks.push(Check::Lines(out.clone(), bad));
    s.solve.push(format!(
        "cd {dir} && sha256sum -c SHA256SUMS 2>/dev/null | grep ': FAILED$' | sed 's/: FAILED$//' | LC_ALL=C sort > {out}"
    ));
    s.near_miss = Some(vec![format!(
        "cd {dir} && sha256sum -c SHA256SUMS 2>/dev/null | grep ': FAILED$' | sed 's/: FAILED$//' | LC_ALL=C sort | head -n -1 > {out}"
    )]);
    s
}

fn make_manifest(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    let name = rng.pick(PROJECTS);
    let dir = home(&format!("dist/{name}"));
    let out = home(&format!("dist/{name}.sha256"));
    let files = project_tree(rng, 3 + c as usize);
    let mut s = Spec {
        title: format!("Write a SHA-256 manifest for {dir}"),
        goals: vec![
            format!("Create a checksum manifest `{out}` covering every file under `{dir}` (recursively), in `sha256sum` format."),
            format!("I'm publishing `{dir}`. Please write `{out}` with the SHA-256 of each file below it, so users can run `sha256sum -c`."),
        ],
        output: Some(out.clone()),
        ..Default::default()
    };
    s.reqs.push(format!("Paths are relative to `{dir}` without a leading `./` (e.g. `{}`), lines sorted by path in byte order, each `<hash>  <path>`.", files[0].0));
    let mut lines = Vec::new();
    for (p, body) in &files {
        s.setup.file(&format!("{dir}/{p}"), body);
        s.initial
            .push(Check::Content(format!("{dir}/{p}"), body.clone()));
        lines.push((p.clone(), format!("{}  {p}", sha256_hex(body))));
    }
    lines.sort();
    s.checks.push(Check::Lines(
        out.clone(),
        lines.into_iter().map(|l| l.1).collect(),
    ));
    s.solve.push(format!(
        "cd {dir} && find . -type f | sed 's|^\\./||' | LC_ALL=C sort | xargs sha256sum > {out}"
    ));
    s.near_miss = Some(vec![format!(
        "cd {dir} && find . -type f | LC_ALL=C sort | xargs sha256sum > {out}"
    )]);
    s
}
