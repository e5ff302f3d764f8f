//! Apptainer definition files: the `Bootstrap`/`From` header and the
//! `%files`, `%post` and `%environment` sections. Sections that do not shape
//! the filesystem (`%runscript`, `%labels`, `%help`, ...) are ignored;
//! `%setup` (which runs on the host) and unknown sections are errors.

use super::{line_error, EnvDefinition, Step};
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
            if key.trim().eq_ignore_ascii_case("from") {
                def.base = Some(value.trim().to_string());
            }
            continue;
        }
        body.push_str(line);
        body.push('\n');
    }
    finish(&section, &mut body, &mut def)?;
    Ok(def)
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
