//! Who owns, on the host, what a build step leaves (issue 48): the step
//! layers are the one place sandbox files reach the host's disk. As root,
//! every inside id is an id of the unprivileged range. For an operator
//! with a subordinate range, inside root is the operator (docs/security.md
//! says so) and every other inside id is an id of the range, never the
//! operator's nor any other host account's; a set-id bit a step set is
//! stripped either way. Without a range, only root exists inside.

use std::os::unix::fs::MetadataExt;

use endless::sandbox::local::HostIdentity;

#[allow(unused_imports)]
use super::*;

/// Files named `name` under `dir` (links not followed).
fn find(dir: &Path, name: &str) -> Vec<std::fs::Metadata> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .flatten()
        .filter(|e| e.file_name() == name)
        .filter_map(|e| e.path().symlink_metadata().ok())
        .collect()
}

#[test]
fn files_a_build_step_makes_are_owned_outside_by_the_range() {
    both(
        "files_a_build_step_makes_are_owned_outside_by_the_range",
        |b| {
            let nonce = format!("{}-{}", std::process::id(), uid());
            let (by_root, by_user) = (format!("root-{nonce}"), format!("user-{nonce}"));
            let mapped_users = !matches!(b.identity(), HostIdentity::Rootless(..));
            let setup = if mapped_users {
                format!(
                    "mkdir -p /srv/o && echo x > /srv/o/{by_root} && echo y > /srv/o/{by_user} \
                 && chown 1000:1000 /srv/o/{by_user} && chmod 6755 /srv/o/{by_user}\n"
                )
            } else {
                format!("mkdir -p /srv/o && echo x > /srv/o/{by_root}\n")
            };
            let t = task(&format!("atk-owners-{nonce}"), "root", &setup);
            let image = b.prepare(&t).unwrap();
            let cache = std::env::temp_dir().join(format!("endless-attacks-{}", uid()));
            let root_files = find(&cache.join("local"), &by_root);
            assert!(!root_files.is_empty(), "no step layer holds {by_root}");
            let (root_host, user_host) = match b.identity() {
                HostIdentity::Mapped(m) => (m.host(0), Some(m.host(1000))),
                HostIdentity::Subordinate(s) => {
                    // The one id of the operator's own inside is root's.
                    assert_eq!(s.host_uid(0), uid());
                    let user = s.host_uid(1000);
                    assert!(
                        user != uid() && (s.uid_start..s.uid_start + 65_536).contains(&user),
                        "inside 1000 must be an id of the range: {s:?}"
                    );
                    (s.host_uid(0), Some(user))
                }
                HostIdentity::Rootless(uid, _) => (uid, None),
            };
            for m in &root_files {
                assert_eq!(m.uid(), root_host, "{by_root} of a root build step");
            }
            if let Some(user_host) = user_host {
                let user_files = find(&cache.join("local"), &by_user);
                assert!(!user_files.is_empty(), "no step layer holds {by_user}");
                for m in &user_files {
                    assert_eq!(m.uid(), user_host, "{by_user}");
                    assert_eq!(m.mode() & 0o6000, 0, "set-id bits were left on {by_user}");
                }
            }
            let mut s = b.start(&image, &SessionOptions::default()).unwrap();
            let out = run(&mut s, &format!("stat -c %u /srv/o/{by_root}"));
            assert_eq!(out.trim(), "0", "{out}");
            if mapped_users {
                let out = run(&mut s, &format!("stat -c %u:%a /srv/o/{by_user}"));
                assert_eq!(out.trim(), "1000:755", "{out}");
            }
            s.close();
        },
    );
}
