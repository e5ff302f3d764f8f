//! Small helpers shared by the families: stable hashing, seeded RNGs, shell
//! and Python quoting, and a builder for `setup.sh`.

use rand::seq::{IndexedRandom, SliceRandom};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// 64-bit FNV-1a over several byte strings (each followed by a 0xff separator).
/// Stable across platforms and releases, unlike `std`'s hasher.
pub fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in part.iter().chain(std::iter::once(&0xffu8)) {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// The RNG of one (family, seed, complexity) triple; `salt` separates streams
/// (data vs phrasing) so that the scenario never changes the data.
pub fn rng_for(family: &str, seed: u64, complexity: u8, salt: &str) -> ChaCha8Rng {
    let h = fnv1a(&[
        family.as_bytes(),
        &seed.to_le_bytes(),
        &[complexity],
        salt.as_bytes(),
    ]);
    ChaCha8Rng::seed_from_u64(h)
}

/// Convenience methods on the generator RNG.
pub trait Pick {
    /// One element of a non-empty slice (the first one if it is empty-safe).
    fn pick<T: Clone>(&mut self, items: &[T]) -> T;
    /// `n` distinct elements of `items` (all of them if `n` is larger), in random order.
    fn sample<T: Clone>(&mut self, items: &[T], n: usize) -> Vec<T>;
    /// A number in `lo..=hi`.
    fn int(&mut self, lo: i64, hi: i64) -> i64;
    /// True with probability `p`.
    fn chance(&mut self, p: f64) -> bool;
    /// Shuffle in place.
    fn shuffle_vec<T>(&mut self, v: &mut [T]);
}

impl Pick for ChaCha8Rng {
    fn pick<T: Clone>(&mut self, items: &[T]) -> T {
        items
            .choose(self)
            .cloned()
            .expect("pick() is only called on non-empty built-in tables")
    }
    fn sample<T: Clone>(&mut self, items: &[T], n: usize) -> Vec<T> {
        items.choose_multiple(self, n).cloned().collect()
    }
    fn int(&mut self, lo: i64, hi: i64) -> i64 {
        if hi <= lo {
            lo
        } else {
            self.random_range(lo..=hi)
        }
    }
    fn chance(&mut self, p: f64) -> bool {
        self.random_bool(p.clamp(0.0, 1.0))
    }
    fn shuffle_vec<T>(&mut self, v: &mut [T]) {
        v.shuffle(self)
    }
}

/// Quote `s` for a POSIX shell (single quotes).
pub fn sq(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+=:,@%".contains(c))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// A Python string literal for `s` (JSON string syntax is valid Python).
pub fn py(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// A Python list literal of strings.
pub fn py_list(items: &[String]) -> String {
    let inner: Vec<String> = items.iter().map(|s| py(s)).collect();
    format!("[{}]", inner.join(", "))
}

const EOF_MARK: &str = "ENDLESS_EOF";

/// Shell lines that write `content` to `path` exactly (heredoc when it ends with
/// a newline, `printf` otherwise).
pub fn write_cmd(path: &str, content: &str) -> String {
    let heredoc_ok =
        content.ends_with('\n') && !content.lines().any(|l| l == EOF_MARK) && !content.is_empty();
    if heredoc_ok {
        format!("cat > {} <<'{EOF_MARK}'\n{content}{EOF_MARK}", sq(path))
    } else {
        format!("printf '%s' {} > {}", sq(content), sq(path))
    }
}

/// Parent directory of an absolute path (`/` for top-level names).
pub fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

/// An oracle step running `script` with `python3` from a heredoc, after creating
/// the parent directory of `output` when given.
pub fn python_step(output: Option<&str>, script: &str) -> String {
    let mkdir = output
        .map(|o| format!("mkdir -p {}\n", sq(parent(o))))
        .unwrap_or_default();
    format!("{mkdir}python3 - <<'PY'\n{script}PY")
}

/// Last component of a path.
pub fn base(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Builder for `environment/setup.sh` (runs as root; ends with a `chown`).
#[derive(Debug, Default)]
pub struct Setup {
    lines: Vec<String>,
}

impl Setup {
    /// Write a file, creating its directory.
    pub fn file(&mut self, path: &str, content: &str) -> &mut Self {
        self.lines.push(format!("mkdir -p {}", sq(parent(path))));
        self.lines.push(write_cmd(path, content));
        self
    }
    /// Write a file and set its mode.
    pub fn file_mode(&mut self, path: &str, content: &str, mode: u32) -> &mut Self {
        self.file(path, content);
        self.lines.push(format!("chmod {mode:o} {}", sq(path)));
        self
    }
    /// Any shell line.
    pub fn raw(&mut self, line: impl Into<String>) -> &mut Self {
        self.lines.push(line.into());
        self
    }
    /// Set a file's modification time (`touch -d`), for deterministic mtimes.
    pub fn mtime(&mut self, path: &str, date: &str) -> &mut Self {
        self.lines
            .push(format!("touch -d {} {}", sq(date), sq(path)));
        self
    }
    /// The full script.
    pub fn render(&self) -> String {
        let mut s = String::from(
            "#!/bin/bash\n# Generated by endless procgen: builds the task's initial state.\nset -eu\nmkdir -p /home/user\n",
        );
        for l in &self.lines {
            s.push_str(l);
            s.push('\n');
        }
        s.push_str("chown -R user:user /home/user\n");
        s
    }
}

/// An absolute path under the agent's home.
pub(crate) fn home(rel: &str) -> String {
    format!("/home/user/{rel}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(sq("/home/user/a.txt"), "/home/user/a.txt");
        assert_eq!(sq("it's"), r"'it'\''s'");
        assert_eq!(py("a\"b\n"), r#""a\"b\n""#);
    }

    #[test]
    fn hashing_is_stable() {
        assert_eq!(fnv1a(&[b"a"]), fnv1a(&[b"a"]));
        assert_ne!(fnv1a(&[b"a", b"b"]), fnv1a(&[b"ab"]));
    }

    #[test]
    fn paths() {
        assert_eq!(parent("/home/user/x"), "/home/user");
        assert_eq!(base("/home/user/x"), "x");
    }
}
