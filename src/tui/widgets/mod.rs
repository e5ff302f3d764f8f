//! Small reusable widgets.

pub mod empty;
pub mod form;
pub mod highlight;
pub mod input;
pub mod num;
pub mod task_marks;
