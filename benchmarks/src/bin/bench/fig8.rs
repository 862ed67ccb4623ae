//! Figure 8: Streamable HTTP throughput under h2load (the runs are
//! [`crate::h2load`]'s).

use crate::args::Args;
use crate::h2load;
use crate::report::Tables;

pub(crate) fn figure8(a: &Args, t: &mut Tables) {
    if !h2load::have_h2load() {
        let msg = "h2load not found (Debian: `apt-get install nghttp2-client`; `benchmarks/run.sh` installs it): figure 8 not measured";
        if a.smoke {
            eprintln!("{msg}");
            return;
        }
        eprintln!("{msg}");
        std::process::exit(1);
    }
    let words: Vec<String> = match (&a.servers, a.smoke) {
        (Some(w), _) => w.clone(),
        (None, true) => vec!["ours".into(), "floor".into()],
        (None, false) => ["ours", "example", "rmcp", "tower-mcp", "floor"]
            .map(String::from)
            .to_vec(),
    };
    let servers: Vec<h2load::Server> = words.iter().map(|w| h2load::server(w)).collect();
    let (n, rounds) = if a.smoke {
        (a.requests.unwrap_or(2_000), a.rounds.unwrap_or(1))
    } else {
        (a.requests.unwrap_or(200_000), a.rounds.unwrap_or(5))
    };
    h2load::figure8(&servers, n, rounds, t);
    if a.smoke {
        if let Some(body) = t.get_mut("fig8") {
            body.push_str("\n(smoke run: peers not measured)\n");
        }
    }
}
