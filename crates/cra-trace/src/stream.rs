//! Streaming verification of a `.trace.jsonl` from any reader, in flat memory, on every core.
//!
//! A reader thread cuts the input into chunks of whole lines; worker threads parse and hash the
//! lines of a chunk (`fastline`); the calling thread puts the chunks back in order and
//! runs the sequence and link checks (`verify::ChainChecker`). Channels are bounded, so
//! at most a few chunks are in memory whatever the size of the input; a line longer than a chunk
//! is carried over until its newline arrives. Chunk buffers and outcome vectors go back to where
//! they are filled once used, so a steady run allocates (and zeroes) nothing per chunk.
//!
//! This module does I/O only through the `Read` it is handed; opening files is the caller's job.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io::{self, Read};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread;

use crate::fastline::{Scratch, line_outcome};
use crate::verify::{ChainChecker, Finding, LineOutcome, Report};

/// How to verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerifyOptions {
    /// Report every finding instead of stopping at the first.
    pub all_errors: bool,
    /// Worker threads; 0 means one per available core.
    pub threads: usize,
    /// Bytes read at a time (a chunk holds whole lines, so chunks may be longer).
    pub chunk_size: usize,
    /// Also check the session lifecycle rules ([`crate::lifecycle`]).
    pub lifecycle: bool,
}

impl Default for VerifyOptions {
    fn default() -> Self {
        Self {
            all_errors: false,
            threads: 0,
            lifecycle: false,
            chunk_size: 1 << 20,
        }
    }
}

/// A chunk of whole lines: `data[..len]` (the buffer is reused, so it may be longer).
struct Chunk {
    index: u64,
    data: Vec<u8>,
    len: usize,
}

impl Chunk {
    fn bytes(&self) -> &[u8] {
        &self.data[..self.len]
    }
}

/// The outcomes of one chunk's lines (one per line, so line numbers follow from the order).
struct Batch {
    index: u64,
    bytes: u64,
    outcomes: Vec<LineOutcome>,
}

/// Verifies the JSONL chain read from `reader`.
///
/// `progress` is called from the calling thread with the number of bytes verified so far. An
/// `Err` means the input could not be read (a chain that fails verification is an `Ok` report
/// with findings).
pub fn verify_reader<R: Read + Send>(
    reader: R,
    options: &VerifyOptions,
    progress: &mut dyn FnMut(u64),
) -> io::Result<Report> {
    let threads = match options.threads {
        0 => thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    let chunk_size = options.chunk_size.max(1);
    if threads <= 1 {
        return verify_sequential(reader, options, chunk_size, progress);
    }
    let stop = AtomicBool::new(false);
    thread::scope(|scope| {
        let (work_tx, work_rx) = sync_channel::<Chunk>(threads * 2);
        let (done_tx, done_rx) = sync_channel::<Batch>(threads * 2);
        // Emptied buffers go back to where they are filled, so the steady state allocates
        // nothing (a buffer that does not fit in a pool is dropped).
        let (free_tx, free_rx) = sync_channel::<Vec<u8>>(threads * 4 + 4);
        let (spent_tx, spent_rx) = sync_channel::<Vec<LineOutcome>>(threads * 4 + 4);
        let spent_rx = Arc::new(Mutex::new(spent_rx));
        let stop = &stop;
        let reader_thread = scope.spawn(move || {
            read_chunks(
                reader,
                chunk_size,
                stop,
                || free_rx.try_recv().unwrap_or_default(),
                |c| work_tx.send(c).is_ok(),
            )
        });
        let work_rx = Arc::new(Mutex::new(work_rx));
        for _ in 0..threads {
            let work_rx = Arc::clone(&work_rx);
            let spent_rx = Arc::clone(&spent_rx);
            let done_tx = done_tx.clone();
            let free_tx = free_tx.clone();
            scope.spawn(move || worker(&work_rx, &done_tx, &free_tx, &spent_rx, options.lifecycle));
        }
        drop(done_tx);
        drop(free_tx);
        drop(work_rx);
        let report = check_in_order(done_rx, &spent_tx, options, stop, progress);
        let read = reader_thread
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the reader thread stopped unexpectedly")));
        match read {
            Ok(()) => Ok(report),
            // After the first finding the reader is stopped on purpose; a read error after that
            // does not change the verdict.
            Err(_) if !report.findings.is_empty() && !options.all_errors => Ok(report),
            Err(e) => Err(e),
        }
    })
}

fn worker(
    work_rx: &Mutex<Receiver<Chunk>>,
    done_tx: &SyncSender<Batch>,
    free_tx: &SyncSender<Vec<u8>>,
    spent_rx: &Mutex<Receiver<Vec<LineOutcome>>>,
    lifecycle: bool,
) {
    let mut scratch = Scratch::default();
    loop {
        let chunk = match work_rx.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return,
        };
        let Ok(chunk) = chunk else { return };
        let mut outcomes = spent_rx
            .lock()
            .ok()
            .and_then(|rx| rx.try_recv().ok())
            .unwrap_or_default();
        outcomes.extend(lines(chunk.bytes()).map(|l| line_outcome(l, &mut scratch, lifecycle)));
        let batch = Batch {
            index: chunk.index,
            bytes: chunk.len as u64,
            outcomes,
        };
        let _ = free_tx.try_send(chunk.data);
        if done_tx.send(batch).is_err() {
            return;
        }
    }
}

fn check_in_order(
    done_rx: Receiver<Batch>,
    spent_tx: &SyncSender<Vec<LineOutcome>>,
    options: &VerifyOptions,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(u64),
) -> Report {
    let all_errors = options.all_errors;
    let mut checker = ChainChecker::new(options.lifecycle);
    let mut findings: Vec<Finding> = Vec::new();
    let mut pending: BTreeMap<u64, Batch> = BTreeMap::new();
    let mut next = 0u64;
    let mut bytes = 0u64;
    let mut line = 0u64;
    'outer: for batch in done_rx.iter() {
        pending.insert(batch.index, batch);
        while let Some(mut batch) = pending.remove(&next) {
            next += 1;
            bytes += batch.bytes;
            for outcome in batch.outcomes.drain(..) {
                line += 1;
                checker.check(line, outcome, &mut findings);
                if !all_errors && !findings.is_empty() {
                    findings.truncate(1);
                    stop.store(true, Ordering::Relaxed);
                    break 'outer;
                }
            }
            let _ = spent_tx.try_send(batch.outcomes);
            progress(bytes);
        }
    }
    // Dropping the receiver (on return) makes the workers stop, which makes the reader stop.
    Report {
        events: checker.events,
        bytes,
        findings,
    }
}

fn verify_sequential<R: Read>(
    reader: R,
    options: &VerifyOptions,
    chunk_size: usize,
    progress: &mut dyn FnMut(u64),
) -> io::Result<Report> {
    let all_errors = options.all_errors;
    let mut checker = ChainChecker::new(options.lifecycle);
    let mut findings = Vec::new();
    let mut scratch = Scratch::default();
    let mut bytes = 0u64;
    let mut line = 0u64;
    let stop = AtomicBool::new(false);
    // One buffer, handed back after each chunk.
    let spare: RefCell<Vec<u8>> = RefCell::new(Vec::new());
    read_chunks(
        reader,
        chunk_size,
        &stop,
        || spare.take(),
        |chunk| {
            for l in lines(chunk.bytes()) {
                line += 1;
                checker.check(
                    line,
                    line_outcome(l, &mut scratch, options.lifecycle),
                    &mut findings,
                );
                if !all_errors && !findings.is_empty() {
                    findings.truncate(1);
                    return false;
                }
            }
            bytes += chunk.len as u64;
            progress(bytes);
            spare.replace(chunk.data);
            true
        },
    )?;
    Ok(Report {
        events: checker.events,
        bytes,
        findings,
    })
}

/// The lines of a chunk, without their `\n` (a final line may lack one).
fn lines(data: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = data;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        match memchr::memchr(b'\n', rest) {
            Some(i) => {
                let line = &rest[..i];
                rest = &rest[i + 1..];
                Some(line)
            }
            None => {
                let line = rest;
                rest = &[];
                Some(line)
            }
        }
    })
}

/// Reads `reader` into chunks of whole lines and hands each to `sink` until the input ends,
/// `sink` returns false, or `stop` is set. Each chunk is read into a buffer from `fresh` (a
/// reused one keeps its length, so it is not zeroed again).
fn read_chunks<R: Read>(
    mut reader: R,
    chunk_size: usize,
    stop: &AtomicBool,
    mut fresh: impl FnMut() -> Vec<u8>,
    mut sink: impl FnMut(Chunk) -> bool,
) -> io::Result<()> {
    let mut index = 0u64;
    // The bytes of a line not yet ended, carried into the next chunk.
    let mut carry: Vec<u8> = Vec::new();
    let mut eof = false;
    while !eof {
        if stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        // Fill a buffer of at least chunk_size bytes (or to EOF) after the carried-over bytes.
        let mut buf = fresh();
        let start = carry.len();
        let want = start + chunk_size;
        if buf.len() > 2 * want {
            // Grown for a line much longer than a chunk: let it go rather than keep it around.
            buf = Vec::new();
        }
        if buf.len() < want {
            buf.resize(want, 0);
        }
        buf[..start].copy_from_slice(&carry);
        let mut filled = start;
        while filled < want {
            match reader.read(&mut buf[filled..want]) {
                Ok(0) => {
                    eof = true;
                    break;
                }
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        let cut = if eof {
            filled
        } else {
            match memchr::memrchr(b'\n', &buf[start..filled]) {
                Some(i) => start + i + 1,
                None => {
                    // No line ends in this read: keep reading into the same line.
                    carry.clear();
                    carry.extend_from_slice(&buf[..filled]);
                    continue;
                }
            }
        };
        carry.clear();
        carry.extend_from_slice(&buf[cut..filled]);
        if cut == 0 {
            continue;
        }
        let chunk = Chunk {
            index,
            data: buf,
            len: cut,
        };
        index += 1;
        if !sink(chunk) {
            return Ok(());
        }
    }
    Ok(())
}
