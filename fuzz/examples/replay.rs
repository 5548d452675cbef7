//! Runs one target's harness over files or directories of inputs on the stable toolchain (to
//! check a seed corpus, or to reproduce a crash artifact with a readable backtrace):
//! `cargo run --example replay -- <target> <path>...`.

use std::path::Path;

fn harness(target: &str) -> Option<fn(&[u8])> {
    Some(match target {
        "strict_json" => cra_fuzz::json::strict_json,
        "canonical_trace" => cra_fuzz::json::canonical_trace,
        "canonical_relay" => cra_fuzz::json::canonical_relay,
        "carp_request" => cra_fuzz::carp::carp_request,
        "carp_execute" => cra_fuzz::carp::carp_execute,
        "trace_jsonl" => cra_fuzz::trace::trace_jsonl,
        "atlas_manifest" => cra_fuzz::atlas_manifest,
        "atlas_archive" => cra_fuzz::archive::atlas_archive,
        "relay_package" => cra_fuzz::relay::relay_package,
        "relay_fact" => cra_fuzz::relay::relay_fact,
        "relay_import" => cra_fuzz::relay::relay_import,
        _ => return None,
    })
}

fn run(f: fn(&[u8]), path: &Path, count: &mut usize) {
    if path.is_dir() {
        let mut entries: Vec<_> = std::fs::read_dir(path)
            .map(|rd| rd.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        entries.sort();
        for p in entries {
            run(f, &p, count);
        }
    } else {
        match std::fs::read(path) {
            Ok(bytes) => {
                eprintln!("{}", path.display());
                f(&bytes);
                *count += 1;
            }
            Err(e) => eprintln!("{}: {e}", path.display()),
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let target = args.next().unwrap_or_default();
    let Some(f) = harness(&target) else {
        eprintln!("usage: replay <target> <path>...; unknown target `{target}`");
        std::process::exit(2);
    };
    let mut count = 0;
    for p in args {
        run(f, Path::new(&p), &mut count);
    }
    println!("{target}: {count} inputs, no oracle violated");
}
