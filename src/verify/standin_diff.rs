//! What a stand-in lacks, read from a failure's output (issue 52): on an
//! image served by a stand-in (Debian built for `ubuntu:24.04` or
//! `python:3.X-slim`), a package missing from its archive, a version pin
//! of the image the task was written for (`r-base-core=4.3.3-2build2`),
//! no Python headers, Debian's pip, or a newer GCC are differences between
//! the stand-in and that image, not a broken task. Output showing none of
//! these gives none.

/// The first known stand-in difference `text` shows, and the line that
/// shows it (trimmed).
pub fn difference(text: &str) -> Option<(String, String)> {
    text.lines()
        .find_map(|line| of_line(line).map(|d| (d, line.trim().to_string())))
}

/// The difference one line shows.
fn of_line(line: &str) -> Option<String> {
    // apt: `E: Version '4.3.3-2build2' for 'r-base-core' was not found`
    if let Some(rest) = after(line, "Version '") {
        if let Some((version, rest)) = rest.split_once("' for '") {
            if let Some((package, _)) = rest.split_once("' was not found") {
                return Some(format!("version {package}={version} is not in its archive"));
            }
        }
    }
    // apt: `E: Unable to locate package r-base-core`
    if let Some(rest) = after(line, "Unable to locate package ") {
        let package = rest.split_whitespace().next()?;
        return Some(format!("package {package} is not in its archive"));
    }
    // apt: `E: Package 'libgl1-mesa-glx' has no installation candidate`
    if let Some(rest) = after(line, "Package '") {
        if let Some((package, _)) = rest.split_once("' has no installation candidate") {
            return Some(format!("package {package} is not in its archive"));
        }
    }
    if line.contains("Python.h: No such file or directory") {
        return Some("it has no Python headers (Python.h)".into());
    }
    // pip upgrading Debian's pip.
    if line.contains("RECORD file not found") && line.contains("Cannot uninstall") {
        return Some("its pip is Debian's, which pip cannot uninstall to upgrade".into());
    }
    if line.contains("error: implicit declaration of function") {
        return Some("its GCC makes an implicit function declaration an error (GCC 14)".into());
    }
    None
}

/// What follows `phrase` in `line`.
fn after<'a>(line: &'a str, phrase: &str) -> Option<&'a str> {
    line.find(phrase).map(|at| &line[at + phrase.len()..])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn diff(text: &str) -> Option<String> {
        difference(text).map(|(d, _)| d)
    }

    #[test]
    fn apt_pip_and_gcc_messages_name_the_difference() {
        // apt-get install r-base-core=4.3.3-2build2 (an Ubuntu pin) on Debian.
        let apt = "Reading package lists...\nBuilding dependency tree...\n\
                   Reading state information...\n\
                   E: Version '4.3.3-2build2' for 'r-base-core' was not found";
        let (d, line) = difference(apt).unwrap();
        assert_eq!(d, "version r-base-core=4.3.3-2build2 is not in its archive");
        assert_eq!(
            line,
            "E: Version '4.3.3-2build2' for 'r-base-core' was not found"
        );
        assert_eq!(
            diff("E: Unable to locate package python3.12-venv").as_deref(),
            Some("package python3.12-venv is not in its archive")
        );
        assert_eq!(
            diff("Package libgl1-mesa-glx is not available, but is referred to by another package.\n\
                  E: Package 'libgl1-mesa-glx' has no installation candidate")
            .as_deref(),
            Some("package libgl1-mesa-glx is not in its archive")
        );
        assert!(
            diff("      src/ext.c:1:10: fatal error: Python.h: No such file or directory")
                .unwrap()
                .contains("Python headers")
        );
        assert!(diff("ERROR: Cannot uninstall pip 23.0.1, RECORD file not found. Hint: The package was installed by debian.")
            .unwrap()
            .contains("Debian's"));
        assert!(diff("vuln.c:6:5: error: implicit declaration of function 'gets'; did you mean 'fgets'? [-Wimplicit-function-declaration]")
            .unwrap()
            .contains("GCC"));
    }

    #[test]
    fn other_failures_show_no_difference() {
        for text in [
            "E: Failed to fetch http://deb.debian.org/debian/pool/main/x/x_1.0_amd64.deb  404  Not Found",
            "ModuleNotFoundError: No module named 'numpy'",
            "make: *** [Makefile:3: all] Error 1",
        ] {
            assert_eq!(diff(text), None, "{text}");
        }
    }
}
