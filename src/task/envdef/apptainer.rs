//! Apptainer definition files: the `Bootstrap`/`From` header and the
//! `%files`, `%post` and `%environment` sections. Sections that do not shape
//! the filesystem (`%runscript`, `%labels`, `%help`, ...) are ignored;
//! `%setup` (which runs on the host) and unknown sections are errors.
//!
//! `Bootstrap: localimage` (the reference's `From: ./ubuntu_22.04.sif`) names
//! a local image file the sandbox does not have: see [`localimage_base`].

use super::definition::{line_error, EnvDefinition, Step};
use crate::task::BundleError;

const IGNORED: &[&str] = &[
    "runscript",
    "startscript",
    "test",
    "labels",
    "help",
    "arguments",
    "appinstall",
    "apprun",
    "appenv",
    "appfiles",
    "apphelp",
    "applabels",
    "apptest",
];

/// Parse `.def` text.
pub fn parse(text: &str, file: &str) -> Result<EnvDefinition, BundleError> {
    let mut def = EnvDefinition::default();
    let mut localimage = false;
    let mut section: Option<(String, usize)> = None;
    let mut body = String::new();
    let finish = |section: &Option<(String, usize)>,
                  body: &mut String,
                  def: &mut EnvDefinition|
     -> Result<(), BundleError> {
        let text = std::mem::take(body);
        let Some((name, line)) = section else {
            return Ok(());
        };
        match name.as_str() {
            "post" if !text.trim().is_empty() => def.steps.push(Step::Run(text)),
            "post" => {}
            "environment" => def.session_script.push_str(&text),
            "files" => {
                for (i, l) in text.lines().enumerate() {
                    let l = l.trim();
                    if l.is_empty() || l.starts_with('#') {
                        continue;
                    }
                    let mut parts = l.split_whitespace();
                    let src = parts.next().unwrap_or_default().to_string();
                    let dst = parts
                        .next()
                        .map(str::to_owned)
                        .unwrap_or_else(|| format!("/{}", src.trim_start_matches('/')));
                    if src.starts_with('/') || src.split('/').any(|c| c == "..") {
                        return Err(line_error(file, line + 1 + i, format!("%files source {src:?} must be relative to the task's environment/ directory")));
                    }
                    def.steps.push(Step::Copy { src, dst });
                }
            }
            _ => {}
        }
        def.lines.resize(def.steps.len(), *line);
        Ok(())
    };
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        let trimmed = line.trim();
        if let Some(rest) = trimmed.strip_prefix('%') {
            finish(&section, &mut body, &mut def)?;
            let name = rest
                .split_whitespace()
                .next()
                .unwrap_or("")
                .to_ascii_lowercase();
            match name.as_str() {
                "post" | "environment" | "files" => {}
                "setup" => {
                    return Err(line_error(
                        file,
                        line_no,
                        "%setup runs on the host and is not supported; use %post",
                    ))
                }
                n if IGNORED.contains(&n) => {}
                _ => {
                    return Err(line_error(
                        file,
                        line_no,
                        format!("unknown section %{name}"),
                    ))
                }
            }
            section = Some((name, line_no));
            continue;
        }
        if section.is_none() {
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            let Some((key, value)) = trimmed.split_once(':') else {
                return Err(line_error(
                    file,
                    line_no,
                    format!("expected a `Key: value` header line, found {trimmed:?}"),
                ));
            };
            let key = key.trim();
            if key.eq_ignore_ascii_case("from") {
                def.base = Some(value.trim().to_string());
            } else if key.eq_ignore_ascii_case("bootstrap") {
                localimage = value.trim().eq_ignore_ascii_case("localimage");
            }
            continue;
        }
        body.push_str(line);
        body.push('\n');
    }
    finish(&section, &mut body, &mut def)?;
    if localimage {
        def.base = def.base.as_deref().and_then(localimage_base);
    }
    Ok(def)
}

/// How the definition's base is read when it is a `Bootstrap: localimage`
/// (`None` for any other bootstrap), for the user.
pub fn localimage_note(text: &str, file: &str) -> Option<String> {
    let mut localimage = false;
    let mut from = None;
    for line in text.lines().map(str::trim) {
        if line.starts_with('%') {
            break;
        }
        if let Some((key, value)) = line.split_once(':') {
            let (key, value) = (key.trim(), value.trim());
            if key.eq_ignore_ascii_case("bootstrap") {
                localimage = value.eq_ignore_ascii_case("localimage");
            } else if key.eq_ignore_ascii_case("from") {
                from = Some(value);
            }
        }
    }
    let from = from.filter(|_| localimage)?;
    Some(match localimage_base(from) {
        Some(image) => format!("{file}: Bootstrap: localimage From {from} is read as the image {image}"),
        None => format!("{file}: Bootstrap: localimage From {from} names no known image; the sandbox's base system is used"),
    })
}

/// The image a local `.sif` file stands for, by the reference's naming
/// convention `<name>_<version>.sif` (`./ubuntu_22.04.sif` is `ubuntu:22.04`):
/// the version must start with a digit. `None` for any other name; the
/// sandbox then uses its own base system.
fn localimage_base(from: &str) -> Option<String> {
    let file = from.rsplit('/').next().unwrap_or(from);
    let stem = file.strip_suffix(".sif")?;
    let (name, version) = stem.rsplit_once('_')?;
    let name_ok = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
    let version_ok = version.starts_with(|c: char| c.is_ascii_digit())
        && version
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-');
    (name_ok && version_ok).then(|| format!("{name}:{version}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sections() {
        let text = "Bootstrap: docker\nFrom: ubuntu:22.04\n\n%files\n    data/report.csv /home/user/report.csv\n%post\n    mkdir -p /home/user/logs\n    echo hi > /home/user/logs/a.log\n%environment\n    export LC_ALL=C\n%runscript\n    exec bash\n";
        let def = parse(text, "container.def").unwrap();
        assert_eq!(def.base.as_deref(), Some("ubuntu:22.04"));
        assert_eq!(
            def.steps[0],
            Step::Copy {
                src: "data/report.csv".into(),
                dst: "/home/user/report.csv".into()
            }
        );
        assert!(matches!(&def.steps[1], Step::Run(s) if s.contains("mkdir -p /home/user/logs")));
        assert!(def.session_script.contains("LC_ALL=C"));
    }

    #[test]
    fn localimage_bases_map_to_images_or_the_host_with_a_note() {
        let text =
            "Bootstrap: localimage\nFrom: ./ubuntu_22.04.sif\n\n%post\n    mkdir -p /home/user\n";
        let def = parse(text, "container.def").unwrap();
        assert_eq!(def.base.as_deref(), Some("ubuntu:22.04"));
        assert_eq!(def.steps.len(), 1);
        let note = localimage_note(text, "container.def").unwrap();
        assert!(
            note.contains("./ubuntu_22.04.sif") && note.contains("ubuntu:22.04"),
            "{note}"
        );
        let other = "Bootstrap: localimage\nFrom: /images/my_env.sif\n%post\n true\n";
        assert_eq!(parse(other, "container.def").unwrap().base, None);
        let note = localimage_note(other, "container.def").unwrap();
        assert!(note.contains("base system"), "{note}");
        let docker = "Bootstrap: docker\nFrom: ubuntu:22.04\n";
        assert_eq!(localimage_note(docker, "container.def"), None);
        assert_eq!(
            localimage_base("debian_12-slim.sif").as_deref(),
            Some("debian:12-slim")
        );
        assert_eq!(localimage_base("ubuntu.sif"), None);
        assert_eq!(localimage_base("ubuntu_22.04.img"), None);
    }

    #[test]
    fn unknown_and_host_sections_fail_with_line() {
        let err = parse("Bootstrap: docker\n%bogus\n", "container.def")
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 2") && err.contains("%bogus"), "{err}");
        let err = parse("%setup\n touch /x\n", "container.def")
            .unwrap_err()
            .to_string();
        assert!(err.contains("host"), "{err}");
    }
}
