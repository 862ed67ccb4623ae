//! The HTTP header names of the MCP transport and the Base64 sentinel
//! encoding of header values (`Mcp-Name`, `Mcp-Param-*`): values that are
//! not plain visible ASCII travel Base64-encoded.

use base64::Engine as _;
use http::HeaderName;

/// The `MCP-Protocol-Version` request header.
pub(crate) const MCP_PROTOCOL_VERSION_HEADER: HeaderName =
    HeaderName::from_static("mcp-protocol-version");
/// The `Mcp-Session-Id` header of the 2025-era transport: minted by the
/// server on `initialize`, sent back by the client on every later request
/// (see [`SessionLimits`](super::SessionLimits)).
pub(crate) const MCP_SESSION_ID_HEADER: HeaderName = HeaderName::from_static("mcp-session-id");
/// The prefix of the `Mcp-Param-{Name}` headers, as the spec writes it.
pub(crate) const MCP_PARAM_HEADER_PREFIX: &str = "Mcp-Param-";
pub(crate) use crate::protocol::{MCP_METHOD_HEADER, MCP_NAME_HEADER};

/// Asks nginx-style proxies not to buffer an SSE response.
pub(crate) const X_ACCEL_BUFFERING: HeaderName = HeaderName::from_static("x-accel-buffering");

const SENTINEL_PREFIX: &str = "=?base64?";
const SENTINEL_SUFFIX: &str = "?=";

/// Encodes a value for `Mcp-Name` / `Mcp-Param-*`: as-is when it is plain
/// visible ASCII (spaces inside allowed) and not sentinel-shaped, otherwise
/// `=?base64?…?=` of its UTF-8.
pub(crate) fn encode_header_value(value: &str) -> String {
    let sentinel_shaped = value.starts_with(SENTINEL_PREFIX) && value.ends_with(SENTINEL_SUFFIX);
    let plain = value.bytes().all(|b| (0x20..=0x7e).contains(&b))
        && !value.starts_with(' ')
        && !value.ends_with(' ')
        && !sentinel_shaped;
    if plain {
        value.to_owned()
    } else {
        format!(
            "{SENTINEL_PREFIX}{}{SENTINEL_SUFFIX}",
            base64::engine::general_purpose::STANDARD.encode(value.as_bytes())
        )
    }
}

/// Decodes a header value that may use the Base64 sentinel encoding.
/// `None` when the sentinel is malformed (bad Base64 or not UTF-8).
// `pub` for the fuzz entry points (`__fuzz`).
#[cfg_attr(not(feature = "fuzzing"), allow(unreachable_pub))]
pub fn decode_header_value(value: &str) -> Option<String> {
    match value
        .strip_prefix(SENTINEL_PREFIX)
        .and_then(|v| v.strip_suffix(SENTINEL_SUFFIX))
    {
        Some(b64) => base64::engine::general_purpose::STANDARD
            .decode(b64.as_bytes())
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok()),
        None => Some(value.to_owned()),
    }
}

/// The methods whose requests carry `Mcp-Name`, and the params field it mirrors.
pub(crate) fn name_field(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        // The tasks extension: routes a task's requests to the replica
        // holding it (transports-streamable-http.md; tasks.md § Routing Headers).
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinel_examples_from_the_spec() {
        assert_eq!(encode_header_value("get_weather"), "get_weather");
        assert_eq!(
            encode_header_value("Hello, 世界"),
            "=?base64?SGVsbG8sIOS4lueVjA==?="
        );
        assert_eq!(
            decode_header_value("=?base64?SGVsbG8sIOS4lueVjA==?=").unwrap(),
            "Hello, 世界"
        );
        assert_eq!(encode_header_value("us-west1"), "us-west1");
        assert_eq!(encode_header_value(" padded "), "=?base64?IHBhZGRlZCA=?=");
        assert_eq!(
            encode_header_value("line1\nline2"),
            "=?base64?bGluZTEKbGluZTI=?="
        );
        assert_eq!(
            encode_header_value("=?base64?literal?="),
            "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="
        );
        assert_eq!(
            decode_header_value("=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?=").unwrap(),
            "=?base64?literal?="
        );
        assert_eq!(decode_header_value("=?base64?!!!?="), None);
        assert_eq!(decode_header_value("plain").unwrap(), "plain");
    }
}
