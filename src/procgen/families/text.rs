//! Text processing, awk/sed and sort/uniq frequency counting.

use rand_chacha::ChaCha8Rng;

use crate::procgen::data::{self, distinct, text, CITIES, PRODUCTS, PROJECTS};
use crate::procgen::pytest::Check;
use crate::procgen::spec::{Def, Spec};
use crate::procgen::util::home;
use crate::procgen::util::{sq, Pick};

pub(crate) const FAMILIES: &[Def] = &[
    Def {
        name: "todo-extract",
        category: "text-processing",
        tools: &[],
        build: todo_extract,
    },
    Def {
        name: "dedupe-lines",
        category: "text-processing",
        tools: &[],
        build: dedupe_lines,
    },
    Def {
        name: "word-frequency",
        category: "text-processing",
        tools: &[],
        build: word_frequency,
    },
    Def {
        name: "sed-date-format",
        category: "awk-sed",
        tools: &[],
        build: sed_date_format,
    },
    Def {
        name: "awk-group-sum",
        category: "awk-sed",
        tools: &[],
        build: awk_group_sum,
    },
    Def {
        name: "top-client-ips",
        category: "sort-uniq",
        tools: &[],
        build: top_ips,
    },
];

fn todo_extract(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    let root = home(&format!("code/{}", rng.pick(PROJECTS)));
    let marker = if c >= 3 {
        rng.pick(&["FIXME", "TODO", "XXX"])
    } else {
        "TODO"
    };
    let out = home(rng.pick(&["todo_report.txt", "open_items.txt", "todos.txt"]));
    let mut s = Spec {
        title: format!("Collect {marker} comments from {root}"),
        goals: vec![
            format!("Gather every line containing `{marker}` from the `.py` files directly inside `{root}` into `{out}`."),
            format!("I want a list of all `{marker}` markers in the Python files of `{root}` (top level only), written to `{out}`."),
        ],
        output: Some(out.clone()),
        ..Default::default()
    };
    s.reqs.push("Each output line has the form `<file name>:<line number>:<the full original line>` (what `grep -n` prints when run inside the directory).".into());
    s.reqs
        .push("Sort by file name, then by line number (numerically).".into());
    let files = distinct(rng, 2 + c as usize, |r| {
        format!(
            "{}.py",
            r.pick(&[
                "api", "models", "utils", "views", "cli", "db", "auth", "jobs", "forms", "tasks"
            ])
        )
    });
    let mut hits: Vec<(String, usize, String)> = Vec::new();
    let others: Vec<&str> = ["TODO", "FIXME", "XXX", "NOTE"]
        .into_iter()
        .filter(|m| *m != marker)
        .collect();
    for f in &files {
        let mut lines = vec![
            format!("\"\"\"{} module.\"\"\"", f.trim_end_matches(".py")),
            String::new(),
        ];
        for j in 0..rng.int(4, 9) {
            lines.push(format!(
                "def {}_{j}(x):",
                rng.pick(&["load", "save", "parse", "check", "render"])
            ));
            let roll = if hits.is_empty() && j == 0 {
                0
            } else {
                rng.int(0, 5)
            };
            if roll <= 1 {
                let who = rng.pick(data::FIRST);
                lines.push(format!(
                    "    # {marker}({who}): {}",
                    rng.pick(&[
                        "handle empty input",
                        "add retries",
                        "remove this hack",
                        "cache the result",
                        "validate types"
                    ])
                ));
                hits.push((f.clone(), lines.len(), lines[lines.len() - 1].clone()));
            } else if roll == 2 {
                lines.push(format!(
                    "    # {}: {}",
                    rng.pick(&others),
                    rng.pick(&["slow path", "see ticket"])
                ));
            }
            lines.push(format!("    return x * {}", rng.int(2, 9)));
            lines.push(String::new());
        }
        let body = text(&lines);
        s.setup.file(&format!("{root}/{f}"), &body);
        s.initial.push(Check::Content(format!("{root}/{f}"), body));
    }
    // A decoy in a nested directory (not top level) and a non-Python file.
    s.setup.file(
        &format!("{root}/vendor/lib.py"),
        &format!("# {marker}: upstream issue\n"),
    );
    s.setup.file(
        &format!("{root}/NOTES.md"),
        &format!("{marker}: write docs\n"),
    );
    s.solve.push(format!(
        "cd {root}\ngrep -Hn {} *.py | LC_ALL=C sort -t: -k1,1 -k2,2n > {out}",
        sq(marker)
    ));
    hits.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
    let lines: Vec<String> = hits
        .iter()
        .map(|(f, n, l)| format!("{f}:{n}:{l}"))
        .collect();
    s.checks.push(Check::Lines(out.clone(), lines));
    s.near_miss = Some(vec![format!("cd {root}\ngrep -n {} *.py > {out}.unsorted\ngrep -rn {} . | sed 's|^\\./||' | LC_ALL=C sort -t: -k1,1 -k2,2n > {out}", sq(marker), sq(marker))]);
    s
}

fn dedupe_lines(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    let src = home(rng.pick(&[
        "contacts/emails.txt",
        "lists/subscribers.txt",
        "exports/recipients.txt",
    ]));
    let out = home(rng.pick(&["contacts/unique.txt", "unique_emails.txt", "clean_list.txt"]));
    let fold = c >= 3;
    let mut s = Spec {
        title: format!("Deduplicate {src}"),
        goals: vec![
            format!("`{src}` has many repeated addresses. Write a deduplicated copy to `{out}`, keeping the first occurrence of each line and the original order."),
            format!("Remove duplicate lines from `{src}` (keep only the first time each appears, same order) and save the result as `{out}`. Don't change the original file."),
        ],
        output: Some(out.clone()),
        ..Default::default()
    };
    if fold {
        s.reqs.push(
            "Addresses are case-insensitive: lowercase every line first, then deduplicate.".into(),
        );
    }
    let pool = distinct(rng, 4 + 2 * c as usize, |r| {
        format!("{}@{}.example.com", data::user(r), r.pick(CITIES))
    });
    let mut lines = Vec::new();
    for _ in 0..(pool.len() * 2 + 3) {
        let mut l = rng.pick(&pool);
        if fold && rng.chance(0.3) {
            l = l.to_uppercase();
        }
        lines.push(l);
    }
    let mut uniq: Vec<String> = Vec::new();
    for l in &lines {
        let k = if fold { l.to_lowercase() } else { l.clone() };
        if !uniq.contains(&k) {
            uniq.push(k);
        }
    }
    let body = text(&lines);
    s.setup.file(&src, &body);
    s.initial.push(Check::Content(src.clone(), body.clone()));
    s.checks.push(Check::Content(src.clone(), body));
    s.checks.push(Check::Lines(out.clone(), uniq));
    let prog = if fold {
        "{ $0 = tolower($0) } !seen[$0]++"
    } else {
        "!seen[$0]++"
    };
    s.solve.push(format!(
        "mkdir -p {}\nawk {} {src} > {out}",
        sq(crate::procgen::util::parent(&out)),
        sq(prog)
    ));
    s.near_miss = Some(vec![format!(
        "mkdir -p {}\nsort -u {src} > {out}",
        sq(crate::procgen::util::parent(&out))
    )]);
    s
}

fn word_frequency(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    let src = home(rng.pick(&[
        "corpus/speech.txt",
        "docs/transcript.txt",
        "notes/meeting.txt",
    ]));
    let out = home(rng.pick(&["word_counts.txt", "top_words.txt", "frequency.txt"]));
    let top = 3 + c as usize;
    let words = distinct(rng, top + 4, |r| {
        r.pick(&[
            "alpha", "budget", "cloud", "delta", "engine", "forest", "garden", "harbor", "island",
            "jungle", "kernel", "ledger", "market", "network", "orbit", "planet", "quarry",
            "river", "signal", "timber", "update", "valley", "window",
        ])
        .to_string()
    });
    // Strictly decreasing counts so the ranking is unambiguous.
    let mut counts = Vec::new();
    let mut cur = rng.int(30, 40);
    for _ in &words {
        counts.push(cur);
        cur -= rng.int(1, 3);
    }
    let mut bag: Vec<String> = Vec::new();
    for (w, n) in words.iter().zip(&counts) {
        for _ in 0..*n {
            bag.push(w.clone());
        }
    }
    rng.shuffle_vec(&mut bag);
    let lines: Vec<String> = bag.chunks(9).map(|ch| ch.join(" ")).collect();
    s_word_freq(src, out, top, lines, words, counts)
}

fn s_word_freq(
    src: String,
    out: String,
    top: usize,
    lines: Vec<String>,
    words: Vec<String>,
    counts: Vec<i64>,
) -> Spec {
    let mut s = Spec {
        title: format!("Top {top} words of {src}"),
        goals: vec![
            format!("Count how often each word occurs in `{src}` (words are separated by spaces and newlines) and write the {top} most frequent to `{out}`."),
            format!("Which {top} words appear most often in `{src}`? Put the answer in `{out}`."),
        ],
        output: Some(out.clone()),
        ..Default::default()
    };
    s.reqs.push(
        "One line per word, formatted `<count> <word>` (a single space), most frequent first."
            .into(),
    );
    let body = text(&lines);
    s.setup.file(&src, &body);
    s.initial.push(Check::Content(src.clone(), body));
    let expected: Vec<String> = words
        .iter()
        .zip(&counts)
        .take(top)
        .map(|(w, n)| format!("{n} {w}"))
        .collect();
    s.checks.push(Check::Lines(out.clone(), expected));
    s.solve.push(format!(
        "tr -s ' ' '\\n' < {src} | grep -v '^$' | sort | uniq -c | sort -k1,1nr -k2,2 | head -n {top} | awk '{{print $1\" \"$2}}' > {out}"
    ));
    s.near_miss = Some(vec![format!(
        "tr -s ' ' '\\n' < {src} | grep -v '^$' | sort | uniq -c | sort -k1,1nr -k2,2 | head -n {} | awk '{{print $1\" \"$2}}' > {out}",
        top - 1
    )]);
    s
}

fn sed_date_format(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    let path = home(rng.pick(&[
        "finance/payments.txt",
        "records/shipments.txt",
        "hr/leave_log.txt",
    ]));
    let keep_orig = c >= 3;
    let mut s = Spec {
        title: format!("Convert ISO dates to DD/MM/YYYY in {path}"),
        goals: vec![
            format!("Our accounting tool wants dates as `DD/MM/YYYY`. Rewrite every `YYYY-MM-DD` date in `{path}` to that format, in place."),
            format!("Please change all dates in `{path}` from ISO format (`2024-03-07`) to day/month/year (`07/03/2024`), editing the file in place."),
        ],
        output: Some(path.clone()),
        ..Default::default()
    };
    s.reqs
        .push("Everything else on each line must stay exactly as it is.".into());
    let mut lines = Vec::new();
    let mut conv = Vec::new();
    for _ in 0..(5 + 2 * c as usize) {
        let d = data::date_of(rng.int(0, 360));
        let d2 = data::date_of(rng.int(0, 360));
        let inv = rng.int(1000, 9999);
        let amt = format!("{}.{:02}", rng.int(10, 5000), rng.int(0, 99));
        let tpl = rng.int(0, 2);
        let l = match tpl {
            0 => format!("{d} INV-{inv} {} paid {amt}", rng.pick(PRODUCTS)),
            1 => format!("ref {inv}-{} booked {d}, due {d2}", rng.int(10, 99)),
            _ => format!("{d};{};{amt};EUR", rng.pick(CITIES)),
        };
        let f = |x: &str| format!("{}/{}/{}", &x[8..10], &x[5..7], &x[0..4]);
        conv.push(l.replace(&d, &f(&d)).replace(&d2, &f(&d2)));
        lines.push(l);
    }
    let body = text(&lines);
    s.setup.file(&path, &body);
    s.initial.push(Check::Content(path.clone(), body.clone()));
    s.checks.push(Check::Lines(path.clone(), conv));
    let sed = "s/([0-9]{4})-([0-9]{2})-([0-9]{2})/\\3\\/\\2\\/\\1/g";
    if keep_orig {
        let orig = format!("{path}.orig");
        s.reqs
            .push(format!("Keep the untouched original as `{orig}`."));
        s.checks.push(Check::Content(orig, body));
        s.solve.push(format!("cp {path} {path}.orig"));
    }
    s.solve.push(format!("sed -i -E '{sed}' {path}"));
    s.near_miss = Some(
        s.solve
            .iter()
            .map(|st| st.replace("\\3\\/\\2\\/\\1", "\\2\\/\\3\\/\\1"))
            .collect(),
    );
    s
}

fn awk_group_sum(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    let src = home(rng.pick(&[
        "sales/q3.csv",
        "reports/orders.csv",
        "data/transactions.csv",
    ]));
    let out = home(rng.pick(&["region_totals.csv", "totals_by_region.csv", "summary.csv"]));
    let regions = rng.sample(
        &["north", "south", "east", "west", "central", "coastal"],
        2 + (c as usize).min(4),
    );
    let mut s = Spec {
        title: format!("Sum amounts per region in {src}"),
        goals: vec![
            format!("From `{src}`, compute the total `amount` for each `region` and write it to `{out}`."),
            format!("I need per-region revenue totals from `{src}` in `{out}` (awk is perfect for this)."),
        ],
        output: Some(out.clone()),
        ..Default::default()
    };
    s.reqs.push("Output is CSV with the header `region,total`, one row per region, regions sorted alphabetically, totals with exactly two decimals (e.g. `1234.50`).".into());
    let status_filter = c >= 3;
    if status_filter {
        s.reqs
            .push("Only count rows whose `status` is `paid`.".into());
    }
    let mut rows = vec!["id,date,region,product,amount,status".to_string()];
    let mut totals: Vec<(String, i64)> = regions.iter().map(|r| (r.to_string(), 0)).collect();
    let mut used = vec![false; regions.len()];
    for i in 0..(8 + 4 * c as usize) {
        let ri = rng.int(0, regions.len() as i64 - 1) as usize;
        let cents = rng.int(500, 250_000);
        let status = rng.pick(&["paid", "paid", "paid", "refunded", "pending"]);
        used[ri] = true;
        if !status_filter || status == "paid" {
            totals[ri].1 += cents;
        }
        rows.push(format!(
            "{},{},{},{},{}.{:02},{status}",
            1000 + i,
            data::date_of(rng.int(180, 270)),
            regions[ri],
            rng.pick(PRODUCTS),
            cents / 100,
            cents % 100
        ));
    }
    let mut totals: Vec<(String, i64)> = totals
        .into_iter()
        .zip(used)
        .filter(|(_, u)| *u)
        .map(|(t, _)| t)
        .collect();
    totals.sort();
    let body = text(&rows);
    s.setup.file(&src, &body);
    s.initial.push(Check::Content(src.clone(), body));
    let mut expected = vec!["region,total".to_string()];
    for (r, t) in &totals {
        expected.push(format!("{r},{}.{:02}", t / 100, t % 100));
    }
    s.checks.push(Check::Lines(out.clone(), expected));
    let cond = if status_filter {
        " && $6 == \"paid\""
    } else {
        ""
    };
    s.solve.push(format!(
        "{{ echo 'region,total'; awk -F, 'NR > 1{cond} {{ t[$3] += $5 }} END {{ for (r in t) printf \"%s,%.2f\\n\", r, t[r] }}' {src} | LC_ALL=C sort; }} > {out}"
    ));
    // Regions without paid rows must still appear (with 0.00) when filtering.
    if status_filter {
        s.solve[0] = format!(
            "{{ echo 'region,total'; awk -F, 'NR > 1 {{ t[$3] += 0 }} NR > 1{cond} {{ t[$3] += $5 }} END {{ for (r in t) printf \"%s,%.2f\\n\", r, t[r] }}' {src} | LC_ALL=C sort; }} > {out}"
        );
        s.reqs
            .push("Regions with no paid rows still get a row with `0.00`.".into());
        s.near_miss = Some(vec![format!(
            "{{ echo 'region,total'; awk -F, 'NR > 1 {{ t[$3] += $5 }} END {{ for (r in t) printf \"%s,%.2f\\n\", r, t[r] }}' {src} | LC_ALL=C sort; }} > {out}"
        )]);
    } else {
        s.near_miss = Some(vec![format!(
            "{{ echo 'region,total'; awk -F, 'NR > 2 {{ t[$3] += $5 }} END {{ for (r in t) printf \"%s,%.2f\\n\", r, t[r] }}' {src} | LC_ALL=C sort; }} > {out}"
        )]);
    }
    s
}

fn top_ips(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    let log = home(rng.pick(&["logs/access.log", "nginx/access.log", "web/access_log"]));
    let out = home(rng.pick(&["top_ips.txt", "heavy_hitters.txt", "ip_report.txt"]));
    let top = 2 + c as usize / 2;
    let ips = distinct(rng, top + 3, data::ip);
    let mut counts = Vec::new();
    let mut cur = rng.int(25, 35);
    for _ in &ips {
        counts.push(cur);
        cur -= rng.int(1, 4);
    }
    let only_errors = c >= 4;
    let mut reqs: Vec<(String, bool)> = Vec::new();
    for (ip, n) in ips.iter().zip(&counts) {
        for _ in 0..*n {
            reqs.push((ip.clone(), true));
        }
    }
    rng.shuffle_vec(&mut reqs);
    let mut lines = Vec::new();
    let mut err_counts: Vec<(String, i64)> = ips.iter().map(|i| (i.clone(), 0)).collect();
    for (k, (ip, _)) in reqs.iter().enumerate() {
        let status = rng.pick(&[200, 200, 200, 301, 404, 500, 503]);
        if status >= 500 {
            if let Some(e) = err_counts.iter_mut().find(|e| &e.0 == ip) {
                e.1 += 1;
            }
        }
        let secs = 86_400 * 200 + 3600 * 9 + k as i64 * 7;
        let ts = data::timestamp(secs);
        lines.push(format!(
            "{ip} - - [{}] \"GET /{}/{} HTTP/1.1\" {status} {} \"-\" \"curl/8.5.0\"",
            ts,
            rng.pick(&["api", "static", "login", "search"]),
            rng.int(1, 500),
            rng.int(120, 9000)
        ));
    }
    let mut s = Spec {
        title: format!("Top client IPs in {log}"),
        goals: vec![
            format!("Find the {top} client IP addresses that made the most requests{} in `{log}` and write them to `{out}`.", if only_errors { " answered with a 5xx status" } else { "" }),
            format!("Who is hammering the server? Rank client IPs in `{log}` by number of requests{} and save the top {top} to `{out}`.", if only_errors { " that got a 5xx error" } else { "" }),
        ],
        output: Some(out.clone()),
        ..Default::default()
    };
    s.reqs.push("Format each line as `<count> <ip>`, highest count first; break ties by IP in plain byte order.".into());
    let body = text(&lines);
    s.setup.file(&log, &body);
    s.initial.push(Check::Content(log.clone(), body));
    let mut ranked: Vec<(i64, String)> = if only_errors {
        err_counts
            .iter()
            .filter(|e| e.1 > 0)
            .map(|e| (e.1, e.0.clone()))
            .collect()
    } else {
        ips.iter()
            .zip(&counts)
            .map(|(i, n)| (*n, i.clone()))
            .collect()
    };
    ranked.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let expected: Vec<String> = ranked
        .iter()
        .take(top)
        .map(|(n, i)| format!("{n} {i}"))
        .collect();
    s.checks.push(Check::Lines(out.clone(), expected));
    let filt = if only_errors { "$9 >= 500 " } else { "" };
    s.solve.push(format!(
        "awk '{filt}{{print $1}}' {log} | LC_ALL=C sort | uniq -c | LC_ALL=C sort -k1,1nr -k2,2 | head -n {top} | awk '{{print $1\" \"$2}}' > {out}"
    ));
    s.near_miss = Some(vec![format!(
        "awk '{{print $1}}' {log} | LC_ALL=C sort | uniq -c | LC_ALL=C sort -k1,1n -k2,2 | head -n {top} | awk '{{print $1\" \"$2}}' > {out}"
    )]);
    s
}
