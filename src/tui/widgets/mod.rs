//! Small reusable widgets.

pub mod empty;
pub mod highlight;
pub mod input;
