//! Shared test support: a fixture OpenAI-compatible server and a plain
//! `bash` terminal/sandbox for tests that need no real sandbox.
#![allow(dead_code)]

/// Test binaries start as `endless` does: a user with subordinate ids runs
/// in their owner namespace (see `endless::sandbox::subids`), entered before
/// the test harness starts its threads (`setns` needs a single thread).
#[used]
#[link_section = ".init_array"]
static ENTER_SUBORDINATE_IDS: extern "C" fn() = {
    extern "C" fn enter() {
        endless::sandbox::subids::enter_owner_namespace();
    }
    enter
};

pub mod bash_terminal;
pub mod caches;
pub mod cli;
pub mod fixture_llm;
pub mod nobody;
pub mod range_user;
pub mod registry;
pub mod served;
pub mod verifier;
