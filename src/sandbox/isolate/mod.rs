//! Isolating a process: the namespaces, mounts, filters and limits that
//! keep a sandboxed child (a session's shell, a build step, a verifier) away
//! from the host.
//!
//! Owns bubblewrap's arguments (`bwrap.rs`), user namespaces and id maps
//! (`userns.rs`), an operator's subordinate ids (`subids.rs`), the seccomp filter (`seccomp.rs`), the network namespace
//! wired by `pasta` (`net.rs`), the overlay and idmapped mounts made between
//! fork and exec (`overlay.rs`), the mask of private host files
//! (`mask.rs`), the minimal `/etc` (`etc.rs`), cgroup and rlimit limits
//! (`limits.rs`) and the backend's directories on disk (`layout.rs`).
//!
//! May not touch: images and their building (`local/build`), the verifier
//! (`verifier/`) or the backend that composes them (`local/`); it knows
//! only the backend-neutral types of `sandbox`.

pub mod bwrap;
pub mod etc;
pub mod layout;
pub mod limits;
pub mod mask;
pub mod net;
pub mod overlay;
pub mod seccomp;
pub mod subids;
pub mod userns;
