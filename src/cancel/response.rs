//! [`GuardResponse`]: how far the disconnect guard reaches — the response
//! future ([`Passthrough`]) or an `http::Response` body ([`GuardBody`]).

use crate::cancel::body::CancelOnDropBody;
use crate::cancel::guard::DisconnectGuard;

/// How [`CancelOnDisconnect`](super::CancelOnDisconnect) hands its guard to
/// the response: implemented by [`Passthrough`] and [`GuardBody`] only
/// (sealed).
pub trait GuardResponse<T>: sealed::Sealed {
    /// The response type after guarding.
    type Output;
    /// Takes over (or ends) the guard for a response that is ready.
    #[doc(hidden)]
    fn guard(response: T, guard: DisconnectGuard) -> Self::Output;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Passthrough {}
    impl Sealed for super::GuardBody {}
}

/// The response is complete when the future is: the request is marked
/// completed and the response passes through unchanged.
#[derive(Debug, Clone, Copy, Default)]
pub struct Passthrough;

impl<T> GuardResponse<T> for Passthrough {
    type Output = T;
    fn guard(response: T, guard: DisconnectGuard) -> T {
        guard.complete();
        response
    }
}

/// An `http::Response` is complete when its body reached its end: the body is
/// wrapped in a [`CancelOnDropBody`] that fires the token if dropped before.
#[derive(Debug, Clone, Copy, Default)]
pub struct GuardBody;

impl<B: http_body::Body> GuardResponse<http::Response<B>> for GuardBody {
    type Output = http::Response<CancelOnDropBody<B>>;
    fn guard(response: http::Response<B>, guard: DisconnectGuard) -> Self::Output {
        response.map(|body| CancelOnDropBody::new(body, guard))
    }
}
