//! [`ParamHeaders`]: the validated `x-mcp-header` annotations of one tool,
//! and what the client sends and the server checks with them.

use http::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

use super::error::{InvalidParamHeader, ParamHeaderMismatch, UnmirrorableValue};
use super::param::ParamHeader;
use super::schema;
use super::value::header_string;

/// The `x-mcp-header` annotations of one tool, validated.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ParamHeaders {
    params: Vec<ParamHeader>,
}

impl ParamHeaders {
    /// Parses and validates the `x-mcp-header` annotations of a tool's
    /// `inputSchema` (no annotations: an empty set).
    pub(crate) fn from_input_schema(schema: &Value) -> Result<Self, InvalidParamHeader> {
        Ok(Self {
            params: schema::annotations(schema)?,
        })
    }

    /// The annotations.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &ParamHeader> {
        self.params.iter()
    }

    /// How many annotations.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.params.len()
    }

    /// Whether the tool mirrors nothing.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.params.is_empty()
    }

    /// The client side: the `Mcp-Param-*` headers for a call with these
    /// `arguments`, one per annotated parameter with a present, non-null
    /// value, encoded per the spec (Base64 sentinel when needed).
    pub(crate) fn headers_for(
        &self,
        arguments: Option<&Value>,
    ) -> Result<Vec<(HeaderName, HeaderValue)>, UnmirrorableValue> {
        let mut out = Vec::new();
        for p in &self.params {
            let Some(value) = p.value_in(arguments) else {
                continue;
            };
            let unmirrorable = |why| UnmirrorableValue {
                header: p.display_header(),
                path: p.display_path(),
                why,
            };
            let Some(s) = header_string(value).map_err(unmirrorable)? else {
                continue;
            };
            // encode_header_value leaves only visible ASCII and inner spaces.
            let v = HeaderValue::from_str(&s).map_err(|_| unmirrorable("not a header value"))?;
            out.push((p.header.clone(), v));
        }
        Ok(out)
    }

    /// The server side: checks the request's `Mcp-Param-*` headers against
    /// the body `arguments`. The error names the header; the server answers
    /// it with `HeaderMismatch`. Headers of parameters this tool does not
    /// annotate are ignored.
    pub(crate) fn check(
        &self,
        headers: &HeaderMap,
        arguments: Option<&Value>,
    ) -> Result<(), ParamHeaderMismatch> {
        for p in &self.params {
            p.check(headers, arguments)
                .map_err(|message| ParamHeaderMismatch {
                    header: p.display_header(),
                    message,
                })?;
        }
        Ok(())
    }
}
