//! Building the local backend's images: the stacked step layers of a task's
//! environment definition, the step cache they are shared through, the
//! verifier environments, and evicting what is no longer used.
//!
//! Owns turning a definition into step scripts (`steps.rs`), running one
//! step in a build sandbox (`buildstep.rs`), the build itself
//! (`image.rs`), the step cache (`stepcache.rs`), flattening layers for
//! export (`flatten.rs`), verifier environments (`verifier_env.rs`),
//! storing identical ones once (`env_sharing.rs`), eviction and holds on
//! live images (`evict.rs`) and telling a full disk apart (`diskfull.rs`),
//! and the build errors of a single-id operator (`single_id.rs`).
//!
//! Extends [`LocalBackend`](super::LocalBackend) (its build methods) and
//! uses isolation (`isolate/`); may not touch session control
//! (`local/control.rs`) or the build state report (`local/state.rs`).

pub mod buildstep;
pub mod diskfull;
mod env_sharing;
pub mod evict;
pub mod flatten;
pub mod image;
pub mod single_id;
pub mod stepcache;
pub mod steps;
pub mod verifier_env;
