//! `cargo xtask soak [--minutes N] [--skip-storage]`: the long versions of the reliability tests,
//! in release mode.
//!
//! 1. The storage soak (unless `--skip-storage`): 64 appenders x 10,000 events on one session and
//!    500 kill -9 cycles of a store writer (`cra-store`'s `concurrency::` and `crash::kill_nine`
//!    tests; sizes from `CRA_STORE_SOAK_EVENTS` and `CRA_STORE_CRASH_CYCLES`).
//! 2. The server soak: `cra-runtime`'s crash test (`tests/it/crash.rs`) run for N minutes in all
//!    (default 10), split evenly between redb and, when `CRA_TEST_POSTGRES_URL` is set,
//!    PostgreSQL: a real server process SIGKILLed at random points and restarted while agents
//!    resolve, execute, deposit and assert facts, every acknowledged write checked afterwards and
//!    every chain verified by `tools/appendix_b.py`. `CRA_CRASH_SEED` and `CRA_CRASH_MAX_ACKS` pass
//!    through. The figures of each backend (cycles, requests, acknowledged writes, lost writes,
//!    projects stuck, changes stored without their events, chains and events verified) are printed
//!    as a table at the end; any lost write, stuck project or unaudited change fails the soak.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use anyhow::{Context, bail, ensure};

/// Parsed arguments.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Args {
    /// Minutes of server soak, split between the backends.
    pub minutes: f64,
    /// Skip the storage soak.
    pub skip_storage: bool,
}

impl Args {
    /// Reads `--minutes N` and `--skip-storage`.
    pub(crate) fn parse(args: &[String]) -> anyhow::Result<Self> {
        let mut out = Args {
            minutes: 10.0,
            skip_storage: false,
        };
        let mut it = args.iter();
        while let Some(a) = it.next() {
            match a.as_str() {
                "--minutes" => {
                    let v = it
                        .next()
                        .context("--minutes needs a number, e.g. --minutes 30")?;
                    out.minutes = v
                        .parse()
                        .ok()
                        .filter(|m: &f64| m.is_finite() && *m > 0.0)
                        .with_context(|| format!("--minutes `{v}` is not a positive number"))?;
                }
                "--skip-storage" => out.skip_storage = true,
                other => bail!(
                    "unknown soak option `{other}`; use `cargo xtask soak [--minutes N] [--skip-storage]`"
                ),
            }
        }
        Ok(out)
    }
}

/// One backend's figures, from the crash test's `CRASH-SUMMARY key=value ...` line.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Summary {
    /// `redb` or `postgres`.
    pub backend: String,
    /// The run's seed.
    pub seed: String,
    /// Kill cycles.
    pub cycles: u64,
    /// Requests sent.
    pub requests: u64,
    /// Writes acknowledged as a success.
    pub acked: u64,
    /// Acknowledged writes missing afterwards.
    pub lost: u64,
    /// Projects an interrupted creation left neither usable nor creatable again.
    pub stuck: u64,
    /// Changes stored without the events that tell of them.
    pub unaudited: u64,
    /// Chains verified by the Python Appendix B code.
    pub chains: u64,
    /// Events in those chains.
    pub events: u64,
    /// (subject, predicate) histories checked for overlaps and holes.
    pub fact_histories: u64,
    /// Wall time.
    pub seconds: f64,
}

impl Summary {
    /// Parses a summary line; `None` for any other line.
    pub(crate) fn parse(line: &str) -> Option<Self> {
        // The test harness may print `test NAME ... ` on the same line first.
        let at = line.find("CRASH-SUMMARY ")?;
        let rest = &line[at + "CRASH-SUMMARY ".len()..];
        let mut s = Summary::default();
        for pair in rest.split_whitespace() {
            let (k, v) = pair.split_once('=')?;
            let n = || v.parse::<u64>().ok();
            match k {
                "backend" => s.backend = v.to_owned(),
                "seed" => s.seed = v.to_owned(),
                "cycles" => s.cycles = n()?,
                "requests" => s.requests = n()?,
                "acked" => s.acked = n()?,
                "lost" => s.lost = n()?,
                "stuck" => s.stuck = n()?,
                "unaudited" => s.unaudited = n()?,
                "chains" => s.chains = n()?,
                "events" => s.events = n()?,
                "fact_histories" => s.fact_histories = n()?,
                "seconds" => s.seconds = v.parse().ok()?,
                _ => {}
            }
        }
        Some(s)
    }
}

/// Runs the soak.
pub(crate) fn run(args: &[String]) -> anyhow::Result<()> {
    let args = Args::parse(args)?;
    if !args.skip_storage {
        storage()?;
    }
    let mut backends = vec!["redb"];
    match std::env::var("CRA_TEST_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => backends.push("postgres"),
        _ => println!("soak: CRA_TEST_POSTGRES_URL is not set; the server soak runs on redb only"),
    }
    let seconds = ((args.minutes * 60.0) / backends.len() as f64)
        .ceil()
        .max(1.0) as u64;
    // Built once, then run directly: a tree that changes during a long soak is not rebuilt.
    let exe = build_crash_test()?;
    let mut summaries = Vec::new();
    for backend in &backends {
        println!("soak: server crash soak on {backend} for {seconds} s");
        summaries.push(server(&exe, backend, seconds)?);
    }
    println!("\nserver soak ({} min in all)", args.minutes);
    println!(
        "{:<9} {:>7} {:>9} {:>7} {:>5} {:>6} {:>10} {:>7} {:>9} {:>6} {:>7}  seed",
        "backend",
        "cycles",
        "requests",
        "acked",
        "lost",
        "stuck",
        "unaudited",
        "chains",
        "events",
        "facts",
        "seconds"
    );
    for s in &summaries {
        println!(
            "{:<9} {:>7} {:>9} {:>7} {:>5} {:>6} {:>10} {:>7} {:>9} {:>6} {:>7.0}  {}",
            s.backend,
            s.cycles,
            s.requests,
            s.acked,
            s.lost,
            s.stuck,
            s.unaudited,
            s.chains,
            s.events,
            s.fact_histories,
            s.seconds,
            s.seed
        );
    }
    let lost: u64 = summaries.iter().map(|s| s.lost).sum();
    ensure!(lost == 0, "{lost} acknowledged writes were lost");
    let broken: u64 = summaries.iter().map(|s| s.stuck + s.unaudited).sum();
    ensure!(
        broken == 0,
        "{broken} projects stuck or changes stored without their events"
    );
    Ok(())
}

/// The storage soak: 64 appenders x 10,000 events on one session (both backends when
/// `CRA_TEST_POSTGRES_URL` is set) and 500 kill -9 cycles, in release mode.
fn storage() -> anyhow::Result<()> {
    let var =
        |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.to_owned());
    let status = crate::bench::cargo()
        .args([
            "test",
            "-p",
            "cra-store",
            "--release",
            "--test",
            "store",
            "--",
        ])
        .args([
            "concurrency::",
            "crash::kill_nine",
            "--test-threads",
            "1",
            "--nocapture",
        ])
        .env(
            "CRA_STORE_SOAK_EVENTS",
            var("CRA_STORE_SOAK_EVENTS", "10000"),
        )
        .env(
            "CRA_STORE_CRASH_CYCLES",
            var("CRA_STORE_CRASH_CYCLES", "500"),
        )
        .status()?;
    ensure!(status.success(), "the storage soak failed ({status})");
    Ok(())
}

/// Builds `cra-runtime`'s integration tests in release mode; returns the test executable.
fn build_crash_test() -> anyhow::Result<std::path::PathBuf> {
    let out = crate::bench::cargo()
        .args([
            "test",
            "-p",
            "cra-runtime",
            "--release",
            "--test",
            "it",
            "--no-run",
            "--message-format=json",
        ])
        .stderr(Stdio::inherit())
        .output()
        .context("cannot run cargo test")?;
    ensure!(
        out.status.success(),
        "building the crash test failed ({})",
        out.status
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "it")
        .find_map(|m| m["executable"].as_str().map(std::path::PathBuf::from))
        .context("cargo built no `it` test executable")
}

/// The server crash test on `backend` for `seconds`; echoes its output and returns its summary.
fn server(exe: &std::path::Path, backend: &str, seconds: u64) -> anyhow::Result<Summary> {
    let test = format!("crash::kill_nine_server_loses_no_acknowledged_write_{backend}");
    let mut child = Command::new(exe)
        .args([
            test.as_str(),
            "--exact",
            "--test-threads",
            "1",
            "--nocapture",
        ])
        .env("CRA_CRASH_SECONDS", seconds.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {}", exe.display()))?;
    let mut summary = None;
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines() {
            let line = line?;
            println!("{line}");
            if let Some(s) = Summary::parse(&line) {
                summary = Some(s);
            }
        }
    }
    let status = child.wait()?;
    match summary {
        Some(s) if status.success() => Ok(s),
        Some(s) => {
            println!(
                "soak: {backend}: {} lost of {} acknowledged",
                s.lost, s.acked
            );
            bail!("the {backend} server soak failed ({status})")
        }
        None => bail!("the {backend} server soak printed no summary ({status})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_and_summaries_parse() {
        let a = Args::parse(&["--minutes".into(), "30".into(), "--skip-storage".into()]).unwrap();
        assert_eq!(
            a,
            Args {
                minutes: 30.0,
                skip_storage: true
            }
        );
        assert!(Args::parse(&["--minutes".into(), "-1".into()]).is_err());
        assert!(Args::parse(&["--hours".into()]).is_err());
        let s = Summary::parse(
            "CRASH-SUMMARY backend=redb seed=7 cycles=50 fault_points=0 requests=633 acked=336 lost=0 stuck=1 unaudited=2 chains=41 events=2116 fact_histories=208 seconds=14.5",
        )
        .unwrap();
        assert_eq!((s.stuck, s.unaudited), (1, 2));
        assert_eq!(
            (s.backend.as_str(), s.cycles, s.acked, s.lost),
            ("redb", 50, 336, 0)
        );
        assert_eq!((s.chains, s.events, s.fact_histories), (41, 2116, 208));
        assert!(Summary::parse("test crash::x ... ok").is_none());
        let after =
            Summary::parse("test crash::x ... CRASH-SUMMARY backend=postgres lost=2").unwrap();
        assert_eq!((after.backend.as_str(), after.lost), ("postgres", 2));
    }
}
