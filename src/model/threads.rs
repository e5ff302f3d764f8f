//! One pool of compute threads.
//!
//! candle 0.11 runs its matmuls (gemm) on rayon's threads, but its
//! elementwise ops on a pool of its own (`barrier_pool`: `CANDLE_NUM_THREADS
//! - 1` workers that spin up to 25,000 times before they sleep, beside the
//! calling thread, which spins until they are done). With both pools sized
//! to the cores, a PPO update has twice as many busy threads as cores, and
//! a thread spinning for one pool holds the core the other pool's thread
//! waits for: measured here at 2 threads, an update of the 1M model ran 3x
//! to 6x slower than with the elementwise ops on the calling thread (`endless
//! bench ppo`, see README). This crate's own kernels (the fused training
//! ops, the quantized matmul, AdamW) and gemm all use rayon's pool.

/// Give candle's elementwise ops no pool of their own (unless the user set
/// `CANDLE_NUM_THREADS`): rayon's pool is then the only one. Call before
/// any other thread starts, as `main` does first.
pub fn use_one_pool() {
    if std::env::var_os("CANDLE_NUM_THREADS").is_none() {
        std::env::set_var("CANDLE_NUM_THREADS", "1");
    }
}
