//! The client's connector — plain TCP, or TLS through rustls with feature
//! `tls` — and the connect errors told apart: refused, DNS, TLS (and why),
//! `https://` without the feature.

use std::error::Error as StdError;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use http::Uri;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::{Builder, Client};

use super::wire_body::WireBody;
use super::HttpClientError;
use crate::error::BoxError;

/// The connector that makes the connection.
#[cfg(feature = "tls")]
pub(super) type Connector = hyper_rustls::HttpsConnector<HttpConnector>;
/// The connector that makes the connection.
#[cfg(not(feature = "tls"))]
pub(super) type Connector = HttpConnector;

/// The default bound on making a connection (TCP, and the TLS handshake).
pub(super) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest timer armed (ten years: "never" in practice; a larger one
/// could overflow an `Instant`).
const MAX_TIMER: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// The pooled hyper client, and what became of its connection attempts
/// (which [`send`](super::send::send) needs to tell why the pool gave up on
/// a request).
#[derive(Clone, Debug)]
pub(super) struct PooledClient<C = Connector> {
    pub(super) hyper: Client<Timed<C>, WireBody>,
    pub(super) failures: Arc<ConnectFailures>,
}

impl<C> PooledClient<C>
where
    Timed<C>: hyper_util::client::legacy::connect::Connect + Clone,
{
    /// `builder`'s client over `connector`, each connect bounded by `timeout`.
    pub(super) fn new(builder: &Builder, connector: C, timeout: Option<Duration>) -> Self {
        let failures = Arc::new(ConnectFailures::default());
        let connector = Timed {
            connector,
            timeout: timeout.map(|t| t.min(MAX_TIMER)),
            failures: failures.clone(),
        };
        Self {
            hyper: builder.build(connector),
            failures,
        }
    }
}

/// The connection attempts that failed: how many, and how the last one did.
///
/// Over HTTP/2, concurrent calls share one connection attempt, run by the
/// first of them; when it ends without a connection, hyper-util's pool
/// tells the others only that it is gone (`CheckoutNoLongerWanted`). That
/// has two causes, which call for opposite answers: the attempt failed (the
/// others fail the same way: trying again would make each of them wait for
/// a connect of its own, one after the other), or the call running it was
/// dropped (nothing of theirs was sent: they try again). A failure is
/// recorded before hyper-util learns of it, so before the others are told.
#[derive(Debug, Default)]
pub(super) struct ConnectFailures(Mutex<Failures>);

#[derive(Debug, Default)]
struct Failures {
    count: u64,
    last: Option<(ConnectErrorKind, String)>,
}

impl ConnectFailures {
    fn lock(&self) -> std::sync::MutexGuard<'_, Failures> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn record(&self, e: &(dyn StdError + 'static)) {
        let failed = connect_kind(e);
        let mut f = self.lock();
        f.count += 1;
        f.last = Some(failed);
    }

    /// How many attempts have failed so far.
    pub(super) fn count(&self) -> u64 {
        self.lock().count
    }

    /// If an attempt failed after `count` was read: the last failure, as
    /// the error of a call to `uri`.
    pub(super) fn since(&self, count: u64, uri: &Uri) -> Option<HttpClientError> {
        let f = self.lock();
        if f.count == count {
            return None;
        }
        let (kind, detail) = f.last.clone()?;
        Some(kind.into_error(target(uri), detail))
    }
}

/// A connector with a bound on the whole connect: name resolution, TCP
/// and, for `https://`, the TLS handshake. A connect that takes longer
/// fails with an `io::Error` of kind `TimedOut`. Every failure is recorded
/// in [`ConnectFailures`].
#[derive(Clone, Debug)]
pub(super) struct Timed<C = Connector> {
    connector: C,
    timeout: Option<Duration>,
    failures: Arc<ConnectFailures>,
}

impl<C> tower_service::Service<Uri> for Timed<C>
where
    C: tower_service::Service<Uri>,
    C::Error: Into<BoxError>,
    C::Future: Send + 'static,
{
    type Response = C::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.connector.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connect = self.connector.call(uri);
        let timeout = self.timeout;
        let failures = self.failures.clone();
        Box::pin(async move {
            let connected = match timeout {
                None => connect.await.map_err(Into::into),
                Some(t) => match tokio::time::timeout(t, connect).await {
                    Ok(connected) => connected.map_err(Into::into),
                    Err(_) => Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("no connection within the connect timeout ({t:?})"),
                    )
                    .into()),
                },
            };
            if let Err(e) = &connected {
                failures.record(&**e);
            }
            connected
        })
    }
}

/// The TLS settings of a builder.
#[derive(Debug, Default)]
pub(super) struct TlsSettings {
    /// Extra trusted roots (DER), besides the platform's.
    #[cfg(feature = "tls")]
    pub(super) roots: Vec<rustls::pki_types::CertificateDer<'static>>,
}

/// The connector for `uri`: with feature `tls`, `https://` through rustls
/// trusting the platform's roots (`SSL_CERT_FILE` / `SSL_CERT_DIR` when set,
/// as rustls-native-certs reads them) and `tls.roots`; the roots are only
/// loaded for an `https://` endpoint.
#[cfg(feature = "tls")]
pub(super) fn connector(uri: &Uri, tls: TlsSettings) -> Connector {
    use std::sync::Arc;
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let mut roots = rustls::RootCertStore::empty();
    if uri.scheme() == Some(&http::uri::Scheme::HTTPS) {
        let native = rustls_native_certs::load_native_certs();
        for e in &native.errors {
            tracing::warn!(error = %e, "some platform root certificates could not be loaded");
        }
        let (added, ignored) = roots.add_parsable_certificates(native.certs);
        tracing::debug!(added, ignored, "platform root certificates loaded");
    }
    for cert in tls.roots {
        if let Err(e) = roots.add(cert) {
            tracing::warn!(error = %e, "a configured root certificate was refused");
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        // Not a configuration value: ring supports TLS 1.2 and 1.3, which
        // are the safe defaults.
        .expect("ring supports the default TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(http)
}

/// The connector for `uri`: plain TCP (without feature `tls`, an
/// `https://` endpoint fails at its first call with
/// [`HttpClientError::TlsNotEnabled`]).
#[cfg(not(feature = "tls"))]
pub(super) fn connector(_uri: &Uri, _tls: TlsSettings) -> Connector {
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    http
}

/// An `https://` endpoint without feature `tls`: the error, before any
/// connection is tried.
pub(super) fn check_scheme(uri: &Uri) -> Result<(), HttpClientError> {
    if cfg!(feature = "tls") || uri.scheme() != Some(&http::uri::Scheme::HTTPS) {
        return Ok(());
    }
    Err(HttpClientError::TlsNotEnabled {
        target: target(uri),
    })
}

/// What failed when connecting to the server (the variant of
/// [`HttpClientError`] it becomes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ConnectErrorKind {
    Refused,
    Dns,
    #[cfg(feature = "tls")]
    Tls,
    Other,
}

impl ConnectErrorKind {
    fn into_error(self, target: String, detail: String) -> HttpClientError {
        match self {
            ConnectErrorKind::Refused => HttpClientError::ConnectionRefused { target, detail },
            ConnectErrorKind::Dns => HttpClientError::Dns { target, detail },
            #[cfg(feature = "tls")]
            ConnectErrorKind::Tls => HttpClientError::Tls { target, detail },
            ConnectErrorKind::Other => HttpClientError::ConnectionFailed { target, detail },
        }
    }
}

fn target(uri: &Uri) -> String {
    uri.authority().map(|a| a.to_string()).unwrap_or_default()
}

/// Turns a failure of the pooled client into an error that says what
/// failed: a connection failure as the [`HttpClientError`] variant of what
/// failed ([`HttpClientError::is_connect`]), the error itself otherwise.
pub(super) fn classify(uri: &Uri, e: hyper_util::client::legacy::Error) -> BoxError {
    if !e.is_connect() {
        return Box::new(e);
    }
    let (kind, detail) = connect_kind(&e);
    Box::new(kind.into_error(target(uri), detail))
}

fn connect_kind(e: &(dyn StdError + 'static)) -> (ConnectErrorKind, String) {
    let mut cur: Option<&(dyn StdError + 'static)> = Some(e);
    let mut deepest = e.to_string();
    while let Some(err) = cur {
        #[cfg(feature = "tls")]
        if let Some(tls) = err.downcast_ref::<rustls::Error>() {
            return (ConnectErrorKind::Tls, explain_tls(tls));
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::ConnectionRefused {
                return (ConnectErrorKind::Refused, io.to_string());
            }
            // `io::Error::source` skips the error it wraps (hyper-rustls
            // wraps tokio-rustls' io::Error, which wraps rustls' error):
            // look inside.
            if let Some(wrapped) = io.get_ref() {
                let found = connect_kind(wrapped);
                if found.0 != ConnectErrorKind::Other {
                    return found;
                }
            }
        }
        // hyper-util's HttpConnector names its resolver failures so.
        let text = err.to_string();
        if text.starts_with("dns error") {
            let why = err.source().map(|s| s.to_string()).unwrap_or(text);
            return (ConnectErrorKind::Dns, why);
        }
        deepest = text;
        cur = err.source();
    }
    (ConnectErrorKind::Other, deepest)
}

/// rustls' reason in words — what happened and what to do — followed by
/// rustls' own text, which names the error for a search
/// (`invalid peer certificate: UnknownIssuer`).
#[cfg(feature = "tls")]
fn explain_tls(e: &rustls::Error) -> String {
    use rustls::{AlertDescription as A, CertificateError as C, Error as E};
    const TRUST: &str = "SSL_CERT_FILE, SSL_CERT_DIR or HttpClientBuilder::tls_root_certificate";
    let raw = e.to_string();
    #[allow(deprecated)] // UnsupportedSignatureAlgorithm: still what older peers yield
    let why: Option<String> = match e {
        E::InvalidCertificate(c) => match c {
            C::UnknownIssuer => Some(format!(
                "the server's certificate is not signed by an authority this client trusts \
                 (it is self-signed, or from a private CA); trust that CA's certificate \
                 ({TRUST}), or use a certificate from a public CA"
            )),
            C::NotValidForName | C::NotValidForNameContext { .. } => Some(
                "the server's certificate is not valid for the host name in the URL; use a \
                 name the certificate lists (its subjectAltName), or issue one that lists \
                 this name"
                    .into(),
            ),
            C::Expired | C::ExpiredContext { .. } => Some(
                "the server's certificate has expired (or this machine's clock is wrong); \
                 renew the certificate"
                    .into(),
            ),
            C::NotValidYet | C::NotValidYetContext { .. } => Some(
                "the server's certificate is not valid yet; check the clocks of both machines"
                    .into(),
            ),
            C::Revoked => Some("the server's certificate has been revoked".into()),
            C::BadEncoding => Some("the server's certificate is malformed".into()),
            C::BadSignature => Some(
                "a signature in the server's certificate chain does not verify: the \
                 certificate was not signed by the trusted certificate of that name"
                    .into(),
            ),
            C::UnsupportedSignatureAlgorithm
            | C::UnsupportedSignatureAlgorithmContext { .. }
            | C::UnsupportedSignatureAlgorithmForPublicKeyContext { .. } => Some(
                "the server's certificate is signed with an algorithm this client does not \
                 accept; issue it with ECDSA (P-256, P-384), Ed25519 or RSA (2048 bits or \
                 more) and SHA-256 or stronger"
                    .into(),
            ),
            C::InvalidPurpose | C::InvalidPurposeContext { .. } => Some(
                "the server's certificate is not allowed for TLS server authentication; \
                 issue it with extendedKeyUsage serverAuth"
                    .into(),
            ),
            // rustls passes these webpki errors on by name only.
            C::Other(other) => webpki_reason(&other.to_string()).map(str::to_owned),
            _ => None,
        },
        E::InvalidMessage(_) => Some(
            "the server did not answer in TLS: does it speak plain HTTP on this port (then \
             use http://)?"
                .into(),
        ),
        E::NoCertificatesPresented => Some("the server presented no certificate".into()),
        E::PeerIncompatible(_) => Some(
            "the server and this client have no TLS version or cipher suite in common (this \
             client speaks TLS 1.2 and 1.3)"
                .into(),
        ),
        E::AlertReceived(A::CertificateRequired) => {
            Some("the server requires a client certificate, which this client does not send".into())
        }
        E::AlertReceived(A::HandshakeFailure | A::ProtocolVersion) => Some(
            "the server refused the handshake: no TLS version or cipher suite in common (this \
             client speaks TLS 1.2 and 1.3)"
                .into(),
        ),
        _ => None,
    };
    match why {
        Some(why) => format!("{why} (rustls: {raw})"),
        None => raw,
    }
}

/// The words for the webpki errors rustls reports as
/// `CertificateError::Other`, which it displays by their variant's name.
#[cfg(feature = "tls")]
fn webpki_reason(name: &str) -> Option<&'static str> {
    Some(match name {
        "CaUsedAsEndEntity" => {
            "the server presented a CA certificate as its own certificate (basicConstraints \
             CA:TRUE), which rustls refuses (curl accepts it); issue a leaf certificate for \
             the server's name signed by that CA (basicConstraints CA:FALSE) and keep \
             trusting the CA, or, for a self-signed test certificate, make it a leaf \
             (`openssl req -x509 … -addext basicConstraints=critical,CA:FALSE`) and trust it"
        }
        "EndEntityUsedAsCa" => {
            "the server's certificate chain has a leaf certificate (basicConstraints \
             CA:FALSE) as an issuer; issue the server's certificate from a CA certificate"
        }
        "UnsupportedCertVersion" => {
            "the server's certificate is an X.509 version 1 certificate; issue a version 3 \
             one (with a subjectAltName)"
        }
        "UnsupportedCriticalExtension" => {
            "the server's certificate has a critical extension this client cannot process"
        }
        "PathLenConstraintViolated" | "NameConstraintViolation" => {
            "the server's certificate chain breaks a constraint of one of its CAs"
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn https_without_the_feature_is_told_apart() {
        let https: Uri = "https://example.test/mcp".parse().unwrap();
        let http: Uri = "http://example.test/mcp".parse().unwrap();
        assert!(check_scheme(&http).is_ok());
        let r = check_scheme(&https);
        if cfg!(feature = "tls") {
            assert!(r.is_ok());
        } else {
            let Err(HttpClientError::TlsNotEnabled { target }) = r else {
                panic!("{r:?}")
            };
            assert_eq!(target, "example.test");
        }
    }

    /// Each TLS failure a user meets reads as what happened and what to
    /// do, and keeps rustls' own words for a search.
    #[cfg(feature = "tls")]
    #[test]
    fn tls_failures_are_explained() {
        use rustls::{AlertDescription, CertificateError, Error, InvalidMessage, OtherError};
        let other = |name: &str| {
            let e: Box<dyn std::error::Error + Send + Sync> = name.into();
            Error::InvalidCertificate(CertificateError::Other(OtherError(e.into())))
        };
        let cases = [
            (
                other("CaUsedAsEndEntity"),
                "presented a CA certificate as its own",
            ),
            (other("UnsupportedCertVersion"), "X.509 version 1"),
            (
                Error::InvalidCertificate(CertificateError::UnknownIssuer),
                "not signed by an authority this client trusts",
            ),
            (
                Error::InvalidCertificate(CertificateError::Expired),
                "has expired",
            ),
            (
                Error::InvalidCertificate(CertificateError::NotValidYet),
                "not valid yet",
            ),
            (
                Error::InvalidCertificate(CertificateError::InvalidPurpose),
                "serverAuth",
            ),
            (
                Error::InvalidMessage(InvalidMessage::InvalidContentType),
                "use http://",
            ),
            (
                Error::AlertReceived(AlertDescription::CertificateRequired),
                "client certificate",
            ),
        ];
        for (e, words) in cases {
            let text = explain_tls(&e);
            assert!(text.contains(words), "{e:?}: {text}");
            assert!(text.ends_with(&format!("(rustls: {e})")), "{text}");
        }
        // Unknown to us: rustls' text alone.
        assert_eq!(explain_tls(&other("Novel")), other("Novel").to_string());
    }
}
