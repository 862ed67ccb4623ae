//! Robustness: hostile peers ([`hostile`]), random interleavings against a
//! model ([`interleavings`]), shutdown with requests in flight
//! ([`shutdown`]) and the fuzzers' regressions ([`fuzz_regressions`]).
//!
//! The soak is a binary of its own (`tests/soak/`): it measures the
//! resident memory of its process, which other tests running in parallel
//! would disturb.

#[path = "../support/mod.rs"]
mod support;

mod fuzz_regressions;
mod hostile;
mod interleavings;
mod shutdown;
