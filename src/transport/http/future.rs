//! The response future of the server adapter, as in tower.

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Response;

use super::body::ResponseBody;

/// The response future of [`StreamableHttpService`](super::StreamableHttpService). It owns the handler
/// future until the response head is ready; dropping it cancels the request.
#[must_use = "futures do nothing unless polled"]
pub struct ResponseFuture {
    inner: Pin<Box<dyn Future<Output = Response<ResponseBody>> + Send>>,
}

impl ResponseFuture {
    pub(crate) fn new(
        inner: impl Future<Output = Response<ResponseBody>> + Send + 'static,
    ) -> Self {
        Self {
            inner: Box::pin(inner),
        }
    }
}

impl fmt::Debug for ResponseFuture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ResponseFuture")
    }
}

impl Future for ResponseFuture {
    type Output = Result<Response<ResponseBody>, Infallible>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx).map(Ok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_types_are_send() {
        fn is_send<T: Send>() {}
        is_send::<ResponseBody>();
        is_send::<ResponseFuture>();
    }
}
