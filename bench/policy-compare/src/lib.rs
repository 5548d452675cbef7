//! What the comparison programs share: timing a repeated call and summarising the runs.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// `{min, median, max, runs}` of `v` (not empty).
pub fn summary(mut v: Vec<f64>) -> Value {
    v.sort_by(f64::total_cmp);
    let median = if v.len() % 2 == 1 {
        v[v.len() / 2]
    } else {
        (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
    };
    json!({"min": v[0], "median": median, "max": v[v.len() - 1], "runs": v.len()})
}

/// Runs `f` repeatedly for `runs` runs of at least `min_run` each; microseconds per call.
pub fn time_runs(
    runs: usize,
    min_run: Duration,
    mut f: impl FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<Vec<f64>> {
    let t = Instant::now();
    f()?;
    let one = t.elapsed().max(Duration::from_nanos(1));
    let reps = (min_run.as_secs_f64() / one.as_secs_f64()).ceil().max(1.0) as usize;
    let mut out = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        for _ in 0..reps {
            f()?;
        }
        out.push(t.elapsed().as_secs_f64() * 1e6 / reps as f64);
    }
    Ok(out)
}
