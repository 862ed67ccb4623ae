//! The command line (see the crate's documentation for its arguments).

use std::path::PathBuf;

pub(crate) struct Args {
    pub(crate) smoke: bool,
    pub(crate) write: Option<PathBuf>,
    pub(crate) criterion: Option<PathBuf>,
    pub(crate) lateness: Option<PathBuf>,
    pub(crate) only: Vec<u32>,
    pub(crate) requests: Option<u64>,
    pub(crate) rounds: Option<usize>,
    pub(crate) servers: Option<Vec<String>>,
}

/// The figures the bench binary itself measures.
pub(crate) const OWN_FIGURES: [u32; 6] = [3, 4, 5, 6, 8, 9];

pub(crate) fn args() -> Args {
    let mut a = Args {
        smoke: false,
        write: None,
        criterion: None,
        lateness: None,
        only: OWN_FIGURES.to_vec(),
        requests: None,
        rounds: None,
        servers: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--smoke" => a.smoke = true,
            "--write" => a.write = it.next().map(PathBuf::from),
            "--criterion" => a.criterion = it.next().map(PathBuf::from),
            "--lateness" => a.lateness = it.next().map(PathBuf::from),
            "--only" => {
                a.only = it
                    .next()
                    .unwrap_or_default()
                    .split(',')
                    .filter_map(|s| s.trim().parse().ok())
                    .collect()
            }
            "--requests" => a.requests = it.next().and_then(|s| s.parse().ok()),
            "--rounds" => a.rounds = it.next().and_then(|s| s.parse().ok()),
            "--servers" => {
                a.servers = it
                    .next()
                    .map(|s| s.split(',').map(|w| w.trim().to_owned()).collect())
            }
            other => {
                eprintln!("unknown argument {other:?}");
                std::process::exit(2);
            }
        }
    }
    a
}
