//! The append feed: how every replica sharing a schema learns of every other replica's appends.
//!
//! A batch transaction that appends events also sends, inside itself, a PostgreSQL `NOTIFY` on
//! the schema's channel ([`channel`]) naming each session it appended to and the sequence range
//! (`from..to`), and whether the chain ended. PostgreSQL delivers a notification only if its
//! transaction commits, after the commit, in commit order, to every connection listening. So a
//! listener hears of each committed append exactly once, and for one session in sequence order
//! (the session's head row lock orders its commits).
//!
//! The notification carries no events (its payload is at most 8000 bytes): a listener that
//! wants them reads them from the store. It also carries the sending store's origin, so a
//! replica can tell its own appends (already published to its own subscribers) from others'.
//!
//! The same channel announces each new generation of the atlas catalog (`crate::catalog`): a
//! one-line payload, [`encode_generation`], sent inside the transaction that commits it, so
//! every replica reads the new set in force as soon as it is committed.
//!
//! [`PgStore::listen`] holds one dedicated connection (not from the pool) that listens, and a
//! thread that hands each notice to the caller. When that connection breaks, notifications sent
//! meanwhile are lost: the thread reconnects (backing off up to [`MAX_BACKOFF`]) and reports
//! [`FeedEvent::Lost`], so the caller reads the store for what it may have missed. Nothing here
//! polls the store.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use postgres::fallible_iterator::FallibleIterator as _;
use postgres::{Client, NoTls};

use super::{PgStore, pause, quote_ident};
use crate::BackendError;

/// The tag of an atlas catalog announcement: the tag, the origin, the generation.
const GENERATION_TAG: &str = "cra-atlases/1";

/// Largest notification payload sent; PostgreSQL refuses 8000 bytes or more.
const MAX_PAYLOAD: usize = 7900;

/// First line of every payload this build sends: a format tag, then the origin.
const TAG: &str = "cra-appended/1";

/// Longest wait between two attempts to reconnect the listening connection.
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// How often the listening thread looks up from the connection to see whether it should stop.
const STOP_CHECK: Duration = Duration::from_millis(200);

/// Appends to one session in one committed transaction: sequences `from..to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appended {
    /// The session.
    pub session_id: String,
    /// The first sequence appended.
    pub from: u64,
    /// One past the last sequence appended (the chain's length after the commit).
    pub to: u64,
    /// Whether the chain ended with these appends (`session.ended`).
    pub ended: bool,
}

/// One notification: who sent it and what it appended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    /// The sending store's origin ([`PgStore::origin`]).
    pub origin: u64,
    /// The appends, by session.
    pub appended: Vec<Appended>,
}

/// What the listening thread reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FeedEvent {
    /// Appends some store committed (this one's included: compare [`Notice::origin`]).
    Notice(Notice),
    /// Some store committed a new generation of the atlas catalog.
    Atlases {
        /// The sending store's origin.
        origin: u64,
        /// The generation committed.
        generation: u64,
    },
    /// The listening connection broke and is back: notifications sent meanwhile were lost. Read
    /// the store for anything a reader is waiting on.
    Lost {
        /// Why, for the log.
        reason: String,
    },
}

/// The notification channel of `schema`: one per schema, so deployments sharing a database
/// never hear each other. Schema names may take 63 bytes and channel names may not exceed 63,
/// so the channel is named by a number derived from the schema (`super::name_key`).
pub fn channel(schema: &str) -> String {
    format!(
        "cra_appended_{:016x}",
        super::name_key(&format!("cra-store feed {schema}"))
    )
}

/// `appended` by `origin` as notification payloads, each under PostgreSQL's size limit: the tag
/// line, then one line per session, `<from> <to> <e|o> <session id>` (`e`: the chain ended).
/// Session ids are printable ASCII and never hold a line break, so they go last, as written.
pub fn encode(origin: u64, appended: &[Appended]) -> Vec<String> {
    let head = format!("{TAG} {origin:016x}");
    let mut out = Vec::new();
    let mut payload = head.clone();
    for a in appended {
        let line = format!(
            "\n{} {} {} {}",
            a.from,
            a.to,
            if a.ended { 'e' } else { 'o' },
            a.session_id
        );
        if payload.len() + line.len() > MAX_PAYLOAD && payload.len() > head.len() {
            out.push(std::mem::replace(&mut payload, head.clone()));
        }
        payload.push_str(&line);
    }
    if payload.len() > head.len() {
        out.push(payload);
    }
    out
}

/// A payload [`encode`] wrote; `None` for anything else (another build's format, a stray
/// `NOTIFY` on the channel), which the listener ignores.
pub fn decode(payload: &str) -> Option<Notice> {
    let mut lines = payload.split('\n');
    let origin = lines.next()?.strip_prefix(TAG)?.strip_prefix(' ')?;
    let origin = u64::from_str_radix(origin, 16).ok()?;
    let appended = lines
        .map(|line| {
            let mut parts = line.splitn(4, ' ');
            let from = parts.next()?.parse().ok()?;
            let to = parts.next()?.parse().ok()?;
            let ended = match parts.next()? {
                "e" => true,
                "o" => false,
                _ => return None,
            };
            let session_id = parts.next().filter(|s| !s.is_empty())?.to_owned();
            (from < to).then_some(Appended {
                session_id,
                from,
                to,
                ended,
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Notice { origin, appended })
}

/// The payload announcing generation `generation` of the atlas catalog, committed by `origin`.
pub fn encode_generation(origin: u64, generation: u64) -> String {
    format!("{GENERATION_TAG} {origin:016x} {generation}")
}

/// The origin and generation of a payload [`encode_generation`] wrote; `None` for anything else.
pub fn decode_generation(payload: &str) -> Option<(u64, u64)> {
    let rest = payload.strip_prefix(GENERATION_TAG)?.strip_prefix(' ')?;
    let (origin, generation) = rest.split_once(' ')?;
    let origin = u64::from_str_radix(origin, 16).ok()?;
    let generation: u64 = generation.parse().ok().filter(|g| *g > 0)?;
    Some((origin, generation))
}

/// The event a payload on the channel stands for, if it is one of ours.
fn event_of(payload: &str) -> Option<FeedEvent> {
    if let Some(notice) = decode(payload) {
        return Some(FeedEvent::Notice(notice));
    }
    let (origin, generation) = decode_generation(payload)?;
    Some(FeedEvent::Atlases { origin, generation })
}

/// A listening connection's thread; dropping it stops the thread and waits for it (at most
/// about `STOP_CHECK`, 200 ms).
#[derive(Debug)]
pub struct Listener {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl PgStore {
    /// This store's origin: a random number naming it in the notifications it sends, so that its
    /// own listener can tell its appends from other replicas'.
    pub fn origin(&self) -> u64 {
        self.inner.origin
    }

    /// Listens to the schema's append feed on a connection of its own and hands every
    /// [`FeedEvent`] to `sink`, on a thread, until the returned [`Listener`] is dropped. The first
    /// connection is made before this returns (an error is returned as is): no append committed
    /// after the return goes unheard unless a [`FeedEvent::Lost`] says so.
    pub fn listen<F>(&self, sink: F) -> Result<Listener, BackendError>
    where
        F: FnMut(FeedEvent) + Send + 'static,
    {
        let (url, channel) = (self.inner.url.clone(), channel(self.schema()));
        let client = connect_listening(&url, &channel)?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("cra-pg-feed".into())
                .spawn(move || run(client, &url, &channel, &stop, sink))
                .map_err(|e| BackendError::Connect(format!("cannot start the feed thread: {e}")))?
        };
        Ok(Listener {
            stop,
            thread: Some(thread),
        })
    }
}

fn connect_listening(url: &str, channel: &str) -> Result<Client, BackendError> {
    let mut client =
        Client::connect(url, NoTls).map_err(|e| BackendError::Connect(e.to_string()))?;
    client
        .batch_execute(&format!("LISTEN {}", quote_ident(channel)))
        .map_err(|e| BackendError::Connect(e.to_string()))?;
    Ok(client)
}

/// The listening thread: relays notifications until told to stop, reconnecting after a break.
fn run<F: FnMut(FeedEvent)>(
    mut client: Client,
    url: &str,
    channel: &str,
    stop: &AtomicBool,
    mut sink: F,
) {
    loop {
        let reason = relay(&mut client, stop, &mut sink);
        let Some(reason) = reason else { return };
        let mut backoff = Duration::from_millis(100);
        client = loop {
            if pause(stop, backoff) {
                return;
            }
            match connect_listening(url, channel) {
                Ok(c) => break c,
                Err(_) => backoff = (backoff * 2).min(MAX_BACKOFF),
            }
        };
        sink(FeedEvent::Lost { reason });
    }
}

/// Hands notifications to `sink` until `stop` (then `None`) or the connection breaks (then why).
fn relay<F: FnMut(FeedEvent)>(
    client: &mut Client,
    stop: &AtomicBool,
    sink: &mut F,
) -> Option<String> {
    while !stop.load(Ordering::SeqCst) {
        let mut notifications = client.notifications();
        let mut waiting = notifications.timeout_iter(STOP_CHECK);
        loop {
            match waiting.next() {
                Ok(Some(n)) => {
                    if let Some(event) = event_of(n.payload()) {
                        sink(event);
                    }
                }
                Ok(None) => break,
                Err(e) => return Some(format!("the listening connection broke: {e}")),
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(session: &str, from: u64, to: u64, ended: bool) -> Appended {
        Appended {
            session_id: session.to_owned(),
            from,
            to,
            ended,
        }
    }

    #[test]
    fn notices_round_trip_through_their_payload() {
        let appended = vec![
            a("0190f3a0-0000-7000-8000-000000000001", 0, 3, false),
            a("a session id with spaces", 7, 8, true),
        ];
        let payloads = encode(0xdead_beef, &appended);
        assert_eq!(payloads.len(), 1);
        assert_eq!(
            payloads[0],
            "cra-appended/1 00000000deadbeef\n0 3 o 0190f3a0-0000-7000-8000-000000000001\n7 8 e a session id with spaces"
        );
        assert_eq!(
            decode(&payloads[0]),
            Some(Notice {
                origin: 0xdead_beef,
                appended
            })
        );
    }

    #[test]
    fn a_large_batch_is_split_under_the_payload_limit_and_loses_nothing() {
        let appended: Vec<Appended> = (0..500)
            .map(|i| a(&format!("{i:0>128}"), i, i + 2, i % 7 == 0))
            .collect();
        let payloads = encode(1, &appended);
        assert!(payloads.len() > 1);
        assert!(payloads.iter().all(|p| p.len() <= MAX_PAYLOAD));
        let back: Vec<Appended> = payloads
            .iter()
            .flat_map(|p| decode(p).expect("ours").appended)
            .collect();
        assert_eq!(back, appended);
        assert!(encode(1, &[]).is_empty());
    }

    #[test]
    fn payloads_of_other_senders_are_ignored() {
        for stray in [
            "",
            "hello",
            "cra-appended/2 01\n0 1 o s",
            "cra-appended/1 zz\n0 1 o s",
            "cra-appended/1 01\n0 1 x s",
            "cra-appended/1 01\n1 1 o s",
            "cra-appended/1 01\n0 1 o ",
            "cra-appended/1 01\n0 o s",
        ] {
            assert_eq!(decode(stray), None, "{stray:?}");
        }
    }

    #[test]
    fn atlas_generations_are_announced_apart_from_appends() {
        let payload = encode_generation(0xab, 42);
        assert_eq!(payload, "cra-atlases/1 00000000000000ab 42");
        assert_eq!(
            event_of(&payload),
            Some(FeedEvent::Atlases {
                origin: 0xab,
                generation: 42
            })
        );
        assert_eq!(decode(&payload), None);
        for stray in [
            "cra-atlases/1 ab",
            "cra-atlases/1 zz 1",
            "cra-atlases/1 ab 0",
            "cra-atlases/1 ab x",
            "cra-atlases/2 ab 1",
        ] {
            assert_eq!(event_of(stray), None, "{stray:?}");
        }
    }

    #[test]
    fn each_schema_has_its_own_channel_within_the_identifier_limit() {
        let long = "s".repeat(63);
        assert_ne!(channel("cra"), channel("cra2"));
        assert!(channel(&long).len() <= 63);
        assert_eq!(channel("cra"), channel("cra"));
    }
}
