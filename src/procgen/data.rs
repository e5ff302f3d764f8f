//! Realistic-looking building blocks: names, words, services, hosts, dates,
//! log lines and CSV tables. Every function draws from the caller's RNG.

use rand_chacha::ChaCha8Rng;

use super::util::Pick;

/// First names.
pub const FIRST: &[&str] = &[
    "alice", "bruno", "chen", "dana", "emeka", "fatima", "gustav", "hana", "ines", "jonas",
    "kiran", "lena", "mateo", "nadia", "oskar", "priya", "quinn", "rosa", "sven", "tariq", "uma",
    "viktor", "wen", "ximena", "yusuf", "zoe",
];
/// Last names.
pub const LAST: &[&str] = &[
    "adams", "baker", "costa", "dubois", "eriksen", "fischer", "garcia", "haddad", "ito", "jensen",
    "kowalski", "lopez", "moreau", "novak", "okafor", "petrov", "quispe", "rossi", "sato",
    "tanaka", "urban", "varga", "weber", "yilmaz", "zhang",
];
/// Project / repository names.
pub const PROJECTS: &[&str] = &[
    "atlas", "beacon", "cobalt", "delta", "ember", "falcon", "granite", "harbor", "iris",
    "juniper", "kestrel", "lumen", "meridian", "nimbus", "onyx", "pioneer", "quartz", "redwood",
    "sierra", "tundra", "umbra", "vertex", "willow", "zephyr",
];
/// Service names as they appear in logs.
pub const SERVICES: &[&str] = &[
    "api",
    "auth",
    "billing",
    "cache",
    "cron",
    "db",
    "gateway",
    "mailer",
    "metrics",
    "payments",
    "queue",
    "scheduler",
    "search",
    "storage",
    "web",
    "worker",
];
/// Plain nouns for file names.
pub const NOUNS: &[&str] = &[
    "report",
    "invoice",
    "notes",
    "summary",
    "draft",
    "budget",
    "roadmap",
    "minutes",
    "survey",
    "inventory",
    "schedule",
    "contract",
    "proposal",
    "receipt",
    "backlog",
    "agenda",
    "memo",
    "ledger",
    "forecast",
    "checklist",
];
/// Product names for data tables.
pub const PRODUCTS: &[&str] = &[
    "widget", "gadget", "sprocket", "gizmo", "bracket", "valve", "sensor", "cable", "adapter",
    "filter", "pump", "relay", "switch", "bearing",
];
/// City names.
pub const CITIES: &[&str] = &[
    "lisbon", "oslo", "nairobi", "lima", "osaka", "denver", "krakow", "quito", "pune", "tunis",
    "hobart", "leeds",
];
/// Departments.
pub const DEPARTMENTS: &[&str] = &[
    "engineering",
    "finance",
    "marketing",
    "operations",
    "research",
    "sales",
    "support",
    "legal",
];
/// Log message templates per level.
const INFO_MSGS: &[&str] = &[
    "request completed in {n}ms",
    "connection established to {host}",
    "cache warmed with {n} entries",
    "user {user} logged in",
    "job {id} scheduled",
    "health check ok",
    "config reloaded",
];
const WARN_MSGS: &[&str] = &[
    "slow query took {n}ms",
    "retrying connection to {host} (attempt {d})",
    "disk usage at {d}0%",
    "deprecated endpoint called by {user}",
];
const ERROR_MSGS: &[&str] = &[
    "timeout after {n}ms talking to {host}",
    "failed to write record {id}: permission denied",
    "connection refused by {host}",
    "unhandled exception in handler: KeyError",
    "payment {id} declined by upstream",
];

/// A person's `first.last` handle.
pub fn user(rng: &mut ChaCha8Rng) -> String {
    format!("{}.{}", rng.pick(FIRST), rng.pick(LAST))
}

/// A private IPv4 address.
pub fn ip(rng: &mut ChaCha8Rng) -> String {
    format!(
        "10.{}.{}.{}",
        rng.int(0, 40),
        rng.int(0, 255),
        rng.int(2, 254)
    )
}

/// A host name like `db-03.internal`.
pub fn host(rng: &mut ChaCha8Rng) -> String {
    format!("{}-{:02}.internal", rng.pick(SERVICES), rng.int(1, 12))
}

/// A date `YYYY-MM-DD` in 2024 (day of year `doy`, 0-based, < 365).
pub fn date_of(doy: i64) -> String {
    const MDAYS: [i64; 12] = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    let mut d = doy.rem_euclid(366);
    for (m, len) in MDAYS.iter().enumerate() {
        if d < *len {
            return format!("2024-{:02}-{:02}", m + 1, d + 1);
        }
        d -= len;
    }
    "2024-12-31".into()
}

/// `YYYY-MM-DD HH:MM:SS` for a second offset within 2024.
pub fn timestamp(secs: i64) -> String {
    let doy = secs / 86_400;
    let s = secs % 86_400;
    format!(
        "{} {:02}:{:02}:{:02}",
        date_of(doy),
        s / 3600,
        (s / 60) % 60,
        s % 60
    )
}

/// A log level drawn with realistic weights.
pub fn level(rng: &mut ChaCha8Rng) -> &'static str {
    match rng.int(0, 99) {
        0..=59 => "INFO",
        60..=74 => "DEBUG",
        75..=89 => "WARN",
        _ => "ERROR",
    }
}

/// A message for `level`, with its placeholders filled.
pub fn message(rng: &mut ChaCha8Rng, level: &str) -> String {
    let t = match level {
        "ERROR" => rng.pick(ERROR_MSGS),
        "WARN" => rng.pick(WARN_MSGS),
        _ => rng.pick(INFO_MSGS),
    };
    let n = rng.int(3, 4800).to_string();
    let d = rng.int(1, 9).to_string();
    let id = format!("{:x}", rng.int(0x1000, 0xffff));
    let h = host(rng);
    let u = user(rng);
    t.replace("{n}", &n)
        .replace("{d}", &d)
        .replace("{id}", &id)
        .replace("{host}", &h)
        .replace("{user}", &u)
}

/// One structured log record.
#[derive(Debug, Clone)]
pub struct LogLine {
    /// `YYYY-MM-DD HH:MM:SS`.
    pub ts: String,
    /// INFO, DEBUG, WARN or ERROR.
    pub level: String,
    /// Emitting service.
    pub service: String,
    /// Free text.
    pub msg: String,
}

impl LogLine {
    /// `2024-03-01 10:00:00 [ERROR] api: message`.
    pub fn render(&self) -> String {
        format!(
            "{} [{}] {}: {}",
            self.ts, self.level, self.service, self.msg
        )
    }
}

/// `n` log lines in time order starting on day `day`, using `services`.
pub fn log_lines(rng: &mut ChaCha8Rng, n: usize, day: i64, services: &[&str]) -> Vec<LogLine> {
    let mut t = day * 86_400 + rng.int(0, 8 * 3600);
    (0..n)
        .map(|_| {
            t += rng.int(1, 400);
            let level = level(rng).to_string();
            LogLine {
                ts: timestamp(t),
                msg: message(rng, &level),
                level,
                service: rng.pick(services).to_string(),
            }
        })
        .collect()
}

/// Join lines with `\n` and a trailing newline.
pub fn text(lines: &[String]) -> String {
    let mut s = lines.join("\n");
    s.push('\n');
    s
}

/// Distinct `n` items built by `make` (retries a bounded number of times; may return fewer).
pub fn distinct<F: FnMut(&mut ChaCha8Rng) -> String>(
    rng: &mut ChaCha8Rng,
    n: usize,
    mut make: F,
) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut tries = 0;
    while out.len() < n && tries < n * 50 {
        tries += 1;
        let v = make(rng);
        if !out.contains(&v) {
            out.push(v);
        }
    }
    out
}

/// A short paragraph of filler prose (for document-like files).
pub fn prose(rng: &mut ChaCha8Rng, sentences: usize) -> String {
    const W: &[&str] = &[
        "the",
        "team",
        "will",
        "review",
        "quarterly",
        "numbers",
        "before",
        "release",
        "and",
        "update",
        "pending",
        "items",
        "with",
        "owners",
        "after",
        "sync",
        "meeting",
        "notes",
        "include",
        "risks",
        "budget",
        "timeline",
        "vendor",
        "migration",
    ];
    let mut out = Vec::new();
    for _ in 0..sentences {
        let n = rng.int(5, 11) as usize;
        let words: Vec<&str> = (0..n).map(|_| rng.pick(W)).collect();
        let mut s = words.join(" ");
        if let Some(f) = s.get_mut(0..1) {
            f.make_ascii_uppercase();
        }
        s.push('.');
        out.push(s);
    }
    out.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(date_of(0), "2024-01-01");
        assert_eq!(date_of(59), "2024-02-29");
        assert_eq!(date_of(365), "2024-12-31");
        assert_eq!(timestamp(86_400 + 3661), "2024-01-02 01:01:01");
    }
}
