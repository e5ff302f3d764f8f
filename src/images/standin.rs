//! Stand-in bases: what `endless images stand-ins` builds, offline from
//! Debian's archive and PyPI, for the Docker Hub and ghcr.io images tasks
//! are written for (`python:3.13-slim-bookworm`, `ubuntu:24.04`,
//! `debian:bookworm-slim`, `ghcr.io/astral-sh/uv:0.8.14`). This module is
//! the catalog only: from a reference to the stand-in's recipe and what it
//! differs in from the real image; `standin_build` builds them.

use serde::{Deserialize, Serialize};

use super::{ImageError, ImageRef};

/// The Debian suites stand-ins are built from, with their CPython.
const SUITES: [(&str, &str, Option<&str>); 3] = [
    ("11", "bullseye", None),
    ("12", "bookworm", Some("3.11")),
    ("13", "trixie", Some("3.13")),
];

/// Python minor versions with a stand-in, and the CPython that serves each.
const PYTHONS: [(u32, u32); 6] = [(9, 11), (10, 11), (11, 11), (12, 13), (13, 13), (14, 13)];

/// Where stand-ins are registered (`localhost/stand-in/...`).
pub const STAND_IN_PREFIX: &str = "localhost/stand-in/";

/// What a stand-in is built from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Recipe {
    /// A Debian root filesystem (mmdebstrap minbase) with these packages and
    /// customize hooks.
    Debian {
        /// The suite.
        suite: String,
        /// Packages beyond minbase.
        packages: Vec<String>,
        /// Shell commands run on the root (`$1`) after installation.
        hooks: Vec<String>,
        /// `KEY=value` entries of the image's environment.
        env: Vec<String>,
    },
    /// `/uv` and `/uvx` from the PyPI wheel of `uv` (`version`: exact,
    /// `X.Y` for the newest `X.Y.*`, or `latest`).
    Uv {
        /// The version asked for.
        version: String,
    },
}

/// The stand-in for one reference.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StandIn {
    /// The reference asked for, canonical.
    pub requested: String,
    /// The name the stand-in is registered under (shared by every
    /// reference with the same recipe).
    pub name: String,
    /// How it is built.
    pub recipe: Recipe,
    /// What differs from the real image (Python minor, suite, ...).
    pub differs: Vec<String>,
}

impl StandIn {
    /// One line for notes: `python:3.13-slim-bookworm stands in as ... (differs: ...)`.
    pub fn note(&self, written: &str) -> String {
        if self.differs.is_empty() {
            format!("{written} {SERVED_BY}{}", self.name)
        } else {
            format!(
                "{written} {SERVED_BY}{} ({})",
                self.name,
                self.differs.join("; ")
            )
        }
    }
}

/// What [`StandIn::note`] says before the stand-in's name.
const SERVED_BY: &str = "is served by the stand-in ";

/// The name of the stand-in a note written by [`StandIn::note`] (perhaps
/// after other notes) names, if it names one.
pub fn stand_in_of_note(note: &str) -> Option<&str> {
    let at = note.find(SERVED_BY)? + SERVED_BY.len();
    let name = note[at..].split([' ', ';']).next()?;
    (!name.is_empty()).then_some(name)
}

/// The families with stand-ins, for error messages and `--help`.
pub fn catalog_summary() -> String {
    "python:3.9 to python:3.14 [-slim][-bookworm|-trixie] (CPython 3.11 on bookworm serves 3.9-3.11, \
     CPython 3.13 on trixie serves 3.12-3.14), ubuntu:22.04 (as Debian bookworm), ubuntu:24.04 (as Debian trixie), \
     debian:bullseye|bookworm|trixie|11|12|13[.N][-slim], ghcr.io/astral-sh/uv:VERSION (/uv and /uvx from PyPI)"
        .to_string()
}

/// The images stand-ins are built for when no task names any.
pub fn default_set() -> Vec<&'static str> {
    vec![
        "python:3.13-slim-bookworm",
        "python:3.11-slim",
        "ubuntu:24.04",
        "ubuntu:22.04",
        "debian:bookworm-slim",
        "debian:trixie-slim",
    ]
}

/// The stand-in for `reference`: `Ok(None)` for images of no family with
/// stand-ins; an error naming what exists for a family member without one
/// (`python:3.8`, `python:3.13-alpine`, `ubuntu:20.04`).
pub fn stand_in_for(reference: &ImageRef) -> Result<Option<StandIn>, ImageError> {
    let canonical = reference.canonical();
    let Some((repo, tag)) = family_of(&canonical) else {
        return Ok(None);
    };
    let none = |why: String| ImageError::NoStandIn {
        reference: canonical.clone(),
        reason: why,
        exist: catalog_summary(),
    };
    let made = match repo {
        "python" => python(tag).map_err(none)?,
        "ubuntu" => ubuntu(tag).map_err(none)?,
        "debian" => debian(tag).map_err(none)?,
        "uv" => uv(tag).map_err(none)?,
        _ => return Ok(None),
    };
    let (name, recipe, differs) = made;
    Ok(Some(StandIn {
        requested: canonical,
        name: format!("{STAND_IN_PREFIX}{name}"),
        recipe,
        differs,
    }))
}

/// `(family, tag)` of a canonical reference with stand-ins.
fn family_of(canonical: &str) -> Option<(&'static str, &str)> {
    let (path, tag) = canonical.split('@').next()?.rsplit_once(':')?;
    let family = match path {
        "docker.io/library/python" => "python",
        "docker.io/library/ubuntu" => "ubuntu",
        "docker.io/library/debian" => "debian",
        "ghcr.io/astral-sh/uv" => "uv",
        _ => return None,
    };
    Some((family, tag))
}

type Made = (String, Recipe, Vec<String>);

const BASE_ENV: [&str; 2] = [
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG=C.UTF-8",
];

fn suite_of(word: &str) -> Option<&'static str> {
    SUITES
        .iter()
        .find(|(n, s, _)| *n == word || *s == word)
        .map(|(_, s, _)| *s)
}

fn python(tag: &str) -> Result<Made, String> {
    let mut parts = tag.split('-');
    let version = parts.next().unwrap_or_default();
    let (mut slim, mut suite) = (false, None);
    for word in parts {
        match word {
            "slim" => slim = true,
            "bookworm" | "trixie" => suite = Some(word),
            other => return Err(format!("the variant `{other}` has no stand-in")),
        }
    }
    let version = if version == "latest" || version == "3" {
        "3.13"
    } else {
        version
    };
    let mut nums = version.split('.');
    let (major, minor) = (nums.next(), nums.next().and_then(|m| m.parse::<u32>().ok()));
    let served = match (major, minor) {
        (Some("3"), Some(m)) => PYTHONS.iter().find(|(asked, _)| *asked == m).map(|p| p.1),
        _ => None,
    }
    .ok_or_else(|| format!("Python {version} has no stand-in"))?;
    let served_suite = if served == 11 { "bookworm" } else { "trixie" };
    let mut differs = Vec::new();
    if minor != Some(served) {
        differs.push(format!(
            "CPython 3.{served} (Debian {served_suite}'s) instead of {version}"
        ));
    } else if nums.next().is_some() {
        differs.push(format!(
            "Debian {served_suite}'s CPython 3.{served} point release instead of {version}"
        ));
    }
    if let Some(asked) = suite.filter(|s| *s != served_suite) {
        differs.push(format!("Debian {served_suite} instead of {asked}"));
    }
    differs.push(
        "Debian's CPython under /usr (its headers in /usr/include, pip and what it installs in /usr/local)"
            .into(),
    );
    // The headers (`Python.h`) in slim images too, as the python images
    // have them.
    let mut packages: Vec<String> = [
        "ca-certificates",
        "python3",
        "python3-dev",
        "python3-pip",
        "python3-venv",
        "python-is-python3",
    ]
    .map(String::from)
    .to_vec();
    if !slim {
        packages.extend(["build-essential", "git", "curl", "wget"].map(String::from));
        differs.push("compilers, git, curl and wget but not all of buildpack-deps".into());
    }
    let hooks = vec![
        // pip without PEP 668, as in the python images.
        "rm -f \"$1\"/usr/lib/python3*/EXTERNALLY-MANAGED".to_string(),
        // A pip that can upgrade itself (`pip install -U pip`): Debian's
        // has no RECORD file (`Cannot uninstall pip ... installed by
        // debian`), so the same version from Debian's own wheel goes to
        // /usr/local, first on `sys.path`, with its `pip`, `pip3` and
        // `pip3.X`.
        "chroot \"$1\" sh -c 'python3 -m pip install --no-index --no-cache-dir --ignore-installed --disable-pip-version-check --root-user-action=ignore /usr/share/python-wheels/pip-*.whl'"
            .to_string(),
        // `python` where the python images have it.
        "for b in python python3; do ln -sf /usr/bin/$b \"$1/usr/local/bin/$b\"; done".to_string(),
    ];
    let mut env: Vec<String> = BASE_ENV.map(String::from).to_vec();
    env.push("PIP_ROOT_USER_ACTION=ignore".into());
    let name = format!("python:3.{served}{}", if slim { "-slim" } else { "" });
    Ok((
        name,
        Recipe::Debian {
            suite: served_suite.into(),
            packages,
            hooks,
            env,
        },
        differs,
    ))
}

fn ubuntu(tag: &str) -> Result<Made, String> {
    let (suite, ubuntu) = match tag {
        "24.04" | "noble" | "latest" => ("trixie", "24.04"),
        "22.04" | "jammy" => ("bookworm", "22.04"),
        other => return Err(format!("Ubuntu {other} has no stand-in")),
    };
    let differs = vec![format!(
        "Debian {suite} instead of Ubuntu {ubuntu} (apt installs from Debian's archive)"
    )];
    Ok((format!("debian:{suite}"), debian_recipe(suite), differs))
}

fn debian(tag: &str) -> Result<Made, String> {
    let base = tag.strip_suffix("-slim").unwrap_or(tag);
    let (word, point) = match base.split_once('.') {
        Some((major, _)) => (major, true),
        None => (base, false),
    };
    let word = match word {
        "latest" | "stable" => "trixie",
        "oldstable" => "bookworm",
        // Dated tags: `bookworm-20250520`.
        w => w.split('-').next().unwrap_or(w),
    };
    let suite = suite_of(word).ok_or_else(|| format!("Debian `{tag}` has no stand-in"))?;
    let mut differs = Vec::new();
    if point || base.contains('-') {
        differs.push(format!(
            "Debian {suite}'s current point release instead of {base}"
        ));
    }
    if !tag.ends_with("-slim") {
        differs.push("mmdebstrap's minbase (as slim) instead of the full image".into());
    }
    Ok((format!("debian:{suite}"), debian_recipe(suite), differs))
}

fn debian_recipe(suite: &str) -> Recipe {
    Recipe::Debian {
        suite: suite.into(),
        packages: vec!["ca-certificates".into()],
        hooks: Vec::new(),
        env: BASE_ENV.map(String::from).to_vec(),
    }
}

fn uv(tag: &str) -> Result<Made, String> {
    let ok = tag == "latest"
        || (tag.split('.').count() <= 3
            && tag
                .split('.')
                .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit())));
    if !ok {
        return Err(format!(
            "uv's `{tag}` image has no stand-in (only the bare /uv + /uvx images, tagged by version)"
        ));
    }
    Ok((
        format!("uv:{tag}"),
        Recipe::Uv {
            version: tag.into(),
        },
        vec!["/uv and /uvx from the PyPI wheel (the musllinux build where there is one)".into()],
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(r: &str) -> StandIn {
        stand_in_for(&ImageRef::parse(r).unwrap()).unwrap().unwrap()
    }

    fn suite(s: &StandIn) -> &str {
        match &s.recipe {
            Recipe::Debian { suite, .. } => suite,
            Recipe::Uv { .. } => "uv",
        }
    }

    #[test]
    fn python_images_get_debian_cpython_and_say_what_differs() {
        let s = of("python:3.13-slim-bookworm");
        assert_eq!(s.name, "localhost/stand-in/python:3.13-slim");
        assert_eq!(suite(&s), "trixie");
        assert!(s
            .differs
            .iter()
            .any(|d| d == "Debian trixie instead of bookworm"));
        // Headers and a pip that can upgrade itself, in slim images too.
        let Recipe::Debian {
            packages, hooks, ..
        } = &s.recipe
        else {
            panic!()
        };
        assert!(packages.iter().any(|p| p == "python3-dev"), "{packages:?}");
        assert!(
            hooks
                .iter()
                .any(|h| h.contains("--ignore-installed") && h.contains("python-wheels/pip-")),
            "{hooks:?}"
        );
        assert!(!hooks.iter().any(|h| h.contains("pip3; do")), "{hooks:?}");
        let s = of("python:3.11-slim");
        assert_eq!(
            (s.name.as_str(), suite(&s)),
            ("localhost/stand-in/python:3.11-slim", "bookworm")
        );
        assert!(!s.differs.iter().any(|d| d.contains("instead of 3.11")));
        let s = of("python:3.10-slim-bookworm");
        assert_eq!(s.name, "localhost/stand-in/python:3.11-slim");
        assert!(
            s.differs
                .iter()
                .any(|d| d.contains("CPython 3.11") && d.contains("instead of 3.10")),
            "{:?}",
            s.differs
        );
        let s = of("python:3.12");
        assert_eq!(s.name, "localhost/stand-in/python:3.13");
        let Recipe::Debian {
            packages, hooks, ..
        } = &s.recipe
        else {
            panic!()
        };
        assert!(packages.iter().any(|p| p == "build-essential"));
        assert!(hooks[0].contains("EXTERNALLY-MANAGED"));
        assert!(s
            .note("python:3.12")
            .contains("stand-in localhost/stand-in/python:3.13"));
    }

    #[test]
    fn versions_without_a_stand_in_list_what_exists() {
        for r in [
            "python:3.8-slim",
            "python:2.7",
            "python:3.13-alpine",
            "ubuntu:20.04",
            "debian:buster",
            "ghcr.io/astral-sh/uv:0.8.14-python3.12-bookworm",
        ] {
            let e = stand_in_for(&ImageRef::parse(r).unwrap())
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("no stand-in")
                    && e.contains("python:3.9 to python:3.14")
                    && e.contains("ubuntu:24.04"),
                "{r}: {e}"
            );
        }
        assert!(stand_in_for(&ImageRef::parse("alpine:3.20").unwrap())
            .unwrap()
            .is_none());
        assert!(
            stand_in_for(&ImageRef::parse("127.0.0.1:5000/python:3.13").unwrap())
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn ubuntu_debian_and_uv() {
        let s = of("ubuntu:24.04");
        let note = format!("ubuntu:24.04 is aliased; {}", s.note("ubuntu:24.04"));
        assert_eq!(stand_in_of_note(&note), Some(s.name.as_str()));
        assert_eq!(stand_in_of_note("ubuntu:24.04 is stored"), None);
        assert_eq!(
            (s.name.as_str(), suite(&s)),
            ("localhost/stand-in/debian:trixie", "trixie")
        );
        assert!(s.differs[0].contains("instead of Ubuntu 24.04"));
        assert_eq!(suite(&of("ubuntu:22.04")), "bookworm");
        assert_eq!(suite(&of("debian:bullseye-slim")), "bullseye");
        let s = of("debian:13.0-slim");
        assert_eq!(s.name, "localhost/stand-in/debian:trixie");
        assert!(s.differs[0].contains("point release"));
        assert!(of("debian:bookworm-slim").differs.is_empty());
        assert_eq!(suite(&of("debian:12")), "bookworm");
        let s = of("ghcr.io/astral-sh/uv:0.8.14");
        assert_eq!(s.name, "localhost/stand-in/uv:0.8.14");
        assert_eq!(
            s.recipe,
            Recipe::Uv {
                version: "0.8.14".into()
            }
        );
        for r in default_set() {
            of(r);
        }
    }
}
