//! Group commit, shared by both backends: appenders put their batch on a queue and wait; one or
//! more committer threads each take every append waiting (up to [`MAX_BATCH_APPENDS`]), make
//! them durable in one transaction, and only then answer each appender. One flush thus covers
//! every append that arrived while the previous one ran.
//!
//! The queue carries whatever a backend's committer takes: PostgreSQL's committers take [`Job`]s
//! (drafts they seal themselves); redb's takes appends its appenders have already sealed
//! (`crate::redb::trace::Append`).

use std::sync::Arc;
use std::thread::JoinHandle;

use crate::pg::state::PgChange;
use cra_trace::store::ChainStoreError;
use cra_trace::{EventDraft, PreparedDraft, TraceEvent};
use crossbeam_channel::{Receiver, Sender};

use crate::BackendError;
use crate::stats::CommitStats;

/// At most this many appends share one transaction.
pub const MAX_BATCH_APPENDS: usize = 4096;

/// What an appender is told.
pub(crate) type Answer = Option<Result<Vec<TraceEvent>, ChainStoreError>>;
/// Called once with the append's outcome, from the committer thread.
pub(crate) type Reply = cra_trace::store::AppendDone;

/// One append waiting for a committer that seals it.
pub(crate) struct Job {
    pub work: JobWork,
    pub reply: Reply,
}

/// What a [`Job`] asks its committer to write.
pub(crate) struct JobWork {
    pub session_id: String,
    pub drafts: Vec<PreparedDraft>,
    /// A change of CARP state written in the append's transaction before its events; when
    /// the store refuses it, nothing of the append is written.
    pub state: Option<PgChange>,
}

/// Splits a batch into the reply channels and the work, index for index.
pub(crate) fn split(batch: Vec<Job>) -> (Vec<Reply>, Vec<JobWork>) {
    batch.into_iter().map(|job| (job.reply, job.work)).unzip()
}

/// Answers every appender of a batch once its transaction is over (see [`settle`]).
pub(crate) fn answer_all(
    replies: Vec<Reply>,
    answers: Vec<Answer>,
    result: &Result<(), ChainStoreError>,
) {
    for (reply, answer) in replies.into_iter().zip(answers) {
        reply(settle(result, answer));
    }
}

/// What an appender is told once its batch's transaction is over: a refusal stands whatever
/// happened to the rest; otherwise the transaction's fate decides.
pub(crate) fn settle(
    result: &Result<(), ChainStoreError>,
    answer: Answer,
) -> Result<Vec<TraceEvent>, ChainStoreError> {
    match (result, answer) {
        (_, Some(Err(refused))) => Err(refused),
        (Ok(()), Some(Ok(events))) => Ok(events),
        (Err(e), _) => Err(e.clone()),
        (Ok(()), None) => Err(ChainStoreError::Unavailable(
            "the append was not processed".into(),
        )),
    }
}

/// The committer threads and the queue feeding them. Dropping it lets the threads finish the
/// queue and joins them.
pub(crate) struct Collector<J = Job> {
    queue: Option<Sender<J>>,
    threads: Vec<JoinHandle<()>>,
    stats: Arc<CommitStats>,
}

impl<J: Send + 'static> Collector<J> {
    /// Starts `threads` committers, each running `commit` on the batches it takes.
    pub(crate) fn start<F>(name: &str, threads: usize, commit: F) -> Result<Self, BackendError>
    where
        F: Fn(Vec<J>) + Send + Sync + Clone + 'static,
    {
        let (queue, jobs) = crossbeam_channel::unbounded::<J>();
        let stats = Arc::new(CommitStats::default());
        let mut handles = Vec::new();
        for i in 0..threads.max(1) {
            let jobs = jobs.clone();
            let commit = commit.clone();
            let stats = stats.clone();
            let handle = std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn(move || run(&jobs, &commit, &stats))
                .map_err(|e| BackendError::Backend(format!("cannot start a commit thread: {e}")))?;
            handles.push(handle);
        }
        Ok(Self {
            queue: Some(queue),
            threads: handles,
            stats,
        })
    }

    /// What the committers have measured.
    pub(crate) fn stats(&self) -> Arc<CommitStats> {
        self.stats.clone()
    }

    /// Puts `job` on the queue; gives it back when the committers are gone.
    pub(crate) fn send(&self, job: J) -> Result<(), J> {
        match self.queue.as_ref() {
            Some(queue) => queue
                .send(job)
                .map_err(|crossbeam_channel::SendError(job)| job),
            None => Err(job),
        }
    }
}

impl Collector<Job> {
    /// Queues an append and waits for its answer.
    pub(crate) fn submit(
        &self,
        session_id: &str,
        drafts: Vec<EventDraft>,
    ) -> Result<Vec<TraceEvent>, ChainStoreError> {
        wait_for(|done| self.queue(session_id, drafts, done))
    }

    /// Queues an append; `done` is told its outcome, once, from the committer thread when the
    /// append is durable (or at once when it is refused before queueing). The drafts are
    /// prepared (payloads canonicalised) here, on the appender's thread, so that the committer,
    /// which every append of the store goes through, only links hashes and writes.
    pub(crate) fn queue(&self, session_id: &str, drafts: Vec<EventDraft>, done: Reply) {
        let drafts = drafts.into_iter().map(PreparedDraft::new).collect();
        self.queue_prepared(session_id, drafts, None, done);
    }

    /// [`Collector::queue`] of prepared drafts, perhaps with a change of state to write with
    /// them.
    pub(crate) fn queue_prepared(
        &self,
        session_id: &str,
        drafts: Vec<PreparedDraft>,
        state: Option<PgChange>,
        done: Reply,
    ) {
        if let Err(e) = check_append(session_id, drafts.len()) {
            return done(Err(e));
        }
        let job = Job {
            work: JobWork {
                session_id: session_id.to_owned(),
                drafts,
                state,
            },
            reply: done,
        };
        if let Err(job) = self.send(job) {
            (job.reply)(Err(stopped()));
        }
    }
}

/// The append preconditions every backend shares, checked before anything is queued.
pub(crate) fn check_append(session_id: &str, drafts: usize) -> Result<(), ChainStoreError> {
    cra_trace::store::check_session_id(session_id)?;
    if drafts == 0 {
        return Err(ChainStoreError::EmptyAppend);
    }
    Ok(())
}

/// Starts an operation that reports its outcome through a callback (`start` is handed it) and
/// waits for that outcome: the blocking form of every `..._then` call. A callback dropped
/// unanswered means the committer is gone.
pub(crate) fn wait_for<T, E>(
    start: impl FnOnce(Box<dyn FnOnce(Result<T, E>) + Send>),
) -> Result<T, E>
where
    T: Send + 'static,
    E: From<ChainStoreError> + Send + 'static,
{
    let (reply, answer) = crossbeam_channel::bounded(1);
    start(Box::new(move |outcome| {
        let _ = reply.send(outcome);
    }));
    answer.recv().map_err(|_| E::from(stopped()))?
}

/// The answer when the committer is gone.
pub(crate) fn stopped() -> ChainStoreError {
    ChainStoreError::Unavailable("the commit thread has stopped".into())
}

impl<J> Drop for Collector<J> {
    fn drop(&mut self) {
        self.queue.take();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

fn run<J>(jobs: &Receiver<J>, commit: &dyn Fn(Vec<J>), stats: &CommitStats) {
    while let Ok(first) = jobs.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH_APPENDS {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let (appends, began) = (batch.len(), std::time::Instant::now());
        commit(batch);
        stats.record(appends, began.elapsed());
    }
}
