//! Verifying inside a sandbox: the verifier runs beside the agent's shell,
//! in the session's namespaces but out of the agent's reach.
//!
//! Owns a cold verifier run (`plan.rs`: the private mounts, sealed files
//! and the child that execs the interpreter), the pre-warmed verifier that
//! forks runs from a zygote (`warm.rs`), the verifier pre-started while the
//! agent works (`prestart.rs`) and the interpreter and loader copied from
//! the host that it runs (`runtime.rs`).
//!
//! May not touch: the local backend (`local/`) or image building
//! (`local/build`); it uses isolation (`isolate/`) and the backend-neutral
//! session.

pub mod plan;
pub mod prestart;
pub mod runtime;
pub mod warm;
