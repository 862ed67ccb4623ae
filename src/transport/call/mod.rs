//! The request lifecycle, once, for every transport.
//!
//! * [`client`]: the client side — ids, progress tokens and routes, the
//!   table of pending requests, and the cancel-on-drop guard with its log.
//! * [`outbox`]: how a request's messages leave — the gate that closes at
//!   the request's end, so that nothing scoped to a request is written after
//!   its response or its cancel, whichever task sends it.
//! * [`server`]: one request from decode to its end — the race between the
//!   handler and its [`Cancellation`](crate::Cancellation) (the
//!   `CancelOnDisconnectLayer`'s own future), and the one decision of what
//!   ends it on the wire (an answer, a listen teardown, or nothing).
//!
//! stdio keeps only its framing and write loop; HTTP keeps only its
//! validation and the JSON-versus-SSE shape.

// Without a transport only the handler side (the notifier) uses it.
#![cfg_attr(not(any(feature = "stdio", feature = "http")), allow(dead_code))]

#[cfg(any(feature = "stdio", feature = "http"))]
pub(crate) mod client;
pub(crate) mod outbox;
pub(crate) mod server;
