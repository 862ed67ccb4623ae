//! The Streamable HTTP checks.

use crate::report::Report;
use crate::Config;

/// Runs every HTTP check against `url`.
pub(crate) async fn run(_cfg: &Config, _url: &str) -> Result<Report, String> {
    Err("not yet".into())
}
