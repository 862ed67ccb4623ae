//! Robustness: hostile peers ([`hostile`], [`hostile_cancels`],
//! [`hostile_input`], [`hostile_holding`]), random interleavings against a
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
mod hostile_cancels;
mod hostile_holding;
mod hostile_input;
mod interleavings;
mod shutdown;
