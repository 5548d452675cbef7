//! `cra trace diff A B`: the semantic difference of two TRACE chains (see
//! [`cra_trace::diff`] for how events are paired and what is compared).
//!
//! Exit codes: 0 the traces are the same, 2 they differ, 1 a trace could not be read.

use std::io::{Read, Write};
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use cra_trace::diff::{DiffOptions, DiffReport, Entry, EventRef, diff_report};
use cra_wire::Token;
use serde_json::{Value, json};

use crate::cmd::trace_io::{Failure, input_name, is_stdin, read_events};
use crate::exit::Exit;
use crate::output::OutputFormat;

/// What `--include` can add to the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Include {
    /// Event, trace, span, session, request, resolution, execution and approval ids; UUIDs.
    Ids,
    /// Event timestamps, `*_at` members, `duration_ms`, RFC 3339 strings.
    Timestamps,
    /// Event hashes, `*_hash` and `*_digest(s)` members, SHA-256 hex strings.
    Hashes,
}

/// Arguments of `cra trace diff`.
#[derive(Debug, Clone, Args)]
pub struct DiffArgs {
    /// The first trace (`-` for standard input).
    pub a: PathBuf,
    /// The second trace (`-` for standard input, if A is not).
    pub b: PathBuf,
    /// Also compare these, ignored by default (comma-separated: ids,timestamps,hashes).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub include: Vec<Include>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

impl DiffArgs {
    /// The library options these arguments ask for.
    pub fn options(&self) -> DiffOptions {
        DiffOptions {
            include_ids: self.include.contains(&Include::Ids),
            include_timestamps: self.include.contains(&Include::Timestamps),
            include_hashes: self.include.contains(&Include::Hashes),
        }
    }
}

/// `cra trace diff` as a library function: reads both traces (one may be `stdin`), prints the
/// difference on `out`, diagnostics on `err`.
pub fn diff(args: &DiffArgs, stdin: impl Read, out: &mut dyn Write, err: &mut dyn Write) -> Exit {
    const CMD: &str = "cra trace diff";
    if is_stdin(Some(&args.a)) && is_stdin(Some(&args.b)) {
        return Failure::new(
            Token::InvalidRequest,
            "only one of A and B can be standard input (-)",
        )
        .report(CMD, args.output, out, err);
    }
    let mut stdin = Some(stdin);
    let mut load = |p: &PathBuf| {
        if is_stdin(Some(p)) {
            match stdin.take() {
                Some(s) => read_events(Some(p), s),
                None => read_events(Some(p), std::io::empty()),
            }
        } else {
            read_events(Some(p), std::io::empty())
        }
    };
    let a = match load(&args.a) {
        Ok(e) => e,
        Err(f) => return f.report(CMD, args.output, out, err),
    };
    let b = match load(&args.b) {
        Ok(e) => e,
        Err(f) => return f.report(CMD, args.output, out, err),
    };
    let options = args.options();
    let report = diff_report(&a, &b, &options);
    let (na, nb) = (input_name(Some(&args.a)), input_name(Some(&args.b)));
    let printed = match args.output {
        OutputFormat::Json => writeln!(out, "{}", diff_json(&report, &na, &nb, &args.include)),
        OutputFormat::Text => print_text(out, &report, &na, &nb, &options),
    };
    if let Err(e) = printed {
        let _ = writeln!(err, "{CMD}: cannot write the result: {e}");
        return Exit::CouldNotRun;
    }
    if report.diff.same {
        Exit::Success
    } else {
        Exit::Negative
    }
}

/// The `-o json` document: the library's diff plus the file names and what was included.
pub fn diff_json(report: &DiffReport, a: &str, b: &str, include: &[Include]) -> Value {
    let mut doc = serde_json::to_value(&report.diff).unwrap_or(Value::Null);
    if let Value::Object(m) = &mut doc {
        m.insert("a".into(), json!(a));
        m.insert("b".into(), json!(b));
        let names: Vec<&str> = include
            .iter()
            .map(|i| match i {
                Include::Ids => "ids",
                Include::Timestamps => "timestamps",
                Include::Hashes => "hashes",
            })
            .collect();
        m.insert("included".into(), json!(names));
    }
    doc
}

fn describe(r: &EventRef) -> String {
    let mut s = r.event_type.clone();
    if let Some(subject) = &r.subject {
        s.push_str(&format!(" {subject:?}"));
    }
    if !r.span.is_empty() {
        s.push_str(&format!("  (in {})", r.span));
    }
    s
}

fn short(v: &Option<Value>) -> String {
    match v {
        None => "(absent)".to_owned(),
        Some(v) => {
            let t = v.to_string();
            if t.chars().count() > 120 {
                let cut: String = t.chars().take(117).collect();
                format!("{cut}...")
            } else {
                t
            }
        }
    }
}

fn print_text(
    out: &mut dyn Write,
    report: &DiffReport,
    a: &str,
    b: &str,
    options: &DiffOptions,
) -> std::io::Result<()> {
    let d = &report.diff;
    writeln!(
        out,
        "A: {a} ({} events)\nB: {b} ({} events)\n{} paired",
        d.a_events, d.b_events, d.paired
    )?;
    for e in &report.order {
        match *e {
            Entry::Removed(i) => {
                let r = &d.removed[i];
                writeln!(out, "- removed  A#{}  {}", r.sequence, describe(r))?;
            }
            Entry::Added(i) => {
                let r = &d.added[i];
                writeln!(out, "+ added    B#{}  {}", r.sequence, describe(r))?;
            }
            Entry::Changed(i) => {
                let c = &d.changed[i];
                writeln!(
                    out,
                    "~ changed  A#{} -> B#{}  {}",
                    c.a.sequence,
                    c.b.sequence,
                    describe(&c.a)
                )?;
                for f in &c.fields {
                    writeln!(
                        out,
                        "      {}: {} -> {}",
                        f.pointer,
                        short(&f.a),
                        short(&f.b)
                    )?;
                }
            }
        }
    }
    let mut ignored = Vec::new();
    if !options.include_ids {
        ignored.push("ids");
    }
    if !options.include_timestamps {
        ignored.push("timestamps");
    }
    if !options.include_hashes {
        ignored.push("hashes");
    }
    let note = if ignored.is_empty() {
        String::new()
    } else {
        format!(" ({} ignored)", ignored.join(", "))
    };
    if d.same {
        writeln!(out, "same{note}")
    } else {
        writeln!(
            out,
            "traces differ{note}: {} added, {} removed, {} changed",
            d.added.len(),
            d.removed.len(),
            d.changed.len()
        )
    }
}
