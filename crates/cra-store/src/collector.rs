//! Group commit, shared by both backends: appenders put their batch on a queue and wait; one or
//! more committer threads each take every append waiting (up to [`MAX_BATCH_APPENDS`]), make
//! them durable in one transaction, and only then answer each appender. One flush thus covers
//! every append that arrived while the previous one ran.

use std::thread::JoinHandle;

use cra_trace::store::ChainStoreError;
use cra_trace::{EventDraft, PreparedDraft, TraceEvent};
use crossbeam_channel::{Receiver, Sender};

use crate::StoreError;

/// At most this many appends share one transaction.
pub const MAX_BATCH_APPENDS: usize = 4096;

/// What an appender is told.
pub(crate) type Answer = Option<Result<Vec<TraceEvent>, ChainStoreError>>;
/// Called once with the append's outcome, from the committer thread.
pub(crate) type Reply = cra_trace::store::AppendDone;

/// One append waiting for a committer.
pub(crate) struct Job {
    pub session_id: String,
    pub drafts: Vec<PreparedDraft>,
    /// A resolve's state, written in the same transaction before the events (redb only). When
    /// its request id turns out to be used, the job is answered with no events and nothing of
    /// it is written.
    pub resolve: Option<crate::redb::carp::EncodedResolve>,
    pub reply: Reply,
}

/// Splits a batch into the reply channels and the work, index for index.
pub(crate) fn split(batch: Vec<Job>) -> (Vec<Reply>, Vec<(String, Vec<PreparedDraft>)>) {
    batch
        .into_iter()
        .map(|job| (job.reply, (job.session_id, job.drafts)))
        .unzip()
}

/// One append's work with the state written beside it.
pub(crate) type Work = (
    String,
    Vec<PreparedDraft>,
    Option<crate::redb::carp::EncodedResolve>,
);

/// As [`split`], keeping each job's attached state.
pub(crate) fn split_with_state(batch: Vec<Job>) -> (Vec<Reply>, Vec<Work>) {
    batch
        .into_iter()
        .map(|job| (job.reply, (job.session_id, job.drafts, job.resolve)))
        .unzip()
}

/// Answers every appender of a batch once its transaction is over: a chain-rule refusal stands
/// whatever happened to the rest; otherwise the transaction's fate decides.
pub(crate) fn answer_all(
    replies: Vec<Reply>,
    answers: Vec<Answer>,
    result: &Result<(), ChainStoreError>,
) {
    for (reply, answer) in replies.into_iter().zip(answers) {
        let answer = match (result, answer) {
            (_, Some(Err(refused))) => Err(refused),
            (Ok(()), Some(Ok(events))) => Ok(events),
            (Err(e), _) => Err(e.clone()),
            (Ok(()), None) => Err(ChainStoreError::Unavailable(
                "the append was not processed".into(),
            )),
        };
        reply(answer);
    }
}

/// The committer threads and the queue feeding them. Dropping it lets the threads finish the
/// queue and joins them.
pub(crate) struct Collector {
    queue: Option<Sender<Job>>,
    threads: Vec<JoinHandle<()>>,
}

impl Collector {
    /// Starts `threads` committers, each running `commit` on the batches it takes.
    pub(crate) fn start<F>(name: &str, threads: usize, commit: F) -> Result<Self, StoreError>
    where
        F: Fn(Vec<Job>) + Send + Sync + Clone + 'static,
    {
        let (queue, jobs) = crossbeam_channel::unbounded::<Job>();
        let mut handles = Vec::new();
        for i in 0..threads.max(1) {
            let jobs = jobs.clone();
            let commit = commit.clone();
            let handle = std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn(move || run(&jobs, &commit))
                .map_err(|e| StoreError::Backend(format!("cannot start a commit thread: {e}")))?;
            handles.push(handle);
        }
        Ok(Self {
            queue: Some(queue),
            threads: handles,
        })
    }

    /// Queues an append and waits for its answer.
    pub(crate) fn submit(
        &self,
        session_id: &str,
        drafts: Vec<EventDraft>,
    ) -> Result<Vec<TraceEvent>, ChainStoreError> {
        let (reply, answer) = crossbeam_channel::bounded(1);
        self.queue(
            session_id,
            drafts,
            None,
            Box::new(move |outcome| {
                let _ = reply.send(outcome);
            }),
        );
        answer.recv().map_err(|_| stopped())?
    }

    /// Queues an append; `done` is told its outcome, once, from the committer thread when the
    /// append is durable (or at once when it is refused before queueing). The drafts are
    /// prepared (payloads canonicalised) here, on the appender's thread, so that the committer,
    /// which every append of the store goes through, only links hashes and writes.
    pub(crate) fn queue(
        &self,
        session_id: &str,
        drafts: Vec<EventDraft>,
        resolve: Option<crate::redb::carp::EncodedResolve>,
        done: Reply,
    ) {
        let drafts = drafts.into_iter().map(PreparedDraft::new).collect();
        self.queue_prepared(session_id, drafts, resolve, done);
    }

    /// As [`Collector::queue`], with the drafts already prepared by the caller.
    pub(crate) fn queue_prepared(
        &self,
        session_id: &str,
        drafts: Vec<PreparedDraft>,
        resolve: Option<crate::redb::carp::EncodedResolve>,
        done: Reply,
    ) {
        // The append preconditions every backend shares, checked before anything is queued.
        if let Err(e) = cra_trace::store::check_session_id(session_id) {
            return done(Err(e));
        }
        if drafts.is_empty() {
            return done(Err(ChainStoreError::EmptyAppend));
        }
        let job = Job {
            session_id: session_id.to_owned(),
            drafts,
            resolve,
            reply: done,
        };
        let Some(queue) = self.queue.as_ref() else {
            return (job.reply)(Err(stopped()));
        };
        if let Err(crossbeam_channel::SendError(job)) = queue.send(job) {
            (job.reply)(Err(stopped()));
        }
    }
}

/// The answer when the committer is gone.
pub(crate) fn stopped() -> ChainStoreError {
    ChainStoreError::Unavailable("the commit thread has stopped".into())
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.queue.take();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

fn run(jobs: &Receiver<Job>, commit: &dyn Fn(Vec<Job>)) {
    while let Ok(first) = jobs.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH_APPENDS {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        commit(batch);
    }
}
