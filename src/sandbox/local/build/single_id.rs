//! Build errors of an operator without subordinate ids: a rootless sandbox
//! then maps one id only, so a step that changes ownership or drops to
//! another user fails with "Invalid argument". Such an error says why, and
//! how an administrator grants a range (see `isolate/subids.rs`).

use crate::sandbox::subids::single_id_limits;
use crate::sandbox::SandboxError;

/// `e` with the reason and the remedy appended when its output shows an id
/// change refused with `EINVAL` (`chown` to an unmapped id, `apt-get`'s
/// `setgroups`, a user switch).
pub fn with_single_id_hint(e: SandboxError) -> SandboxError {
    match e {
        SandboxError::SetupStep {
            index,
            step,
            code,
            mut output,
            base_note,
        } if refused_id_change(&output) => {
            output.push('\n');
            output.push_str(&single_id_limits());
            SandboxError::SetupStep {
                index,
                step,
                code,
                output,
                base_note,
            }
        }
        e => e,
    }
}

/// Whether `output` shows an id change refused with `EINVAL`.
fn refused_id_change(output: &str) -> bool {
    const ID_CHANGES: [&str; 8] = [
        "chown",
        "ownership",
        "setgroups",
        "setgid",
        "setuid",
        "setresuid",
        "setegid",
        "seteuid",
    ];
    output
        .lines()
        .any(|l| l.contains("Invalid argument") && ID_CHANGES.iter().any(|w| l.contains(w)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(output: &str) -> SandboxError {
        SandboxError::SetupStep {
            index: 2,
            step: "RUN bash setup.sh".into(),
            code: Some(1),
            output: output.into(),
            base_note: None,
        }
    }

    #[test]
    fn id_changes_refused_in_a_single_id_sandbox_say_how_to_get_a_range() {
        for refused in [
            "chown: changing ownership of '/home/user': Invalid argument",
            "E: setgroups 65534 failed - setgroups (22: Invalid argument)",
        ] {
            let text = with_single_id_hint(step(refused)).to_string();
            assert!(
                text.contains("maps only your own id") && text.contains("usermod --add-subuids"),
                "{text}"
            );
        }
        let other = with_single_id_hint(step("cp: cannot stat 'x': No such file")).to_string();
        assert!(!other.contains("usermod"), "{other}");
    }
}
