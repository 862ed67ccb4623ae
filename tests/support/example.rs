//! The crate's example binaries, for the tests that run them as processes.
//! Included by path (`#[path = "…/support/example.rs"]`) by every test
//! binary that needs one, so there is one way to find or build them.

use std::path::PathBuf;

/// The features every example of the including package needs (a plain
/// `cargo build --example` refuses the examples that require them): the
/// middleware's need `stdio` and `http` (and `tasks` for `--tasks`), the
/// rmcp integration's `http`, the tower-mcp integration's none.
const FEATURES: &str = match env!("CARGO_PKG_NAME").as_bytes() {
    b"tower-mcp-cancel-rmcp" => "http",
    b"tower-mcp-cancel-tower-mcp" => "",
    _ => "stdio,http,tasks",
};

/// The example binary `name`, built by `cargo test` next to the running
/// test (`target/<profile>/examples/`), or built now with [`FEATURES`].
pub(crate) fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps");
    let bin = profile_dir
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    if !bin.exists() {
        let status = std::process::Command::new(env!("CARGO"))
            .args(["build", "--features", FEATURES, "--example", name])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .unwrap_or_else(|e| panic!("run cargo build --example {name}: {e}"));
        assert!(status.success(), "building the example {name} failed");
    }
    assert!(
        bin.exists(),
        "example {name} not found at {}",
        bin.display()
    );
    bin
}
