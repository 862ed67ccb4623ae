//! Transports: what both share ([`dispatch`]), stdio, and Streamable HTTP.

pub mod dispatch;
#[cfg(feature = "stdio")]
pub mod stdio;

#[cfg(feature = "http")]
pub mod http;
