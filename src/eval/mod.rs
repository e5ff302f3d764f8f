//! Evaluation: pass rate, unbiased pass@k, failure modes per category and
//! complexity, run comparison, and reports (terminal table, JSON, Markdown
//! with PNG charts).

mod charts;
mod compare;
mod passk;
mod report;

pub use charts::{draw_failure_mix, draw_pass_rate_chart, ChartError};
pub use compare::{compare_runs, RunComparison, TaskFlip};
pub use passk::{pass_at_k, pass_at_k_table};
pub use report::{
    evaluate, format_table, paper_view_line, write_markdown_report, EvalReport, GroupStats,
    TaskStats, CHART_COLORS,
};
