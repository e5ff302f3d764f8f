//! One pool of compute threads.
//!
//! candle 0.11 runs its matmuls (gemm) on rayon's threads, but its
//! elementwise ops on a pool of its own (`barrier_pool`: one worker fewer
//! than `CANDLE_NUM_THREADS`, each spinning up to 25,000 times before it sleeps, beside the
//! calling thread, which spins until they are done). With both pools sized
//! to the cores, a PPO update has twice as many busy threads as cores, and
//! a thread spinning for one pool holds the core the other pool's thread
//! waits for: on a loaded 2-core machine an update of the 1M model at 2
//! threads ran 3x slower than with the elementwise ops on the calling thread
//! (on a quiet one, within noise: `endless bench ppo`, see docs/benchmarks.md). This
//! crate's own kernels (the fused training ops, the quantized matmul, AdamW)
//! and gemm all use rayon's pool.

/// Give candle's elementwise ops no pool of their own (unless the user set
/// `CANDLE_NUM_THREADS`): rayon's pool is then the only one. Call before
/// any other thread starts, as `main` does first.
///
/// Also fixes the thread count in `RAYON_NUM_THREADS` (unless set) to what
/// candle would pick, the physical cores: candle 0.11 works it out again at
/// every matmul, and without the variable that means reading and parsing
/// `/proc/cpuinfo` each time (5% of a PPO run's rollout phase, sampling a
/// 1.9M-parameter policy). rayon's pool then has as many threads as gemm is
/// told to use.
pub fn use_one_pool() {
    if std::env::var_os("CANDLE_NUM_THREADS").is_none() {
        std::env::set_var("CANDLE_NUM_THREADS", "1");
    }
    if std::env::var_os("RAYON_NUM_THREADS").is_none() {
        let n = candle_core::utils::get_num_threads();
        std::env::set_var("RAYON_NUM_THREADS", n.to_string());
    }
}
