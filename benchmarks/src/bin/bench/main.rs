//! The bench binary for figures 3–6, 8 and 9 of BENCHMARKS.md (and the collector of
//! figures 1, 2 and 7, which criterion and `benches/timer_lateness.rs` of
//! the main crate measure). `benchmarks/run.sh` is the documented command.
//!
//! ```text
//! bench [--smoke] [--write BENCHMARKS.md] [--criterion DIR] [--lateness FILE] [--only 3,4,5,6,8,9]
//!       [--requests N] [--rounds R] [--servers ours,example,rmcp,tower-mcp,floor]
//! ```
//!
//! * `--smoke`: a few seconds, our servers only (no peers), small counts.
//! * `--write PATH`: rewrite the tables between the `<!-- bench:… -->`
//!   markers of PATH.
//! * `--criterion DIR`: the main crate's `target/criterion` (figures 1–2).
//! * `--lateness FILE`: the output of `cargo bench --bench timer_lateness`
//!   (figure 7).
//! * `--requests`, `--rounds`, `--servers`: figure 8's requests per run
//!   (200 000), rounds (5) and servers (see [`h2load::server`]).

mod args;
mod collected;
mod fig3;
mod fig4;
mod fig5;
mod fig6;
mod fig8;
mod fig9;
mod h2load;
mod http;
mod mem;
mod report;
mod stdio;

use crate::args::{args, OWN_FIGURES};
use crate::collected::{figure7, figures12};
use crate::fig3::figure3;
use crate::fig4::figure4;
use crate::fig5::figure5;
use crate::fig6::figure6;
use crate::fig8::figure8;
use crate::fig9::figure9;
use crate::report::{machine, rewrite, Tables};

#[global_allocator]
static ALLOC: mem::Counting = mem::Counting;

fn main() {
    let a = args();
    if !a.smoke && !cfg!(feature = "peers") {
        eprintln!("built without the `peers` feature: our servers only");
    }
    let mut tables = Tables::new();
    if let Some(dir) = &a.criterion {
        figures12(dir, &mut tables);
    }
    if let Some(f) = &a.lateness {
        figure7(f, &mut tables);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    if a.only.contains(&6) {
        figure6(a.smoke, &mut tables);
    }
    if a.only.contains(&3) {
        rt.block_on(figure3(a.smoke, &mut tables));
    }
    if a.only.contains(&4) {
        rt.block_on(figure4(a.smoke, &mut tables));
    }
    if a.only.contains(&5) {
        rt.block_on(figure5(a.smoke, &mut tables));
    }
    if a.only.contains(&8) {
        figure8(&a, &mut tables);
    }
    if a.only.contains(&9) {
        rt.block_on(figure9(a.smoke, &mut tables));
    }
    let mut run = machine();
    if a.criterion.is_none() || a.lateness.is_none() || a.only != OWN_FIGURES {
        // A partial run: say which tables it rewrote.
        // Figures 1-2 come from --criterion, 7 from --lateness, 3-6, 8 and 9 from --only.
        let mut figures: Vec<u32> = a
            .only
            .iter()
            .copied()
            .filter(|f| OWN_FIGURES.contains(f))
            .collect();
        if a.criterion.is_some() {
            figures.extend([1, 2]);
        }
        if a.lateness.is_some() {
            figures.push(7);
        }
        figures.sort_unstable();
        figures.dedup();
        let names: Vec<String> = figures.iter().map(u32::to_string).collect();
        run.pop();
        run.push_str(&format!(
            " {} {} only; the other tables are from earlier runs.\n",
            if names.len() == 1 {
                "Figure"
            } else {
                "Figures"
            },
            names.join(", ")
        ));
    }
    tables.insert("run", run);
    for (name, body) in &tables {
        println!("== {name}\n{body}");
    }
    if let Some(path) = &a.write {
        if let Err(e) = rewrite(path, &tables) {
            eprintln!("cannot rewrite {}: {e}", path.display());
            std::process::exit(1);
        }
        eprintln!("rewrote {}", path.display());
    }
}
