//! [`ToolHeaderMap`]: the `x-mcp-header` annotations of a set of tools, by
//! tool name, as a client learns them from `tools/list` and a server is
//! told them.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use super::error::InvalidParamHeader;
use super::tool::ParamHeaders;

/// A tool definition rejected for an invalid `x-mcp-header` annotation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RejectedTool {
    /// The tool's name (`<unnamed>` when it had none).
    pub(crate) name: String,
    /// Why.
    pub(crate) error: InvalidParamHeader,
}

/// The `x-mcp-header` annotations of a set of tools, by tool name.
#[derive(Clone, Debug, Default)]
pub struct ToolHeaderMap {
    tools: HashMap<String, Arc<ParamHeaders>>,
}

impl ToolHeaderMap {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `tool` with its `inputSchema`. An invalid schema is not
    /// registered (and removes what was known of the tool).
    pub fn insert(
        &mut self,
        tool: impl Into<String>,
        input_schema: &Value,
    ) -> Result<(), InvalidParamHeader> {
        let tool = tool.into();
        match ParamHeaders::from_input_schema(input_schema) {
            Ok(h) => {
                self.tools.insert(tool, Arc::new(h));
                Ok(())
            }
            Err(e) => {
                self.tools.remove(&tool);
                Err(e)
            }
        }
    }

    /// [`insert`](Self::insert), chained.
    pub fn with_tool(
        mut self,
        tool: impl Into<String>,
        input_schema: &Value,
    ) -> Result<Self, InvalidParamHeader> {
        self.insert(tool, input_schema)?;
        Ok(self)
    }

    /// The map of a `tools/list` result (`{"tools": [...]}`) or a bare array
    /// of tool definitions, and the tools rejected.
    pub(crate) fn from_tools(tools: &Value) -> (Self, Vec<RejectedTool>) {
        let mut map = Self::new();
        let mut copy = tools.clone();
        let rejected = map.learn_tools_list(&mut copy);
        (map, rejected)
    }

    /// Learns from a `tools/list` result (`{"tools": [...]}`, or a bare
    /// array): every valid tool's annotations are recorded (replacing what
    /// was known), every invalid tool is removed from `result` and from the
    /// map, and returned. A tool without an `inputSchema` mirrors nothing.
    pub(crate) fn learn_tools_list(&mut self, result: &mut Value) -> Vec<RejectedTool> {
        let list = match result {
            Value::Array(list) => list,
            Value::Object(obj) => match obj.get_mut("tools") {
                Some(Value::Array(list)) => list,
                _ => return Vec::new(),
            },
            _ => return Vec::new(),
        };
        let mut rejected = Vec::new();
        list.retain(|tool| {
            let Some(name) = tool.get("name").and_then(Value::as_str) else {
                // Not a tool definition we can key; leave it to the caller.
                return true;
            };
            let empty = Value::Object(Default::default());
            let schema = tool.get("inputSchema").unwrap_or(&empty);
            match self.insert(name, schema) {
                Ok(()) => true,
                Err(error) => {
                    rejected.push(RejectedTool {
                        name: name.to_owned(),
                        error,
                    });
                    false
                }
            }
        });
        rejected
    }

    /// The annotations of `tool`, when known.
    pub(crate) fn get(&self, tool: &str) -> Option<&ParamHeaders> {
        self.tools.get(tool).map(|a| &**a)
    }

    pub(crate) fn get_shared(&self, tool: &str) -> Option<Arc<ParamHeaders>> {
        self.tools.get(tool).cloned()
    }

    /// The `Mcp-Param-{Name}` headers (lowercase) the arguments of `tool`
    /// are mirrored into, when the tool is known.
    pub fn headers(&self, tool: &str) -> Option<Vec<&str>> {
        let params = self.tools.get(tool)?;
        Some(params.iter().map(|p| p.header_name().as_str()).collect())
    }

    /// How many tools are known.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// Whether no tool is known.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}
