//! OCI images: references, pulls from any registry, a content-addressed
//! store shared by all tasks, and safe layer unpacking. The `local` sandbox
//! uses a pulled image's layers as the base of a task whose environment
//! says `FROM <image>`.

mod base;
mod error;
mod load;
mod progress;
mod pull;
mod reference;
mod resolve;
mod store;
mod unpack;

pub use base::{build_base, debian_rootfs_tar, register_rootfs, BaseSpec};
pub use error::ImageError;
pub use load::{load, LoadReport};
pub use progress::{megabytes, no_progress, Progress, ProgressFn};
pub use pull::{client_for, pull, pull_from, PullReport};
pub use reference::{is_host, ImageRef, HOST};
pub use resolve::{Base, Resolver};
pub use store::{
    digest_hex, file_digest, ImageConfig, ImageStore, PruneReport, StoredImage, StoredLayer,
};
pub use unpack::{unpack_layer, unpack_tar, UnpackOptions, UnpackReport};
