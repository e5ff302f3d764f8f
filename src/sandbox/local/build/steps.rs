//! Turn parsed setup steps into one bash script per step (each run in its
//! own build layer, see `image.rs`), with a marker before the step, so that
//! a failure names its step and shows its output.

use crate::task::envdef::{EnvDefinition, Step};

/// Where the build context (the task's `environment/`) is mounted during a build.
pub const CTX: &str = "/run/endless-build/ctx";
/// Where step scripts are mounted during a build.
pub const STEPS: &str = "/run/endless-build/steps";
/// Where an earlier stage's file system is shown (read-only) to a
/// `COPY --from` step.
pub const FROM: &str = "/run/endless-build/from";

/// Printed before step `n` (0 is the prelude that creates the agent account).
pub const STEP_MARK: &str = "@@ENDLESS-STEP ";
/// Printed when step `n` fails, with its status.
pub const FAIL_MARK: &str = "@@ENDLESS-FAIL ";
/// Printed at the end with the agent's uid and gid.
pub const USER_MARK: &str = "@@ENDLESS-USER ";

/// Single-quote `s` for bash.
pub fn sq(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// `s` as one bash word in which only `$NAME` and `${NAME}` expand (as
/// references to variables set before, like Docker's `ENV PATH=/x:$PATH`);
/// everything else is literal, single-quoted: `$(cmd)`, backquotes,
/// `${X:-$(cmd)}` and `\` never run or change anything in the shells that
/// source the environment file.
pub fn env_word(s: &str) -> String {
    let mut out = String::new();
    let mut literal = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        literal.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let name_len = |t: &str| {
            let starts = t.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_');
            if starts {
                t.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(t.len())
            } else {
                0
            }
        };
        let (name, used) = match after.strip_prefix('{') {
            Some(inner) => {
                let n = name_len(inner);
                if n > 0 && inner[n..].starts_with('}') {
                    (&inner[..n], n + 2)
                } else {
                    ("", 0)
                }
            }
            None => {
                let n = name_len(after);
                (&after[..n], n)
            }
        };
        if name.is_empty() {
            literal.push('$');
            rest = after;
            continue;
        }
        if !literal.is_empty() {
            out.push_str(&sq(&literal));
            literal.clear();
        }
        out.push_str(&format!("\"${{{name}}}\""));
        rest = &after[used..];
    }
    literal.push_str(rest);
    if !literal.is_empty() || out.is_empty() {
        out.push_str(&sq(&literal));
    }
    out
}

/// A one-line description of a step for error messages.
pub fn describe(step: &Step) -> String {
    let text = match step {
        Step::Copy { src, dst } => format!("COPY {src} {dst}"),
        Step::Run(s) => format!("RUN {}", s.trim()),
        Step::Script(f) => format!("environment/{f}"),
        Step::Env { key, value } => format!("ENV {key}={value}"),
        Step::Workdir(w) => format!("WORKDIR {w}"),
        Step::User(u) => format!("USER {u}"),
        Step::CopyFrom {
            stage, src, dst, ..
        } => format!("COPY --from={stage} {src} {dst}"),
    };
    let first: String = text
        .lines()
        .next()
        .unwrap_or("")
        .chars()
        .take(100)
        .collect();
    if first.len() < text.len() {
        format!("{first} ...")
    } else {
        first
    }
}

/// What the steps before step `n` leave for it: exported variables, the
/// working directory and the user (with the number of the `USER` step
/// that set it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepState {
    /// `export` lines, in order.
    pub exports: String,
    /// The working directory (`/` at first).
    pub cwd: Option<String>,
    /// The build user and the step that set it (`None`: root).
    pub user: Option<(String, usize)>,
}

impl StepState {
    /// The state after `step` (number `n`).
    pub fn after(&mut self, n: usize, step: &Step) {
        match step {
            Step::Env { key, value } => {
                self.exports
                    .push_str(&format!("export {key}={}\n", env_word(value)));
            }
            Step::Workdir(dir) => self.cwd = Some(dir.clone()),
            Step::User(u) => self.user = Some((u.clone(), n)),
            Step::Copy { .. } | Step::CopyFrom { .. } | Step::Run(_) | Step::Script(_) => {}
        }
    }
}

/// What one step runs: the part of its script after the prelude, and a
/// step file (`name`, `content`) to place in [`STEPS`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepBody {
    /// Shell code.
    pub code: String,
    /// A file the code runs, if any.
    pub file: Option<(String, String)>,
    /// Whether the step needs a writable copy of the build context.
    pub writable_context: bool,
}

/// The body of step `n` (`None`: the step only changes the state of later
/// steps, it leaves no layer).
pub fn body(step: &Step, n: usize) -> Option<StepBody> {
    let plain = |code: String| {
        Some(StepBody {
            code,
            file: None,
            writable_context: false,
        })
    };
    match step {
        Step::Run(script) => {
            let name = format!("{n}.sh");
            Some(StepBody {
                code: format!(
                    "if [ \"$__u\" = root ]; then bash -e {STEPS}/{name}; else runuser -u \"$__u\" -- bash -e {STEPS}/{name}; fi\n"
                ),
                file: Some((name, script.clone())),
                writable_context: false,
            })
        }
        // As in Docker, the script may write into its working directory (a
        // copy of the context made for this step alone).
        Step::Script(file) => Some(StepBody {
            code: format!("( cd {CTX} && bash {} )\n", sq(&format!("{CTX}/{file}"))),
            file: None,
            writable_context: true,
        }),
        Step::Copy { src, dst } => plain(copy_code(
            &format!("{CTX}/{}", src.trim_start_matches("./")),
            dst,
        )),
        Step::CopyFrom { src, dst, .. } => plain(copy_code(&format!("{FROM}{src}"), dst)),
        Step::Workdir(dir) => plain(format!("mkdir -p {d} && cd {d}\n", d = sq(dir))),
        Step::Env { .. } | Step::User(_) => None,
    }
}

/// Copy `from` (a file or a directory, inside the build) to `to`, as
/// Docker's `COPY` does.
fn copy_code(from: &str, to: &str) -> String {
    let (from, to) = (sq(from), sq(to));
    format!(
        "if [ -d {from} ]; then mkdir -p {to} && cp -a {from}/. {to}/; \
         elif [[ {to} == */ ]]; then mkdir -p {to} && cp -a {from} {to}; \
         else mkdir -p \"$(dirname {to})\" && cp -a {from} {to}; fi\n"
    )
}

/// The body of step 0, which creates the agent account (`None` for root).
pub fn account_body(user: &str, home: &str) -> Option<StepBody> {
    if user == "root" {
        return None;
    }
    let (u, h) = (sq(user), sq(home));
    Some(StepBody {
        code: format!(
            "( if ! grep -q '^{user}:' /etc/passwd; then \
             sed -i '/^[^:]*:[^:]*:1000:/d' /etc/passwd /etc/group; \
             [ -f /etc/shadow ] && sed -i '/^{user}:/d' /etc/shadow; \
             echo {u}':x:1000:1000::'{h}':/bin/bash' >> /etc/passwd; \
             echo {u}':x:1000:' >> /etc/group; \
             [ -f /etc/shadow ] && echo {u}':!:19000::::::' >> /etc/shadow; true; fi \
             && mkdir -p {h} && __chown \"$(id -u {u}):$(id -g {u})\" {h} )\n"
        ),
        file: None,
        writable_context: false,
    })
}

/// The body of the last step: the workdir and home exist and belong to
/// the agent; the agent's ids are printed.
pub fn finish_body(user: &str, home: &str, workdir: &str) -> StepBody {
    let (w, h, u) = (sq(workdir), sq(home), sq(user));
    let mut code = format!("mkdir -p {w} {h}");
    if user != "root" {
        code.push_str(&format!(
            " && __chown -R \"$(id -u {u}):$(id -g {u})\" {h} && \
             case {w} in {h}|{h}/*) __chown -R \"$(id -u {u}):$(id -g {u})\" {w};; esac"
        ));
    }
    code.push_str(&format!(
        " && printf '\\n{USER_MARK}%s %s@@\\n' \"$(id -u {u})\" \"$(id -g {u})\"\n"
    ));
    StepBody {
        code,
        file: None,
        writable_context: false,
    }
}

/// The whole script of step `n`: the prelude (rootless flag, the image's
/// and earlier steps' environment, the working directory and user), then
/// the body, then the failure mark. `rootless` builds (in a user namespace
/// with one mapped id) cannot change owners or switch users: those parts
/// are skipped.
pub fn step_script(
    n: usize,
    body: &StepBody,
    state: &StepState,
    image_env: &str,
    rootless: bool,
) -> String {
    let mut s = String::from("#!/bin/bash\n");
    s.push_str(if rootless {
        "__rootless=1\n"
    } else {
        "__rootless=\n"
    });
    s.push_str("__chown() { if [ -n \"$__rootless\" ]; then return 0; fi; chown \"$@\"; }\n");
    s.push_str(image_env);
    s.push_str(&state.exports);
    s.push_str(&format!("printf '\\n{STEP_MARK}{n}@@\\n'\n"));
    let fail = |at: usize| {
        format!("__st=$?; if [ $__st -ne 0 ]; then printf '\\n{FAIL_MARK}{at} %s@@\\n' $__st; exit 97; fi\n")
    };
    s.push_str("__u=root\ncd /\n");
    if let Some(dir) = &state.cwd {
        s.push_str(&format!("cd {}\n", sq(dir)));
        s.push_str(&fail(n));
    }
    if let Some((u, at)) = &state.user {
        s.push_str(&format!("id -u {u} >/dev/null\n", u = sq(u)));
        s.push_str(&fail(*at));
        s.push_str(&format!("[ -n \"$__rootless\" ] || __u={}\n", sq(u)));
    }
    s.push_str(&body.code);
    s.push_str(&fail(n));
    s
}

/// The agent's environment file: exports from `ENV` steps, then the
/// definition's `%environment` script.
pub fn env_file(def: &EnvDefinition) -> String {
    let mut s = String::new();
    for (k, v) in def.env_vars() {
        if !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            s.push_str(&format!("export {k}={}\n", env_word(v)));
        }
    }
    s.push_str(&def.session_script);
    s.push('\n');
    s
}

/// Find the failing step in a build's output: (step number, its status, its output).
pub fn failed_step(output: &str) -> Option<(usize, Option<i32>, String)> {
    let at = output.rfind(FAIL_MARK)?;
    let rest = &output[at + FAIL_MARK.len()..];
    let end = rest.find("@@")?;
    let mut parts = rest[..end].split_whitespace();
    let n: usize = parts.next()?.parse().ok()?;
    let code = parts.next().and_then(|c| c.parse().ok());
    let from = output[..at]
        .rfind(STEP_MARK)
        .map(|p| p + STEP_MARK.len())
        .and_then(|q| output[q..at].find("@@").map(|e| q + e + 2))
        .unwrap_or(0);
    Some((n, code, output[from..at].trim().to_string()))
}

/// The output after the last step marker (for a step that died without a
/// failure mark).
pub fn last_step(output: &str) -> Option<(usize, String)> {
    let at = output.rfind(STEP_MARK)?;
    let rest = &output[at + STEP_MARK.len()..];
    let end = rest.find("@@")?;
    let n = rest[..end].parse().ok()?;
    Some((n, rest[end + 2..].trim().to_string()))
}

/// The agent's uid and gid reported at the end of a build.
pub fn user_ids(output: &str) -> Option<(u32, u32)> {
    let at = output.rfind(USER_MARK)?;
    let rest = &output[at + USER_MARK.len()..];
    let end = rest.find("@@")?;
    let mut parts = rest[..end].split_whitespace();
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// All output lines except the protocol markers.
pub fn without_markers(output: &str) -> String {
    output
        .lines()
        .filter(|l| !l.starts_with("@@ENDLESS-"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_names_step_and_output() {
        let out = "\n@@ENDLESS-STEP 1@@\nhello\nboom\n\n@@ENDLESS-FAIL 1 3@@\n";
        let (n, code, text) = failed_step(out).unwrap();
        assert_eq!((n, code), (1, Some(3)));
        assert_eq!(text, "hello\nboom");
        assert_eq!(
            user_ids("x\n@@ENDLESS-USER 1000 1000@@\n"),
            Some((1000, 1000))
        );
    }

    #[test]
    fn env_values_expand_only_variables_and_run_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let canary = dir.path().join("ran");
        let c = canary.display();
        let cases = [
            (
                "/opt/bin:$PATH".to_string(),
                "/opt/bin:/usr/bin".to_string(),
            ),
            ("${PATH}/x".into(), "/usr/bin/x".into()),
            (format!("$(touch {c})"), format!("$(touch {c})")),
            (format!("`touch {c}`"), format!("`touch {c}`")),
            (
                format!("${{X:-$(touch {c})}}"),
                format!("${{X:-$(touch {c})}}"),
            ),
            (
                "it's \\ \"q\" $ $1 ${} end$".into(),
                "it's \\ \"q\" $ $1 ${} end$".into(),
            ),
            (String::new(), String::new()),
        ];
        for (value, want) in cases {
            let script = format!(
                "PATH=/usr/bin\nexport V={}\nprintf %s \"$V\"",
                env_word(&value)
            );
            let out = std::process::Command::new("/bin/bash")
                .args(["-c", &script])
                .output()
                .unwrap();
            assert_eq!(
                String::from_utf8_lossy(&out.stdout),
                want,
                "{value:?} as {script}"
            );
            assert!(!canary.exists(), "{value:?} ran a command");
        }
    }

    #[test]
    fn each_step_gets_the_state_of_the_steps_before_it() {
        let steps = [
            Step::Env {
                key: "A".into(),
                value: "it's \"$PATH\"".into(),
            },
            Step::Run("echo $A".into()),
            Step::Workdir("/app".into()),
            Step::User("bob".into()),
            Step::Copy {
                src: "files/x".into(),
                dst: "/app/".into(),
            },
            Step::Script("setup.sh".into()),
        ];
        let mut state = StepState::default();
        let mut scripts = Vec::new();
        for (i, step) in steps.iter().enumerate() {
            if let Some(b) = body(step, i + 1) {
                scripts.push((i + 1, step_script(i + 1, &b, &state, "", false), b));
            }
            state.after(i + 1, step);
        }
        let numbers: Vec<usize> = scripts.iter().map(|s| s.0).collect();
        assert_eq!(numbers, vec![2, 3, 5, 6], "ENV and USER leave no layer");
        let (_, run, b) = &scripts[0];
        assert!(run.contains(r#"export A='it'\''s "'"${PATH}"'"'"#), "{run}");
        assert_eq!(b.file, Some(("2.sh".to_string(), "echo $A".to_string())));
        let (_, copy, _) = &scripts[2];
        assert!(copy.contains("cd '/app'") && copy.contains("id -u 'bob'"));
        assert!(
            copy.contains("@@ENDLESS-FAIL 4 "),
            "a bad USER names its step: {copy}"
        );
        assert!(scripts[3].2.writable_context && !scripts[2].2.writable_context);
        let def = EnvDefinition {
            steps: steps.to_vec(),
            session_script: "export B=2".into(),
            ..Default::default()
        };
        assert_eq!(
            env_file(&def),
            "export A='it'\\''s \"'\"${PATH}\"'\"'\nexport B=2\n"
        );
        assert_eq!(describe(&def.steps[4]), "COPY files/x /app/");
    }
}
