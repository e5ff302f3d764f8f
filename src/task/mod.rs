//! Tasks: the model, the native bundle format, validation and foreign formats.

mod baseline;
mod bundle;
pub mod envdef;
mod error;
mod escape;
pub mod formats;
mod model;
mod safe_read;
mod safe_read_error;
pub mod text;
mod validate;

pub use baseline::{baseline_digest, Baseline};
pub use bundle::{
    read_native, read_native_in, save_native_atomic, write_meta_atomic, write_native, write_tree,
};
pub use error::{BundleError, Problem};
pub use escape::terminal_safe;
pub use model::*;
pub use safe_read::{read_tree_bounded, BundleDir, ReadLimits, MAX_DEPTH};
pub use safe_read_error::SafeReadError;
pub use validate::validate;
