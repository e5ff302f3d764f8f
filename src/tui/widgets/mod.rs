//! Small reusable widgets and the styling helpers the views share (table
//! columns that give way by priority, fuzzy pickers, empty states, forms, text input, syntax highlighting, short numbers, task and
//! episode marks, truncation, terminal panes that follow their output, the
//! command line of a taken-over session).

pub mod columns;
pub mod double_click;
pub mod empty;
pub mod form;
pub mod highlight;
pub mod input;
pub mod num;
pub mod picker;
pub mod shell_line;
pub mod task_marks;
pub mod terminal;
pub mod text;
