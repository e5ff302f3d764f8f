//! Generation: [`local_model`] (loading and batched, KV-cached decoding),
//! [`sampling`] (temperature, top-p, log-probabilities), and [`shared`] (one
//! model serving many concurrent callers in batches).

pub mod local_model;
pub mod sampling;
pub mod shared;
