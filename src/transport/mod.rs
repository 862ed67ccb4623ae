//! Transports: what both share ([`dispatch`]), stdio, and Streamable HTTP.

pub mod dispatch;
#[cfg(any(feature = "stdio", feature = "http"))]
mod outbound;
#[cfg(feature = "stdio")]
pub mod stdio;

#[cfg(feature = "http")]
pub mod http;
