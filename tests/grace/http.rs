//! Grace over Streamable HTTP.
#![cfg(feature = "http")]
