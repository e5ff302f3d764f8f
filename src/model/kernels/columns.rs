//! Splitting a kernel's output columns over rayon's threads (or the
//! spinning [`super::team`] the calling thread leads), shared by the
//! sampling kernels ([`super::q4_1`], [`super::few_rows`],
//! [`super::decode_attention`]).

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

    /// # Safety
    /// `start..start + len` is inside the buffer, and no other thread
    /// touches it while the slice lives.
    #[allow(clippy::mut_from_ref)]
    pub(super) unsafe fn slice(&self, start: usize, len: usize) -> &mut [f32] {
        unsafe { std::slice::from_raw_parts_mut(self.0.add(start), len) }
    }
}

/// `body` over disjoint ranges of the columns `0..n`, on the team this
/// thread leads or else rayon's threads, when `parallel` (the work is worth
/// waking them) and there are several.
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
    let item = |c: usize| body(c * per..((c + 1) * per).min(n));
    let count = n.div_ceil(per);
    if super::team::run(count, &item) {
        return;
    }
    use rayon::prelude::*;
    (0..count).into_par_iter().for_each(item);
}

/// `body(i, chunk)` for each `chunk`-long piece `i` of `out`, split like
/// [`for_columns`].
pub(super) fn for_chunks(
    out: &mut [f32],
    chunk: usize,
    parallel: bool,
    body: impl Fn(usize, &mut [f32]) + Sync,
) {
    let pieces = out.len() / chunk;
    let dst = SyncPtr(out.as_mut_ptr());
    for_columns(pieces, parallel, |range| {
        for i in range {
            // SAFETY: ranges are disjoint, so each piece has one writer, and
            // `out` outlives the loop.
            body(i, unsafe { dst.slice(i * chunk, chunk) });
        }
    });
}
