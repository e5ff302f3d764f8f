//! Splitting a kernel's output columns over rayon's threads, shared by the
//! sampling kernels ([`super::q4_1`], [`super::few_rows`]).

use std::ops::Range;

/// An output buffer written by several threads at disjoint positions.
pub(super) struct SyncPtr(pub(super) *mut f32);
// SAFETY: writers touch disjoint elements (each work item its own columns).
unsafe impl Sync for SyncPtr {}
unsafe impl Send for SyncPtr {}

impl SyncPtr {
    /// # Safety
    /// `i` is inside the buffer, and no other thread writes it.
    pub(super) unsafe fn write(&self, i: usize, v: f32) {
        unsafe { *self.0.add(i) = v }
    }
}

/// `body` over disjoint ranges of the columns `0..n`, on rayon's threads
/// when `parallel` (the work is worth waking them) and there are several.
pub(super) fn for_columns(n: usize, parallel: bool, body: impl Fn(Range<usize>) + Sync) {
    let threads = rayon::current_num_threads();
    if threads <= 1 || !parallel {
        body(0..n);
        return;
    }
    // A few work items per thread, so that a thread descheduled on a shared
    // machine leaves its share to the others.
    let items = (threads * 4).min(n);
    let per = n.div_ceil(items);
    use rayon::prelude::*;
    (0..n.div_ceil(per))
        .into_par_iter()
        .for_each(|c| body(c * per..((c + 1) * per).min(n)));
}
