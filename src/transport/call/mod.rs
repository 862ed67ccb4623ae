//! The request lifecycle, once, for every transport.
//!
//! * [`client`]: the client side — ids, progress tokens and routes, the
//!   table of pending requests, and the cancel-on-drop guard with its log.
//! * [`server`]: one request from decode to its end — the race between the
//!   handler and its [`Cancellation`](crate::Cancellation) (the
//!   `CancelOnDisconnectLayer`'s own future), and the one decision of what
//!   ends it on the wire (an answer, a listen teardown, or nothing).
//!
//! Messages of a request leave through its gate in
//! [`notify::outbox`](crate::notify) (nothing after the request's end).
//! stdio keeps only its framing and write loop; HTTP keeps only its
//! validation and the JSON-versus-SSE shape.

pub(crate) mod client;
pub(crate) mod server;
