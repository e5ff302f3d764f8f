//! The Dockerfile subset: FROM (with stages: `FROM <image> AS <name>`, and
//! `FROM <stage>` going on from an earlier one),
//! COPY/ADD of local files, COPY --from an earlier stage or an image, RUN, ENV,
//! WORKDIR, USER, ARG. Instructions without effect on the filesystem (CMD, LABEL,
//! EXPOSE, ...) are accepted and ignored; anything else is an error naming
//! the line.

use std::collections::HashMap;

use super::definition::{line_error, EnvDefinition, Stage, Step};
use crate::task::BundleError;

/// Parse Dockerfile text.
pub fn parse(text: &str, file: &str) -> Result<EnvDefinition, BundleError> {
    let mut def = EnvDefinition::default();
    let mut vars: HashMap<String, String> = HashMap::new();
    // ARGs before the first FROM, visible in every stage.
    let mut globals: HashMap<String, String> = HashMap::new();
    // The ARGs declared in the current stage that have a value: as in
    // Docker, in the environment of the stage's later RUN steps (not in the
    // image's).
    let mut stage_args: Vec<String> = Vec::new();
    let mut started = false;
    let mut current_name: Option<String> = None;
    // Positions in `def.stages` of the stages written with FROM (numbers in
    // `COPY --from=<n>` count these), apart from those made for images.
    let mut written: Vec<usize> = Vec::new();
    for (line_no, instruction) in logical_lines(text) {
        let (word, rest) = split_word(&instruction);
        let rest = rest.trim();
        let upper = word.to_ascii_uppercase();
        let err = |m: String| line_error(file, line_no, m);
        match upper.as_str() {
            "FROM" => {
                let words: Vec<&str> = rest
                    .split_whitespace()
                    .filter(|t| !t.starts_with("--"))
                    .collect();
                let (image, name) = match words.as_slice() {
                    [image] => (*image, None),
                    [image, as_, name] if as_.eq_ignore_ascii_case("as") => {
                        (*image, Some(name.to_ascii_lowercase()))
                    }
                    _ => return Err(err("FROM needs an image, optionally `AS <name>`".into())),
                };
                if !started {
                    globals = vars.clone();
                }
                let image = substitute(image, &globals);
                if started {
                    written.push(def.stages.len());
                    def.stages.push(Stage {
                        name: current_name.take(),
                        base: def.base.take(),
                        steps: std::mem::take(&mut def.steps),
                        lines: std::mem::take(&mut def.lines),
                    });
                    vars = globals.clone();
                }
                started = true;
                current_name = name;
                stage_args.clear();
                // `FROM <stage>`: the stage goes on from where the earlier
                // one ended: its base and its steps (stages going on from
                // one stage share their step keys, so its steps build once),
                // with its ENV set and its ARGs not.
                match earlier_stage(&def, &image) {
                    Some(parent) => {
                        let parent = def.stages[parent].clone();
                        for step in &parent.steps {
                            if let Step::Env { key, value } = step {
                                vars.insert(key.clone(), value.clone());
                            }
                        }
                        def.base = parent.base;
                        def.steps = parent.steps;
                        def.lines = parent.lines;
                    }
                    None => def.base = Some(image),
                }
            }
            "ARG" => {
                let (k, v) = match rest.split_once('=') {
                    Some((k, v)) => (k.trim(), Some(substitute(&unquote(v.trim()), &vars))),
                    None => (rest, None),
                };
                // A value known already (a global ARG redeclared in the
                // stage) stays; an ARG without one is empty where it is
                // substituted, and unset in RUN steps.
                let valued = v.is_some() || vars.contains_key(k);
                vars.entry(k.to_string()).or_insert(v.unwrap_or_default());
                if started && valued && !stage_args.iter().any(|a| a == k) {
                    stage_args.push(k.to_string());
                }
            }
            "ENV" => {
                for (k, v) in parse_env(rest).map_err(&err)? {
                    let v = substitute(&v, &vars);
                    vars.insert(k.clone(), v.clone());
                    def.steps.push(Step::Env { key: k, value: v });
                }
            }
            "RUN" => {
                if rest.starts_with("<<") {
                    return Err(err("RUN with a heredoc is not supported".into()));
                }
                let script = match json_array(rest) {
                    Some(args) => args
                        .iter()
                        .map(|a| shell_quote(a))
                        .collect::<Vec<_>>()
                        .join(" "),
                    None => rest.to_string(),
                };
                let script = strip_run_flags(&script);
                def.steps
                    .push(Step::Run(with_args(&script, &stage_args, &vars)));
            }
            "COPY" | "ADD" => {
                let mut args: Vec<String> = match json_array(rest) {
                    Some(a) => a,
                    None => rest.split_whitespace().map(str::to_owned).collect(),
                };
                let from = args
                    .iter()
                    .find_map(|a| a.strip_prefix("--from="))
                    .map(|f| substitute(f, &vars));
                args.retain(|a| !a.starts_with("--"));
                if let Some(stage) = from {
                    if args.len() < 2 {
                        return Err(err(format!("{upper} needs a source and a destination")));
                    }
                    let index = match stage_index(&def, &written, &current_name, &stage) {
                        Some(i) => i,
                        None if stage.parse::<usize>().is_ok()
                            || current_name.as_deref() == Some(&stage.to_ascii_lowercase())
                            || stage.is_empty() =>
                        {
                            return Err(err(format!(
                                "{upper} --from={stage}: no earlier stage is that"
                            )))
                        }
                        // An image: a stage of its own, with no steps.
                        None => match def.stages.iter().position(|s| {
                            s.name.is_none()
                                && s.steps.is_empty()
                                && s.base.as_deref() == Some(&stage)
                        }) {
                            Some(i) => i,
                            None => {
                                def.stages.push(Stage {
                                    base: Some(stage.clone()),
                                    ..Default::default()
                                });
                                def.stages.len() - 1
                            }
                        },
                    };
                    let dst = substitute(args.pop().unwrap_or_default().as_str(), &vars);
                    let multiple = args.len() > 1;
                    for src in args {
                        let src = substitute(&src, &vars);
                        let dst = if multiple && !dst.ends_with('/') {
                            format!("{dst}/")
                        } else {
                            dst.clone()
                        };
                        def.steps.push(Step::CopyFrom {
                            stage: stage.clone(),
                            index,
                            src: format!("/{}", src.trim_start_matches('/')),
                            dst,
                        });
                    }
                    def.lines.resize(def.steps.len(), line_no);
                    continue;
                }
                if args.len() < 2 {
                    return Err(err(format!("{upper} needs a source and a destination")));
                }
                let dst = substitute(args.pop().unwrap_or_default().as_str(), &vars);
                let multiple = args.len() > 1;
                for src in args {
                    let src = substitute(&src, &vars);
                    if src.contains("://") {
                        return Err(err(format!(
                            "{upper} of a URL ({src}) is not supported: only local files"
                        )));
                    }
                    if src.starts_with('/') || src.split('/').any(|c| c == "..") {
                        return Err(err(format!(
                            "{upper} source {src:?} leaves the build context"
                        )));
                    }
                    let dst = if multiple && !dst.ends_with('/') {
                        format!("{dst}/")
                    } else {
                        dst.clone()
                    };
                    def.steps.push(Step::Copy {
                        src: src.trim_start_matches("./").to_string(),
                        dst,
                    });
                }
            }
            "WORKDIR" => def.steps.push(Step::Workdir(substitute(rest, &vars))),
            "USER" => def.steps.push(Step::User(substitute(rest, &vars))),
            "CMD" | "ENTRYPOINT" | "LABEL" | "EXPOSE" | "MAINTAINER" | "VOLUME" | "HEALTHCHECK"
            | "STOPSIGNAL" | "SHELL" => {}
            _ => return Err(err(format!("unsupported Dockerfile instruction {word:?}"))),
        }
        def.lines.resize(def.steps.len(), line_no);
    }
    Ok(def)
}

/// The earlier stage `name` refers to (its name, or its number among the
/// `written` ones), if any; the stage being parsed (`current`) is not one.
fn stage_index(
    def: &EnvDefinition,
    written: &[usize],
    current: &Option<String>,
    name: &str,
) -> Option<usize> {
    let lower = name.to_ascii_lowercase();
    if current.as_deref() == Some(lower.as_str()) {
        return None;
    }
    if let Ok(n) = name.parse::<usize>() {
        return written.get(n).copied();
    }
    def.stages
        .iter()
        .position(|s| s.name.as_deref() == Some(lower.as_str()))
}

/// The earlier stage a `FROM` names (by its `AS` name; Docker takes no
/// numbers there), if any.
fn earlier_stage(def: &EnvDefinition, image: &str) -> Option<usize> {
    let lower = image.to_ascii_lowercase();
    def.stages
        .iter()
        .position(|s| s.name.as_deref() == Some(lower.as_str()))
}

/// Join continuation lines; skip comments and blanks. Yields (first line number, text).
fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut start = 0;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if current.is_empty() && (trimmed.is_empty() || trimmed.starts_with('#')) {
            continue;
        }
        if !current.is_empty() && trimmed.starts_with('#') {
            continue;
        }
        if current.is_empty() {
            start = i + 1;
        }
        if let Some(body) = trimmed.strip_suffix('\\') {
            current.push_str(body);
            current.push(' ');
        } else {
            current.push_str(trimmed);
            out.push((start, std::mem::take(&mut current)));
        }
    }
    if !current.trim().is_empty() {
        out.push((start, current));
    }
    out
}

fn split_word(s: &str) -> (&str, &str) {
    let s = s.trim_start();
    match s.find(char::is_whitespace) {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, ""),
    }
}

fn json_array(s: &str) -> Option<Vec<String>> {
    if s.starts_with('[') {
        serde_json::from_str(s).ok()
    } else {
        None
    }
}

fn strip_run_flags(script: &str) -> String {
    let mut rest = script.trim_start();
    while rest.starts_with("--") {
        rest = split_word(rest).1.trim_start();
    }
    rest.to_string()
}

fn unquote(v: &str) -> String {
    let v = v.trim();
    if v.len() >= 2
        && ((v.starts_with('"') && v.ends_with('"')) || (v.starts_with('\'') && v.ends_with('\'')))
    {
        v[1..v.len() - 1].to_string()
    } else {
        v.to_string()
    }
}

fn parse_env(rest: &str) -> Result<Vec<(String, String)>, String> {
    let (first, after) = split_word(rest);
    if !first.contains('=') {
        if first.is_empty() {
            return Err("ENV needs a name and a value".into());
        }
        return Ok(vec![(first.to_string(), unquote(after))]);
    }
    let mut out = Vec::new();
    let mut chars = rest.chars().peekable();
    while chars.peek().is_some() {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let key: String = chars.by_ref().take_while(|&c| c != '=').collect();
        if key.is_empty() {
            break;
        }
        let mut value = String::new();
        let mut quote = None;
        while let Some(&c) = chars.peek() {
            chars.next();
            match (quote, c) {
                (None, '"' | '\'') => quote = Some(c),
                (Some(q), c) if c == q => quote = None,
                (None, c) if c.is_whitespace() => break,
                (_, '\\') => {
                    if let Some(n) = chars.next() {
                        value.push(n)
                    }
                }
                (_, c) => value.push(c),
            }
        }
        out.push((key.trim().to_string(), value));
    }
    Ok(out)
}

/// `script` preceded by an `export` of the stage's ARGs (`args`, with their
/// values in `vars`), as Docker gives them to a RUN step; unchanged when the
/// stage declared none.
fn with_args(script: &str, args: &[String], vars: &HashMap<String, String>) -> String {
    let exports: Vec<String> = args
        .iter()
        .filter_map(|k| Some(format!("{k}={}", shell_quote(vars.get(k)?))))
        .collect();
    if exports.is_empty() {
        return script.to_string();
    }
    format!("export {}\n{script}", exports.join(" "))
}

/// Replace `$VAR` and `${VAR}` with known ARG/ENV values; unknown ones stay.
fn substitute(s: &str, vars: &HashMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let (name, len) = if let Some(inner) = after.strip_prefix('{') {
            match inner.find('}') {
                Some(end) => (&inner[..end], end + 2),
                None => ("", 0),
            }
        } else {
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            (&after[..end], end)
        };
        match vars.get(name) {
            Some(v) if !name.is_empty() => out.push_str(v),
            _ => out.push_str(&rest[i..i + 1 + len]),
        }
        rest = &rest[i + 1 + len..];
    }
    out.push_str(rest);
    out
}

fn shell_quote(s: &str) -> String {
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_./=:".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_subset() {
        let text = "FROM ubuntu:24.04\nARG DIR=/app\n# comment\nENV A=1 B=\"two words\"\nWORKDIR $DIR\nCOPY data/ ${DIR}/data/\nRUN apt-get update && \\\n    echo hi\nUSER user\nCMD [\"bash\"]\n";
        let def = parse(text, "Dockerfile").unwrap();
        assert_eq!(def.base.as_deref(), Some("ubuntu:24.04"));
        assert_eq!(
            def.steps,
            vec![
                Step::Env {
                    key: "A".into(),
                    value: "1".into()
                },
                Step::Env {
                    key: "B".into(),
                    value: "two words".into()
                },
                Step::Workdir("/app".into()),
                Step::Copy {
                    src: "data/".into(),
                    dst: "/app/data/".into()
                },
                // The stage's ARG is in the RUN step's environment.
                Step::Run("export DIR=/app\napt-get update &&  echo hi".into()),
                Step::User("user".into()),
            ]
        );
    }

    #[test]
    fn unsupported_instructions_name_the_line() {
        let err = parse("FROM x\nONBUILD RUN true\n", "environment/Dockerfile")
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 2") && err.contains("ONBUILD"), "{err}");
        let err = parse("FROM x\nADD https://e.com/f /f\n", "Dockerfile")
            .unwrap_err()
            .to_string();
        assert!(err.contains("URL"), "{err}");
        let err = parse("FROM a AS b\nFROM c\nCOPY --from=1 /x /y\n", "Dockerfile")
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 3") && err.contains("--from=1"), "{err}");
        let err = parse("FROM x\nCOPY ../secret /s\n", "Dockerfile")
            .unwrap_err()
            .to_string();
        assert!(err.contains("leaves the build context"), "{err}");
    }

    #[test]
    fn stages_and_copies_from_them() {
        let text = "ARG V=1\nFROM debian:bookworm AS Build\nENV X=$V\nRUN make\n\
                    FROM debian:bookworm\nCOPY --from=build /out/tool /usr/local/bin/\n\
                    COPY --from=0 out/a out/b /opt/\nRUN echo $X\n";
        let def = parse(text, "Dockerfile").unwrap();
        assert_eq!(def.stages.len(), 1);
        assert_eq!(def.stages[0].name.as_deref(), Some("build"));
        assert_eq!(def.stages[0].steps.len(), 2);
        assert_eq!(def.stages[0].lines, vec![3, 4]);
        assert_eq!(def.base.as_deref(), Some("debian:bookworm"));
        assert_eq!(
            def.steps[0],
            Step::CopyFrom {
                stage: "build".into(),
                index: 0,
                src: "/out/tool".into(),
                dst: "/usr/local/bin/".into()
            }
        );
        assert!(
            matches!(&def.steps[2], Step::CopyFrom { src, dst, .. } if src == "/out/b" && dst == "/opt/")
        );
        // A stage's ENV stays in its stage.
        assert_eq!(def.steps[3], Step::Run("echo $X".into()));
        assert_eq!(def.lines, vec![6, 7, 7, 8]);
        // An image to copy from is a stage of its own, without steps; stage
        // numbers still count the written stages only.
        let text = "FROM a AS one\nCOPY --from=tools:1 /t /t\nFROM b AS two\nRUN x\n\
                    FROM c\nCOPY --from=1 /x /x\nCOPY --from=tools:1 /u /u\n";
        let def = parse(text, "Dockerfile").unwrap();
        assert_eq!(def.stages.len(), 3);
        assert_eq!(def.stages[0].base.as_deref(), Some("tools:1"));
        assert!(def.stages[0].steps.is_empty() && def.stages[0].name.is_none());
        assert_eq!(def.stages[1].name.as_deref(), Some("one"));
        let copies = |steps: &[Step]| -> Vec<usize> {
            steps
                .iter()
                .filter_map(|s| match s {
                    Step::CopyFrom { index, .. } => Some(*index),
                    _ => None,
                })
                .collect()
        };
        assert_eq!(copies(&def.stages[1].steps), vec![0]);
        assert_eq!(copies(&def.steps), vec![2, 0], "stage 1 is `two`");
    }

    #[test]
    fn a_stage_from_an_earlier_stage_goes_on_from_it() {
        let text = "ARG V=1\nFROM debian:bookworm AS base\nARG W=2\nENV X=$V\nRUN make\n\
                    FROM base AS build\nWORKDIR /w$X$W\n\
                    FROM debian:bookworm AS other\nRUN true\n\
                    FROM build\nCOPY --from=other /etc/o /o\nRUN cat /out\n";
        let def = parse(text, "Dockerfile").unwrap();
        assert_eq!(def.stages.len(), 3);
        let build = &def.stages[1];
        assert_eq!(build.name.as_deref(), Some("build"));
        assert_eq!(build.base.as_deref(), Some("debian:bookworm"));
        assert_eq!(
            build.steps,
            vec![
                Step::Env {
                    key: "X".into(),
                    value: "1".into()
                },
                Step::Run("export W=2\nmake".into()),
                // The parent's ENV is set, its ARG is not.
                Step::Workdir("/w1$W".into()),
            ]
        );
        assert_eq!(build.lines, vec![4, 5, 7]);
        // The image: `build`'s base and steps, then its own.
        assert_eq!(def.base.as_deref(), Some("debian:bookworm"));
        assert_eq!(def.steps.len(), 5);
        assert_eq!(def.steps[..3], build.steps[..]);
        assert!(matches!(&def.steps[3], Step::CopyFrom { index: 2, .. }));
        assert_eq!(def.lines, vec![4, 5, 7, 11, 12]);
        assert_eq!(def.env_vars().collect::<Vec<_>>(), vec![("X", "1")]);
        // A name that is no earlier stage is an image.
        let def = parse("FROM a AS b\nFROM c\n", "Dockerfile").unwrap();
        assert_eq!(def.base.as_deref(), Some("c"));
        // A stage cannot start from itself: `FROM b AS b` is the image `b`.
        let def = parse("FROM b AS b\nRUN x\n", "Dockerfile").unwrap();
        assert_eq!(def.base.as_deref(), Some("b"));
    }

    #[test]
    fn arg_defaults_reach_later_run_steps_of_their_stage() {
        let text = "ARG GLOBAL=g\nARG UNUSED=u\nFROM debian:bookworm\nRUN echo first\n\
                    ARG V=1.2\nARG P=\"a b\"\nARG D=/opt/$V\nARG GLOBAL\nARG NONE\n\
                    RUN curl https://example.invalid/$V\nFROM debian:bookworm\nRUN echo $V\n";
        let def = parse(text, "Dockerfile").unwrap();
        // Before the ARGs: nothing; after: their values (a global one only
        // where the stage redeclares it; one without a value stays unset).
        assert_eq!(def.stages[0].steps[0], Step::Run("echo first".into()));
        assert_eq!(
            def.stages[0].steps[1],
            Step::Run(
                "export V=1.2 P='a b' D=/opt/1.2 GLOBAL=g\ncurl https://example.invalid/$V".into()
            )
        );
        // Not in the next stage, and never in the image's environment.
        assert_eq!(def.steps, vec![Step::Run("echo $V".into())]);
        assert_eq!(def.env_vars().count(), 0);
    }

    #[test]
    fn env_legacy_form_and_json_run() {
        let def = parse(
            "ENV PATH /opt/bin:$PATH\nRUN [\"echo\", \"a b\"]\n",
            "Dockerfile",
        )
        .unwrap();
        assert_eq!(
            def.steps[0],
            Step::Env {
                key: "PATH".into(),
                value: "/opt/bin:$PATH".into()
            }
        );
        assert_eq!(def.steps[1], Step::Run("echo 'a b'".into()));
    }
}
