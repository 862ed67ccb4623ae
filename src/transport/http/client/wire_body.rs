//! [`WireBody`]: the body of the client's requests — fixed bytes, or a
//! JSON-RPC request whose budget is counted when hyper first polls the
//! body, once the connection is open and the head written: the time
//! opening a connection took (a TLS handshake, up to the connect timeout)
//! is not given to the peer.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;

use crate::timeout::WireRequest;

/// A request body (see the [module docs](self)). A stamped body's length is
/// known before it is polled, for its `Content-Length`: that of its first
/// encoding. A budget only shrinks, so the encoding made when the body is
/// polled is at most that long, and is padded with spaces (whitespace after
/// a JSON value) to it.
pub(super) enum WireBody {
    Fixed(Full<Bytes>),
    Stamped {
        /// Taken when the body is polled.
        request: Option<WireRequest>,
        /// The first encoding: its length is the body's; sent as it is
        /// should the later one not encode, or be longer.
        first: Bytes,
    },
}

impl WireBody {
    /// `request`'s body, encoded now for its length (and to fail early if
    /// it cannot be), again when polled.
    pub(super) fn stamped(request: WireRequest) -> Result<Self, serde_json::Error> {
        let first = Bytes::from(request.encode()?);
        Ok(Self::Stamped {
            request: Some(request),
            first,
        })
    }
}

impl Body for WireBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            Self::Fixed(body) => Pin::new(body).poll_frame(cx),
            Self::Stamped { request, first } => {
                let Some(request) = request.take() else {
                    return Poll::Ready(None);
                };
                let first = std::mem::take(first);
                let bytes = match request.encode() {
                    Ok(mut now) if now.len() <= first.len() => {
                        now.resize(first.len(), b' ');
                        Bytes::from(now)
                    }
                    _ => first,
                };
                Poll::Ready(Some(Ok(Frame::data(bytes))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Self::Fixed(body) => body.is_end_stream(),
            Self::Stamped { request, .. } => request.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Self::Fixed(body) => body.size_hint(),
            Self::Stamped { request: None, .. } => SizeHint::with_exact(0),
            Self::Stamped { first, .. } => SizeHint::with_exact(first.len() as u64),
        }
    }
}
