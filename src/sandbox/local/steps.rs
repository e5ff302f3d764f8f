//! Turn parsed setup steps into one bash build script with a marker before
//! each step, so that a failure names its step and shows its output.

use crate::task::envdef::{EnvDefinition, Step};

/// Where the build context (the task's `environment/`) is mounted during a build.
pub const CTX: &str = "/run/endless-build/ctx";
/// Where step scripts are mounted during a build.
pub const STEPS: &str = "/run/endless-build/steps";

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

/// Double-quote `s` for bash, keeping `$VAR` expansion (as Docker's `ENV` does).
pub fn dq(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        if matches!(c, '"' | '\\' | '`') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
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

/// The build script plus the step files it runs (`name`, `content`), to be
/// placed in [`STEPS`]. `rootless` builds (in a user namespace with one
/// mapped id) cannot change owners or switch users: those steps are skipped.
pub fn build_script(
    def: &EnvDefinition,
    user: &str,
    home: &str,
    workdir: &str,
    rootless: bool,
) -> (String, Vec<(String, String)>) {
    let mut s = String::from("#!/bin/bash\n__u=root\ncd /\n");
    s.push_str(if rootless {
        "__rootless=1\n"
    } else {
        "__rootless=\n"
    });
    s.push_str("__chown() { if [ -n \"$__rootless\" ]; then return 0; fi; chown \"$@\"; }\n");
    let mut files = Vec::new();
    let fail = |n: usize| {
        format!("__st=$?; if [ $__st -ne 0 ]; then printf '\\n{FAIL_MARK}{n} %s@@\\n' $__st; exit 97; fi\n")
    };
    s.push_str(&format!("printf '\\n{STEP_MARK}0@@\\n'\n"));
    if user != "root" {
        let (u, h) = (sq(user), sq(home));
        s.push_str(&format!(
            "( if ! grep -q '^{user}:' /etc/passwd; then \
             sed -i '/^[^:]*:[^:]*:1000:/d' /etc/passwd /etc/group; \
             [ -f /etc/shadow ] && sed -i '/^{user}:/d' /etc/shadow; \
             echo {u}':x:1000:1000::'{h}':/bin/bash' >> /etc/passwd; \
             echo {u}':x:1000:' >> /etc/group; \
             [ -f /etc/shadow ] && echo {u}':!:19000::::::' >> /etc/shadow; true; fi \
             && mkdir -p {h} && __chown \"$(id -u {u}):$(id -g {u})\" {h} )\n"
        ));
        s.push_str(&fail(0));
    }
    for (i, step) in def.steps.iter().enumerate() {
        let n = i + 1;
        s.push_str(&format!("printf '\\n{STEP_MARK}{n}@@\\n'\n"));
        match step {
            Step::Run(script) => {
                let name = format!("{n}.sh");
                files.push((name.clone(), script.clone()));
                s.push_str(&format!(
                    "if [ \"$__u\" = root ]; then bash -e {STEPS}/{name}; else runuser -u \"$__u\" -- bash -e {STEPS}/{name}; fi\n"
                ));
            }
            Step::Script(file) => {
                s.push_str(&format!(
                    "( cd {CTX} && bash {} )\n",
                    sq(&format!("{CTX}/{file}"))
                ));
            }
            Step::Copy { src, dst } => {
                let from = sq(&format!("{CTX}/{}", src.trim_start_matches("./")));
                let to = sq(dst);
                s.push_str(&format!(
                    "if [ -d {from} ]; then mkdir -p {to} && cp -a {from}/. {to}/; \
                     elif [[ {to} == */ ]]; then mkdir -p {to} && cp -a {from} {to}; \
                     else mkdir -p \"$(dirname {to})\" && cp -a {from} {to}; fi\n"
                ));
            }
            Step::Env { key, value } => {
                s.push_str(&format!("export {key}={}\n", dq(value)));
            }
            Step::Workdir(dir) => {
                s.push_str(&format!("mkdir -p {d} && cd {d}\n", d = sq(dir)));
            }
            Step::User(u) => {
                s.push_str(&format!(
                    "id -u {u} >/dev/null && {{ [ -n \"$__rootless\" ] || __u={u}; }}\n",
                    u = sq(u)
                ));
            }
        }
        s.push_str(&fail(n));
    }
    let done = def.steps.len() + 1;
    s.push_str(&format!("printf '\\n{STEP_MARK}{done}@@\\n'\n"));
    let (w, h, u) = (sq(workdir), sq(home), sq(user));
    s.push_str(&format!("mkdir -p {w} {h}\n"));
    if user != "root" {
        s.push_str(&format!("__chown -R \"$(id -u {u}):$(id -g {u})\" {h}\n"));
        s.push_str(&format!(
            "case {w} in {h}|{h}/*) __chown -R \"$(id -u {u}):$(id -g {u})\" {w};; esac\n"
        ));
    }
    s.push_str(&fail(done));
    s.push_str(&format!(
        "printf '\\n{USER_MARK}%s %s@@\\n' \"$(id -u {u})\" \"$(id -g {u})\"\n"
    ));
    (s, files)
}

/// The agent's environment file: exports from `ENV` steps, then the
/// definition's `%environment` script.
pub fn env_file(def: &EnvDefinition) -> String {
    let mut s = String::new();
    for (k, v) in def.env_vars() {
        if !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            s.push_str(&format!("export {k}={}\n", dq(v)));
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
    let mark = format!("{STEP_MARK}{n}@@");
    let from = output[..at]
        .rfind(&mark)
        .map(|p| p + mark.len())
        .unwrap_or(0);
    Some((n, code, output[from..at].trim().to_string()))
}

/// The last step marker seen (for a build that died without a failure mark).
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
        let out =
            "\n@@ENDLESS-STEP 0@@\n\n@@ENDLESS-STEP 1@@\nhello\nboom\n\n@@ENDLESS-FAIL 1 3@@\n";
        let (n, code, text) = failed_step(out).unwrap();
        assert_eq!((n, code), (1, Some(3)));
        assert_eq!(text, "hello\nboom");
        assert_eq!(
            user_ids("x\n@@ENDLESS-USER 1000 1000@@\n"),
            Some((1000, 1000))
        );
    }

    #[test]
    fn script_has_every_step() {
        let def = EnvDefinition {
            base: None,
            steps: vec![
                Step::Env {
                    key: "A".into(),
                    value: "it's \"$PATH\"".into(),
                },
                Step::Run("echo $A".into()),
                Step::Workdir("/app".into()),
                Step::Copy {
                    src: "files/x".into(),
                    dst: "/app/".into(),
                },
                Step::Script("setup.sh".into()),
            ],
            session_script: "export B=2".into(),
        };
        let (s, files) = build_script(&def, "user", "/home/user", "/home/user", false);
        assert!(s.contains("export A=\"it's \\\"$PATH\\\"\""), "{s}");
        assert!(s.contains("@@ENDLESS-STEP 5@@"));
        assert_eq!(files, vec![("2.sh".to_string(), "echo $A".to_string())]);
        assert_eq!(
            env_file(&def),
            "export A=\"it's \\\"$PATH\\\"\"\nexport B=2\n"
        );
        assert_eq!(describe(&def.steps[3]), "COPY files/x /app/");
    }
}
