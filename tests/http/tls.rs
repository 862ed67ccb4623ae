//! HTTPS (feature `tls`): `HttpClient` against our adapter behind rustls on
//! loopback, with a self-signed certificate made here, trusted through the
//! builder; the connect errors told apart — an untrusted certificate (TLS:
//! unknown issuer), a certificate for another name (TLS: not valid for
//! the name), a refused port, a name that does not resolve.
#![cfg(feature = "tls")]

use std::net::SocketAddr;
use std::sync::Arc;

use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::net::TcpListener;
use tower::{Service, ServiceExt};
use tower_mcp_cancel::transport::http::{HttpClient, HttpClientError, StreamableHttpService};
use tower_mcp_cancel::McpRequest;

use crate::support::http::{bounded, Tools};

/// A self-signed certificate for `localhost` and `127.0.0.1`: (cert DER,
/// key DER).
fn self_signed() -> (Vec<u8>, Vec<u8>) {
    let ck =
        rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    (ck.cert.der().to_vec(), ck.signing_key.serialize_der())
}

/// Serves the test tools over HTTPS on a loopback port.
async fn https_server(cert: Vec<u8>, key: Vec<u8>) -> SocketAddr {
    https_server_counting(cert, key).await.0
}

/// [`https_server`], and the count of TCP connections it accepted (counted
/// before their TLS handshake, in the order they were accepted).
async fn https_server_counting(
    cert: Vec<u8>,
    key: Vec<u8>,
) -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
    use tokio_rustls::rustls;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![rustls::pki_types::CertificateDer::from(cert)],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.into()),
        )
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let (tools, _events) = Tools::new();
    let svc = StreamableHttpService::new(tools.service());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        let _keep = _events;
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let acceptor = acceptor.clone();
            let svc = svc.clone();
            tokio::spawn(async move {
                // A client that refuses our certificate fails the handshake.
                let Ok(tls) = acceptor.accept(stream).await else {
                    return;
                };
                let hyper_svc = hyper::service::service_fn(move |req| svc.clone().oneshot(req));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), hyper_svc)
                    .await;
            });
        }
    });
    (addr, accepted)
}

fn echo() -> McpRequest {
    McpRequest::without_id("tools/call")
        .with_params(json!({"name": "echo", "arguments": {"text": "over tls"}}))
}

/// The error as the `HttpClientError` of a connection failure.
fn connect_error(err: &tower::BoxError) -> &HttpClientError {
    match err.downcast_ref::<HttpClientError>() {
        Some(e) if e.is_connect() => e,
        _ => panic!("not a connect error: {err}"),
    }
}

/// The detail of a failed TLS handshake.
fn tls_detail(err: &tower::BoxError) -> &str {
    match connect_error(err) {
        HttpClientError::Tls { detail, .. } => detail,
        other => panic!("not a TLS failure: {other}"),
    }
}

#[tokio::test]
async fn https_with_a_trusted_self_signed_certificate() {
    let (cert, key) = self_signed();
    let addr = https_server(cert.clone(), key).await;
    let mut c = HttpClient::builder(
        format!("https://localhost:{}/mcp", addr.port())
            .parse()
            .unwrap(),
    )
    .tls_root_certificate(cert)
    .build();
    let r = bounded(c.ready().await.unwrap().call(echo()))
        .await
        .unwrap();
    assert_eq!(r["content"][0]["text"], "over tls");
}

#[tokio::test]
async fn connect_errors_say_what_failed() {
    let (cert, key) = self_signed();
    let addr = https_server(cert.clone(), key).await;

    // Not trusted: TLS, unknown issuer.
    let mut c = HttpClient::new(
        format!("https://localhost:{}/mcp", addr.port())
            .parse()
            .unwrap(),
    );
    let err = bounded(c.ready().await.unwrap().call(echo()))
        .await
        .unwrap_err();
    let detail = tls_detail(&err);
    assert!(detail.contains("UnknownIssuer"), "{err}");
    assert!(
        detail.contains("not signed by an authority this client trusts"),
        "in words: {err}"
    );
    assert!(err.to_string().contains("TLS handshake failed"), "{err}");

    // Trusted, but not for that name: TLS, the name.
    let ck = rcgen::generate_simple_self_signed(vec!["other.test".into()]).unwrap();
    let (cert, key) = (ck.cert.der().to_vec(), ck.signing_key.serialize_der());
    let elsewhere = https_server(cert.clone(), key).await;
    let mut c = HttpClient::builder(
        format!("https://localhost:{}/mcp", elsewhere.port())
            .parse()
            .unwrap(),
    )
    .tls_root_certificate(cert)
    .build();
    let err = bounded(c.ready().await.unwrap().call(echo()))
        .await
        .unwrap_err();
    let detail = tls_detail(&err);
    assert!(detail.contains("not valid for name"), "{err}");
    assert!(
        detail.contains("not valid for the host name in the URL"),
        "in words: {err}"
    );

    // Nobody listening: refused.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut c = HttpClient::new(format!("http://127.0.0.1:{closed}/mcp").parse().unwrap());
    let err = bounded(c.ready().await.unwrap().call(echo()))
        .await
        .unwrap_err();
    assert!(
        matches!(
            connect_error(&err),
            HttpClientError::ConnectionRefused { .. }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("connection refused"), "{err}");

    // A name that cannot resolve (RFC 6761 reserves .invalid): DNS.
    let mut c = HttpClient::new("http://no-such-host.invalid/mcp".parse().unwrap());
    let err = bounded(c.ready().await.unwrap().call(echo()))
        .await
        .unwrap_err();
    assert!(
        matches!(connect_error(&err), HttpClientError::Dns { .. }),
        "{err}"
    );
}

/// The certificate most test setups make (`openssl req -x509 …`): self-signed
/// with `basicConstraints CA:TRUE`. rustls rightly refuses a CA certificate
/// as the server's own (curl accepts it); the error says so in words, and
/// what to do, instead of `Other(OtherError(CaUsedAsEndEntity))`.
#[tokio::test]
async fn a_ca_certificate_served_as_the_servers_own_is_explained() {
    let mut params =
        rcgen::CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    let der = cert.der().to_vec();
    let addr = https_server(der.clone(), key.serialize_der()).await;
    let mut c = HttpClient::builder(
        format!("https://localhost:{}/mcp", addr.port())
            .parse()
            .unwrap(),
    )
    .tls_root_certificate(der)
    .build();
    let err = bounded(c.ready().await.unwrap().call(echo()))
        .await
        .unwrap_err();
    let detail = tls_detail(&err);
    assert!(
        detail.contains("presented a CA certificate as its own"),
        "{err}"
    );
    assert!(detail.contains("CA:FALSE"), "what to do: {err}");
}

/// A failed TLS handshake is no era signal: the call fails with the TLS
/// error, no `initialize` is tried on another connection, and the client
/// stays in the era it was in. A trusting client then connects once; the
/// server has accepted exactly two connections by then (the failed one
/// was accepted first), three had the first client tried `initialize`.
#[tokio::test]
async fn a_tls_failure_does_not_fall_back_to_initialize() {
    use tower_mcp_cancel::transport::http::ServerEra;

    let (cert, key) = self_signed();
    let (addr, accepted) = https_server_counting(cert.clone(), key).await;
    let url = format!("https://localhost:{}/mcp", addr.port());
    let mut untrusting = HttpClient::new(url.parse().unwrap());
    let err = bounded(untrusting.ready().await.unwrap().call(echo()))
        .await
        .unwrap_err();
    assert!(tls_detail(&err).contains("UnknownIssuer"), "{err}");
    assert!(!err.to_string().contains("initialize"), "{err}");
    assert_eq!(untrusting.server_era(), ServerEra::Unknown);

    let mut trusting = HttpClient::builder(url.parse().unwrap())
        .tls_root_certificate(cert)
        .build();
    let r = bounded(trusting.ready().await.unwrap().call(echo()))
        .await
        .unwrap();
    assert_eq!(r["content"][0]["text"], "over tls");
    assert_eq!(trusting.server_era(), ServerEra::Stateless);
    assert_eq!(
        accepted.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "one connection per client"
    );
}

/// A server that accepts the TCP connection and never speaks: the TLS
/// handshake stalls. Returns its address; it holds the connections.
async fn silent_tls_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    addr
}

/// A TLS handshake that stalls fails the call after the connect timeout
/// (default 10 s), as a connect error; it does not hold the call forever.
#[tokio::test(start_paused = true)]
async fn a_stalled_tls_handshake_fails_after_the_connect_timeout() {
    let addr = silent_tls_port().await;
    let mut c = HttpClient::new(format!("https://{addr}/mcp").parse().unwrap());
    let start = tokio::time::Instant::now();
    let call = c
        .ready()
        .await
        .unwrap()
        .call(McpRequest::new(1, "tools/list"));
    let err = tokio::time::timeout(std::time::Duration::from_secs(3600), call)
        .await
        .expect("the handshake is bounded")
        .unwrap_err();
    assert_eq!(start.elapsed(), std::time::Duration::from_secs(10));
    let e = err.downcast_ref::<HttpClientError>().expect("{err}");
    assert!(e.is_connect(), "{e}");
    assert!(e.to_string().contains("connect timeout"), "{e}");
}

/// The setter moves that bound; `None` and `Duration::MAX` are "never",
/// without a panic.
#[tokio::test(start_paused = true)]
async fn the_connect_timeout_takes_any_value() {
    use std::time::Duration;
    let addr = silent_tls_port().await;
    let uri: http::Uri = format!("https://{addr}/mcp").parse().unwrap();
    let mut c = HttpClient::builder(uri.clone())
        .connect_timeout(Some(Duration::from_secs(2)))
        .build();
    let start = tokio::time::Instant::now();
    let call = c
        .ready()
        .await
        .unwrap()
        .call(McpRequest::new(1, "tools/list"));
    let err = tokio::time::timeout(Duration::from_secs(3600), call)
        .await
        .expect("the handshake is bounded")
        .unwrap_err();
    assert_eq!(start.elapsed(), Duration::from_secs(2), "{err}");
    for never in [None, Some(Duration::MAX)] {
        let mut c = HttpClient::builder(uri.clone())
            .connect_timeout(never)
            .build();
        let call = c
            .ready()
            .await
            .unwrap()
            .call(McpRequest::new(1, "tools/list"));
        assert!(
            tokio::time::timeout(Duration::from_secs(3600), call)
                .await
                .is_err(),
            "{never:?}: still connecting after an hour"
        );
    }
}
