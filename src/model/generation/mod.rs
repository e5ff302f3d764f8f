//! Generation: [`local_model`] (loading and batched, KV-cached decoding),
//! [`batch_plan`] (which prompts of a batch sample together),
//! [`sampling`] (temperature, top-p, log-probabilities), and [`shared`] (one
//! model serving many concurrent callers in batches).

pub mod batch_plan;
pub mod local_model;
pub mod sampling;
pub mod shared;
