//! Entry points for the coverage-guided fuzz targets in `fuzz/` (feature
//! `fuzzing`). Not a public API: it exposes crate-private pieces of the
//! wire path so that the fuzzers reach exactly the code a peer reaches: the
//! JSON-RPC codec, the header value decoding, the stdio framing, the HTTP
//! client's reading of a response.

#[cfg(feature = "stdio")]
pub use self::stdio::Lines;

pub use crate::jsonrpc::encode::{encode_notification, encode_request, encode_response};
pub use crate::jsonrpc::message::{DecodeError, Message, RawNotification, RawRequest, RawResponse};
#[cfg(feature = "http")]
pub use crate::transport::http::headers::decode_header_value;

/// The earlier protocol revisions the HTTP adapter recognizes as legacy.
pub const LEGACY_VERSIONS: &[&str] = crate::protocol::LEGACY_VERSIONS;

#[cfg(feature = "stdio")]
mod stdio {
    use std::io;

    use tokio::io::AsyncBufRead;

    use crate::transport::stdio::framing::{Frame, LineReader};

    /// The stdio server's line framing over `reader`, with lines of at most
    /// `max` bytes.
    pub struct Lines<R>(LineReader<R>);

    impl<R> std::fmt::Debug for Lines<R> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Lines")
        }
    }

    impl<R: AsyncBufRead + Unpin> Lines<R> {
        /// Frames `reader` with a maximum line size of `max` bytes.
        pub fn new(reader: R, max: usize) -> Self {
            Self(LineReader::new(reader, max))
        }

        /// The next frame: `Ok(line)` (without `\n` and a trailing `\r`) or
        /// `Err(len)` for a discarded oversize line of `len` bytes; `None`
        /// at end of input.
        pub async fn next(&mut self) -> io::Result<Option<Result<Vec<u8>, usize>>> {
            Ok(self.0.next().await?.map(|f| match f {
                Frame::Line(l) => Ok(l),
                Frame::TooLong { len, .. } => Err(len),
            }))
        }
    }
}

/// The HTTP client's reading of the answer to request `id` (JSON body or SSE
/// stream, progress for `token` recorded in `tap`), on any response.
#[cfg(feature = "http")]
pub async fn read_http_response<B>(
    res: http::Response<B>,
    id: &crate::jsonrpc::RequestId,
    tap: Option<crate::ProgressTap>,
    token: Option<crate::jsonrpc::ProgressToken>,
) -> Result<serde_json::Value, crate::error::BoxError>
where
    B: http_body::Body<Data = bytes::Bytes> + Unpin,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let route = crate::transport::call::client::Route { token, tap };
    use crate::transport::http::client::{read_response, MAX_RESPONSE_BYTES};
    read_response(res, id, route, MAX_RESPONSE_BYTES).await
}
