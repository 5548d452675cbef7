//! `cargo xtask log-cost`: issue 26's criterion on redb (durable appends with the transparency
//! log within 10% of without), measured so that a verdict can be read off it.
//!
//! One run of `cra-store`'s `append` bench (`--bench log_cost`) gives 15-30 interleaved rounds a
//! shape, and the median of one run moves by 0.05-0.10 from run to run on a VM whose speed
//! drifts (`bench/NOTES.md`, stops 70-73). This command builds the bench once (release, under
//! `bench/target`), runs it `--runs` times with `CRA_BENCH_SHAPES` and `CRA_BENCH_ROUNDS`, pools
//! every round's ratio (throughput with the log / without) a shape, and reports the pooled
//! median with a 95% bootstrap interval (the seed is printed, `--seed` replays it). The verdict
//! is **inside** when the whole interval is at or above the target ratio (0.90), **below** when
//! it lies wholly under it, and **on the line** otherwise.
//!
//! Exit status: 0 when every shape is inside, 2 when one is not, 1 when the command itself
//! failed (a build, a run, output it cannot read).

use std::process::{Command, ExitCode};

use anyhow::{Context, bail};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

/// The lowest ratio of throughputs (with the log / without) the criterion allows.
const TARGET: f64 = 0.90;
/// Resamples of the bootstrap.
const RESAMPLES: usize = 2000;
/// The bench's output line that carries a shape's rounds starts with this.
const LINE: &str = "log cost: redb, ";

const HELP: &str =
    "usage: cargo xtask log-cost [--runs N] [--rounds N] [--shapes LIST] [--seed N] [-o json]

Runs cra-store's append bench (--bench log_cost) N times, pools every round's ratio of
throughputs (with the transparency log / without) per shape, and reports the pooled median with a
95% bootstrap interval against the target of 0.90.

options:
  --runs N       runs of the bench (default 10)
  --rounds N     interleaved rounds a run (default 30)
  --shapes LIST  shapes as SESSIONSxBATCH, comma-separated (default 64x32; all: 1x1,8x1,64x1,64x32)
  --seed N       the bootstrap's seed (default: from the clock; printed either way)
  -o json        print the report as JSON on standard output

exit status: 0 every shape inside the target, 2 one is not (on the line or below), 1 an error";

/// What the command was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Args {
    runs: usize,
    rounds: usize,
    shapes: String,
    seed: Option<u64>,
    json: bool,
    help: bool,
}

/// Entry point: the report, and the exit status it stands for.
pub(crate) fn main(args: &[String]) -> ExitCode {
    match run(args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(2),
        Err(e) => {
            eprintln!("xtask log-cost: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the command; answers whether every shape was inside the target.
fn run(args: &[String]) -> anyhow::Result<bool> {
    let args = parse_args(args)?;
    if args.help {
        println!("{HELP}");
        return Ok(true);
    }
    let root = crate::bench::workspace_root()?;
    std::env::set_current_dir(&root)?;
    let bench = build()?;
    let mut pooled: Vec<Pooled> = Vec::new();
    for run in 1..=args.runs {
        let out = run_bench(&bench, &args)
            .with_context(|| format!("run {run} of {} of the append bench", args.runs))?;
        for (shape, rounds) in parse_rounds(&out)? {
            let median = median(&rounds);
            eprintln!(
                "log-cost: run {run} of {}: {shape} median {median:.2}",
                args.runs
            );
            match pooled.iter_mut().find(|p| p.shape == shape) {
                Some(p) => p.add(rounds, median),
                None => pooled.push(Pooled {
                    shape,
                    rounds,
                    run_medians: vec![median],
                }),
            }
        }
    }
    if pooled.is_empty() {
        bail!("the bench printed no `{LINE}` lines: was log_cost renamed?");
    }
    let seed = args.seed.unwrap_or_else(clock_seed);
    let shapes: Vec<Summary> = pooled.iter().map(|p| p.summary(seed)).collect();
    if args.json {
        println!("{:#}", report_json(args.runs, seed, &shapes));
    } else {
        print!("{}", render(args.runs, seed, &shapes));
    }
    Ok(shapes.iter().all(|s| s.verdict == "inside"))
}

fn parse_args(args: &[String]) -> anyhow::Result<Args> {
    let mut out = Args {
        runs: 10,
        rounds: 30,
        shapes: "64x32".to_owned(),
        seed: None,
        json: false,
        help: false,
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| {
            it.next().cloned().with_context(|| {
                format!("{name} needs a value (see `cargo xtask log-cost --help`)")
            })
        };
        match arg.as_str() {
            "--runs" => out.runs = count(&value("--runs")?, "--runs")?,
            "--rounds" => out.rounds = count(&value("--rounds")?, "--rounds")?,
            "--shapes" => out.shapes = value("--shapes")?,
            "--seed" => {
                let v = value("--seed")?;
                out.seed = Some(
                    v.parse()
                        .with_context(|| format!("--seed `{v}` is not a number"))?,
                );
            }
            "-o" => match value("-o")?.as_str() {
                "json" => out.json = true,
                "text" => out.json = false,
                other => bail!("-o `{other}`: the formats are `json` and `text`"),
            },
            "--help" | "-h" => out.help = true,
            other => bail!("unknown option `{other}`; run `cargo xtask log-cost --help`"),
        }
    }
    Ok(out)
}

/// A positive count given to `flag`.
fn count(v: &str, flag: &str) -> anyhow::Result<usize> {
    match v.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => bail!("{flag} `{v}` is not a positive number"),
    }
}

/// Builds the append bench (release, `bench/target`) and answers its executable's path.
fn build() -> anyhow::Result<String> {
    eprintln!("log-cost: building cra-store's append bench (release)");
    let out = crate::bench::output(crate::bench::cargo().args([
        "bench",
        "--locked",
        "-p",
        "cra-store",
        "--bench",
        "append",
        "--no-run",
        "--target-dir",
        "bench/target",
        "--message-format=json",
    ]))?;
    out.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["reason"] == "compiler-artifact" && v["target"]["name"] == "append")
        .find_map(|v| v["executable"].as_str().map(str::to_owned))
        .context("cargo built no `append` bench executable")
}

/// One run of the bench's `log_cost`; its standard output. What it says on standard error
/// (criterion's and the other benches' setup) is shown only when it fails.
fn run_bench(bench: &str, args: &Args) -> anyhow::Result<String> {
    let out = Command::new(bench)
        .args(["--bench", "log_cost"])
        .env("CRA_BENCH_SHAPES", &args.shapes)
        .env("CRA_BENCH_ROUNDS", args.rounds.to_string())
        .output()
        .with_context(|| format!("cannot start {bench}"))?;
    if !out.status.success() {
        bail!(
            "{bench} failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// Each shape's rounds, from the bench's standard output: lines such as
/// `log cost: redb, 64 sessions, batch 32: throughput ..., median 0.90 (rounds 0.91 0.88)`.
fn parse_rounds(out: &str) -> anyhow::Result<Vec<(String, Vec<f64>)>> {
    let mut shapes = Vec::new();
    for line in out.lines().filter(|l| l.starts_with(LINE)) {
        let Some((_, rounds)) = line.split_once("(rounds ") else {
            continue; // the bytes and CPU line of the same shape
        };
        let bad = || format!("cannot read the bench's line `{line}`");
        let rest = &line[LINE.len()..];
        let (sessions, rest) = rest.split_once(" sessions, batch ").with_context(bad)?;
        let batch = rest.split_once(':').with_context(bad)?.0;
        let ratios = rounds
            .trim_end_matches(')')
            .split_whitespace()
            .map(str::parse::<f64>)
            .collect::<Result<Vec<_>, _>>()
            .with_context(bad)?;
        if ratios.is_empty() {
            bail!("{}: no rounds", bad());
        }
        shapes.push((format!("{sessions}x{batch}"), ratios));
    }
    Ok(shapes)
}

/// The median as the bench reports it: the upper middle of the sorted values.
fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s.get(s.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Every round of one shape, over the runs.
struct Pooled {
    shape: String,
    rounds: Vec<f64>,
    run_medians: Vec<f64>,
}

/// What the report says of one shape.
#[derive(Debug)]
struct Summary {
    shape: String,
    rounds: usize,
    pooled_median: f64,
    interval_95: (f64, f64),
    mean: f64,
    run_medians: Vec<f64>,
    verdict: &'static str,
}

impl Pooled {
    fn add(&mut self, rounds: Vec<f64>, median: f64) {
        self.rounds.extend(rounds);
        self.run_medians.push(median);
    }

    /// The pooled figures and the verdict, the interval drawn from `seed`.
    fn summary(&self, seed: u64) -> Summary {
        let interval_95 = interval(&self.rounds, seed);
        Summary {
            shape: self.shape.clone(),
            rounds: self.rounds.len(),
            pooled_median: median(&self.rounds),
            interval_95,
            mean: self.rounds.iter().sum::<f64>() / self.rounds.len() as f64,
            run_medians: self.run_medians.clone(),
            verdict: verdict(interval_95.0, interval_95.1),
        }
    }
}

fn verdict(low: f64, high: f64) -> &'static str {
    if low >= TARGET {
        "inside"
    } else if high < TARGET {
        "below"
    } else {
        "on the line"
    }
}

/// The 2.5th and 97.5th percentiles of the medians of [`RESAMPLES`] resamples of `v` (drawn with
/// replacement), from `seed`: the same seed gives the same interval.
fn interval(v: &[f64], seed: u64) -> (f64, f64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut medians: Vec<f64> = (0..RESAMPLES)
        .map(|_| {
            let sample: Vec<f64> = (0..v.len())
                .map(|_| v[rng.random_range(0..v.len())])
                .collect();
            median(&sample)
        })
        .collect();
    medians.sort_by(f64::total_cmp);
    (
        medians[RESAMPLES / 40],
        medians[RESAMPLES - 1 - RESAMPLES / 40],
    )
}

fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The report as `-o json` prints it.
fn report_json(runs: usize, seed: u64, shapes: &[Summary]) -> Value {
    let shapes: Vec<Value> = shapes
        .iter()
        .map(|s| {
            json!({
                "shape": s.shape,
                "rounds": s.rounds,
                "pooled_median": s.pooled_median,
                "interval_95": [s.interval_95.0, s.interval_95.1],
                "mean": s.mean,
                "run_medians": s.run_medians,
                "verdict": s.verdict,
            })
        })
        .collect();
    json!({"target": TARGET, "seed": seed, "runs": runs, "shapes": shapes})
}

/// The report as text, a line a shape.
fn render(runs: usize, seed: u64, shapes: &[Summary]) -> String {
    let mut out = format!(
        "log cost on redb, {runs} runs, target {TARGET:.2} (throughput with the log / without), bootstrap seed {seed}\n"
    );
    for s in shapes {
        let lo = s.run_medians.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = s
            .run_medians
            .iter()
            .copied()
            .fold(f64::NEG_INFINITY, f64::max);
        out.push_str(&format!(
            "{}: {} rounds: pooled median {:.3} (95% interval {:.3}-{:.3}), mean {:.3}, run medians {lo:.2}-{hi:.2}: {}\n",
            s.shape, s.rounds, s.pooled_median, s.interval_95.0, s.interval_95.1, s.mean, s.verdict,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUT: &str = "append bench: 32 events per append
log cost: redb, 1 sessions, batch 1: throughput with the log / without, median 0.95 (rounds 0.95 0.93 0.97)
log cost: redb, 1 sessions, batch 1: bytes written an event with the log 50000 (49000 handed to write calls), without 39000 (38000); CPU an event with the log 3.0 us, without 2.9 us
log cost: redb, 64 sessions, batch 32: throughput with the log / without, median 0.90 (rounds 0.90 0.88 1.02 0.75)
";

    fn args(v: &[&str]) -> anyhow::Result<Args> {
        parse_args(&v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
    }

    #[test]
    fn the_rounds_of_each_shape_are_read_and_the_other_lines_passed_over() {
        let shapes = parse_rounds(OUT).unwrap();
        assert_eq!(
            shapes,
            vec![
                ("1x1".to_owned(), vec![0.95, 0.93, 0.97]),
                ("64x32".to_owned(), vec![0.90, 0.88, 1.02, 0.75]),
            ]
        );
        // The bench's median is the upper middle, and so is ours.
        assert_eq!(median(&shapes[1].1), 0.90);
    }

    /// The line [`parse_rounds`] reads is the one the bench prints: a change to `log_cost`'s
    /// format string fails here, not as a run that finds no lines.
    #[test]
    fn the_bench_prints_the_line_this_command_reads() {
        let bench = include_str!("../../crates/cra-store/benches/append.rs");
        let printed = format!(
            "\"{LINE}{{sessions}} sessions, batch {{batch}}: throughput with the log / without, median {{:.2}} (rounds {{}})\""
        );
        assert!(
            bench.contains(&printed),
            "append.rs no longer prints {printed}"
        );
    }

    #[test]
    fn a_round_that_is_not_a_number_is_an_error_naming_the_line() {
        let e = parse_rounds("log cost: redb, 8 sessions, batch 1: x, median 0.9 (rounds 0.9 n/a)")
            .unwrap_err();
        assert!(format!("{e:#}").contains("8 sessions, batch 1"), "{e:#}");
    }

    #[test]
    fn the_interval_is_the_same_for_a_seed_and_holds_the_median() {
        let v: Vec<f64> = (0..300).map(|i| 0.8 + f64::from(i % 41) * 0.005).collect();
        let a = interval(&v, 7);
        assert_eq!(a, interval(&v, 7));
        assert!(a.0 <= median(&v) && median(&v) <= a.1, "{a:?}");
        assert!(a.0 < a.1);
        assert_eq!(interval(&[0.93; 50], 1), (0.93, 0.93));
    }

    #[test]
    fn the_verdict_needs_the_whole_interval_on_one_side_of_the_target() {
        assert_eq!(verdict(0.90, 0.95), "inside");
        assert_eq!(verdict(0.89, 0.91), "on the line");
        assert_eq!(verdict(0.80, 0.899), "below");
    }

    #[test]
    fn options_are_read_and_bad_ones_refused() {
        let a = args(&[
            "--runs",
            "3",
            "--shapes",
            "1x1,64x32",
            "--seed",
            "9",
            "-o",
            "json",
        ])
        .unwrap();
        assert_eq!(
            (a.runs, a.rounds, a.shapes.as_str(), a.seed, a.json),
            (3, 30, "1x1,64x32", Some(9), true)
        );
        for bad in [
            &["--runs", "0"][..],
            &["--runs"],
            &["--rounds", "x"],
            &["-o", "yaml"],
            &["--fast"],
        ] {
            assert!(args(bad).is_err(), "{bad:?}");
        }
        assert!(args(&["--help"]).unwrap().help);
    }

    #[test]
    fn the_report_names_each_shape_with_its_verdict() {
        let pooled = Pooled {
            shape: "1x1".to_owned(),
            rounds: vec![0.95, 0.93, 0.97, 0.96],
            run_medians: vec![0.95, 0.96],
        };
        let text = render(2, 5, &[pooled.summary(5)]);
        assert!(
            text.contains("1x1: 4 rounds: pooled median 0.960"),
            "{text}"
        );
        assert!(text.ends_with("inside\n"), "{text}");
    }
}
