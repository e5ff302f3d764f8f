//! OCI images: references, pulls from any registry, a content-addressed
//! store shared by all tasks, and safe layer unpacking. The `local` sandbox
//! uses a pulled image's layers as the base of a task whose environment
//! says `FROM <image>`; stand-ins built from Debian and PyPI serve the
//! Docker Hub and ghcr.io images tasks are written for when those cannot be
//! pulled.

mod base;
mod error;
mod hold;
mod load;
mod progress;
mod pull;
mod reference;
mod resolve;
mod standin;
mod standin_build;
mod store;
mod unpack;
mod wheel;

pub use base::{build_base, debian_rootfs_tar, register_layer, register_rootfs, BaseSpec};
pub use error::ImageError;
pub use hold::StoreHold;
pub use load::{load, LoadReport};
pub use progress::{megabytes, no_progress, Progress, ProgressFn};
pub use pull::{client_for, pull, pull_from, PullReport};
pub use reference::{is_host, ImageRef, HOST};
pub use resolve::{Base, Resolver};
pub use standin::{
    catalog_summary, default_set, stand_in_for, stand_in_of_note, Recipe, StandIn, STAND_IN_PREFIX,
};
pub use standin_build::{build_stand_ins, StandInReport};
pub use store::{
    digest_hex, file_digest, ImageConfig, ImageStore, PruneReport, StoredImage, StoredLayer,
};
pub use unpack::{unpack_layer, unpack_tar, LayerOwners, UnpackOptions, UnpackReport};
