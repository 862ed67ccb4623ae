//! The command line every example binary keeps: `--help` exits 0 and names
//! every flag; an unknown flag, or a malformed value, is refused with a
//! usage line and exit status 2 before the binary does anything else (a
//! server that ignored its arguments would start serving instead). Included
//! by path by the `examples` tests of each package that has examples.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

/// Far longer than a refusal or a help text takes: a guard against a
/// binary that ignores its arguments and runs (a server serves forever).
const BOUND: Duration = Duration::from_secs(60);

/// Runs `bin` with `args` and stdin closed, bounded by [`BOUND`]: its exit
/// code, stdout and stderr.
async fn run(bin: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let child = tokio::process::Command::new(bin)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("run {}: {e}", bin.display()));
    let out = tokio::time::timeout(BOUND, child.wait_with_output())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{} {args:?} still running after {BOUND:?}: it did not answer or refuse its arguments",
                bin.display()
            )
        })
        .expect("wait for the example");
    let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
    (out.status.code(), text(out.stdout), text(out.stderr))
}

/// `bin --help` exits 0 with a usage line that names each of `flags`; an
/// unknown flag, and each argument list of `malformed` (a flag with a value
/// that does not parse), exit 2 with an error and a usage line.
pub(crate) async fn assert_cli(bin: &Path, flags: &[&str], malformed: &[&[&str]]) {
    let (code, out, err) = run(bin, &["--help"]).await;
    assert_eq!(code, Some(0), "--help: stdout {out}\nstderr {err}");
    assert!(out.contains("Usage:"), "--help prints no usage: {out}");
    for flag in flags {
        assert!(
            out.lines().any(|l| l.trim_start().starts_with(flag)),
            "--help does not describe {flag}: {out}"
        );
    }
    let unknown: &[&str] = &["--no-such-flag"];
    for args in std::iter::once(unknown).chain(malformed.iter().copied()) {
        let (code, out, err) = run(bin, args).await;
        assert_eq!(code, Some(2), "{args:?}: stdout {out}\nstderr {err}");
        assert!(
            err.contains("error:") && err.contains("Usage:"),
            "{args:?} is refused without an error and a usage line: {err}"
        );
    }
}
