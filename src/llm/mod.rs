//! Language models.
pub mod local;
