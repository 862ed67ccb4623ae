//! stdio framing and message decoding, as the stdio server reads its input.
//!
//! Input: `[max, capacity, seed0, seed1, payload...]`. The payload goes
//! through the server's `LineReader` (maximum line size from `max`) over a
//! `BufReader` of `capacity` bytes over a reader that hands it out in chunks
//! of pseudo-random sizes and sometimes returns `Pending`; on `Pending` the
//! `next()` future is sometimes dropped (the server's `select!` does that),
//! so cancel-safety is exercised too. Checked: the frames are exactly the
//! lines of the payload (oversize ones reported with their length), and
//! each line decodes without panicking, with requests, notifications and
//! responses surviving an encode/decode round trip.
#![no_main]

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use libfuzzer_sys::fuzz_target;
use tokio::io::{AsyncRead, BufReader, ReadBuf};
use tower_mcp_cancel::__fuzz::{self as jsonrpc, Lines, Message};
use tower_mcp_cancel::jsonrpc::ErrorObject;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

/// Hands out `data` in chunks of 1..=17 bytes, returning `Pending` (after
/// waking itself) before some of them.
struct Chunked<'a> {
    data: &'a [u8],
    rng: Rng,
    pend: bool,
}

impl AsyncRead for Chunked<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let r = self.rng.next();
        if !self.pend && r & 3 == 0 {
            self.pend = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        self.pend = false;
        let n = ((r >> 8) % 17 + 1) as usize;
        let n = n.min(self.data.len()).min(buf.remaining());
        let (head, tail) = self.data.split_at(n);
        buf.put_slice(head);
        self.data = tail;
        Poll::Ready(Ok(()))
    }
}

fn expected_frames(payload: &[u8], max: usize) -> Vec<Result<Vec<u8>, usize>> {
    let frame = |seg: &[u8]| {
        if seg.len() > max {
            Err(seg.len())
        } else {
            Ok(seg.strip_suffix(b"\r").unwrap_or(seg).to_vec())
        }
    };
    let mut segs: Vec<&[u8]> = payload.split(|b| *b == b'\n').collect();
    let last = segs.pop().unwrap_or_default();
    let mut out: Vec<_> = segs.into_iter().map(frame).collect();
    if !last.is_empty() {
        out.push(frame(last));
    }
    out
}

fn check_decode(line: &[u8]) {
    match Message::decode(line) {
        Err(e) => assert!(
            e.code == ErrorObject::PARSE_ERROR || e.code == ErrorObject::INVALID_REQUEST,
            "unexpected decode error code {}",
            e.code
        ),
        Ok(Message::Request(r)) => {
            let again = jsonrpc::encode_request(&r.id, r.method.as_str(), r.params.as_deref())
                .expect("a decoded request encodes");
            let Ok(Message::Request(r2)) = Message::decode(&again) else {
                panic!(
                    "re-encoded request does not decode: {}",
                    String::from_utf8_lossy(&again)
                );
            };
            assert_eq!(r.id, r2.id);
            assert_eq!(r.method, r2.method);
            assert_eq!(r.progress_token, r2.progress_token);
        }
        Ok(Message::Notification(n)) => {
            if let Some(p) = n.params.as_deref() {
                let again = jsonrpc::encode_notification(n.method.as_str(), p)
                    .expect("decoded params encode");
                let Ok(Message::Notification(n2)) = Message::decode(&again) else {
                    panic!("re-encoded notification does not decode");
                };
                assert_eq!(n.method, n2.method);
            }
        }
        Ok(Message::Response(r)) => {
            let again = match &r.outcome {
                Ok(raw) => jsonrpc::encode_response(r.id.as_ref(), Ok(&**raw)),
                Err(e) => jsonrpc::encode_response::<()>(r.id.as_ref(), Err(e)),
            };
            let Ok(Message::Response(r2)) = Message::decode(&again) else {
                panic!(
                    "re-encoded response does not decode: {}",
                    String::from_utf8_lossy(&again)
                );
            };
            assert_eq!(r.id, r2.id);
            match (&r.outcome, &r2.outcome) {
                (Ok(_), Ok(_)) => {}
                (Err(a), Err(b)) => {
                    assert_eq!(a.code, b.code);
                    assert_eq!(a.message, b.message);
                }
                _ => panic!("outcome changed in the round trip"),
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let [m, cap, s0, s1, payload @ ..] = data else {
        return;
    };
    let max = if *m < 128 {
        1 + (*m as usize % 32)
    } else {
        (*m as usize - 127) * 16
    };
    let cap = 1 + (*cap as usize % 64);
    let seed = 0x9e37_79b9_7f4a_7c15 ^ (u64::from(*s0) << 8 | u64::from(*s1));
    let reader = Chunked {
        data: payload,
        rng: Rng(seed),
        pend: false,
    };
    let mut lines = Lines::new(BufReader::with_capacity(cap, reader), max);
    let mut cancel = Rng(seed.rotate_left(17) | 1);
    let waker = futures_util::task::noop_waker();
    let mut cx = Context::from_waker(&waker);

    let mut got = Vec::new();
    loop {
        let res = {
            let mut fut = Box::pin(lines.next());
            loop {
                match fut.as_mut().poll(&mut cx) {
                    Poll::Ready(r) => break Some(r),
                    // Pending: sometimes poll again, sometimes drop the future.
                    Poll::Pending if cancel.next() & 1 == 0 => break None,
                    Poll::Pending => {}
                }
            }
        };
        match res {
            None => continue,
            Some(Ok(None)) => break,
            Some(Ok(Some(frame))) => got.push(frame),
            Some(Err(e)) => panic!("in-memory read failed: {e}"),
        }
    }
    assert_eq!(
        got,
        expected_frames(payload, max),
        "max {max}, capacity {cap}"
    );
    for line in got.iter().filter_map(|f| f.as_ref().ok()) {
        check_decode(line);
    }
});
