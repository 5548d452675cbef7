//! Fault points: the named places between two writes where a crash is worth testing.
//!
//! A write that is not one transaction leaves something behind when the process dies between
//! its steps, and start-up has to roll that forward. Each such place is marked with
//! [`fault_point!`](crate::fault_point) and declared once in [`POINTS`], with what a crash there
//! leaves and what repairs it. The macro refuses, at compile time, a name [`POINTS`] does not
//! declare, and the tidy test refuses a declared point no code marks.
//!
//! With the `fault-points` feature (enabled only by the crash tests' dev-dependencies, never in
//! a release build) the process aborts the first time it reaches the point that the
//! [`ARM_VAR`] environment variable names, after writing [`HIT_MARK`] and the point's name to
//! stderr: the crash suite (`cra-runtime`'s `tests/it/crash.rs`) arms each point in turn on each
//! backend, checks that the server died there, and checks what the next start made of it.
//! Without the feature the macro compiles to nothing but the name check.

/// The environment variable naming the point to abort at (feature `fault-points` only).
pub const ARM_VAR: &str = "CRA_FAULT_POINT";

/// What the process writes to stderr, followed by the point's name, just before aborting.
pub const HIT_MARK: &str = "CRA-FAULT-POINT-HIT ";

/// One declared fault point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultPoint {
    /// Its name: `area.operation.moment`.
    pub name: &'static str,
    /// What a crash there leaves behind, and what the next start does about it.
    pub leaves: &'static str,
}

/// Every fault point, in the order an operation reaches them.
pub const POINTS: &[FaultPoint] = &[
    FaultPoint {
        name: "trace.append.committed",
        leaves: "a batch of appends durable but not answered: the clients retry; nothing to repair",
    },
    FaultPoint {
        name: "execute.leased",
        leaves: "an execution's lease without `action.requested`: the next start drops the lease",
    },
    FaultPoint {
        name: "execute.approved",
        leaves: "`action.approved` whose executor never ran: the next start appends \
                 `action.failed` (`executor_interrupted`)",
    },
    FaultPoint {
        name: "execute.performed",
        leaves: "an action performed without its outcome recorded: the next start appends \
                 `action.failed` (`executor_interrupted`: check the target system)",
    },
    FaultPoint {
        name: "relay.write.stored",
        leaves: "a Relay change and its outbox entry without their events: the next start \
                 appends them (the outbox's roll forward)",
    },
    FaultPoint {
        name: "relay.settle.opened",
        leaves: "a project's audit session record without its opening events: the next start \
                 appends them from the outbox entry",
    },
    FaultPoint {
        name: "start.executions.closed",
        leaves: "interrupted executions closed, the Relay outbox not yet rolled forward: the \
                 next start rolls it",
    },
];

/// Whether `name` is declared in [`POINTS`] (const: [`fault_point!`](crate::fault_point)
/// checks its name at compile time).
pub const fn declared(name: &str) -> bool {
    let mut i = 0;
    while i < POINTS.len() {
        if same(POINTS[i].name.as_bytes(), name.as_bytes()) {
            return true;
        }
        i += 1;
    }
    false
}

const fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Marks a declared fault point (see the [`fault`](crate::fault) module).
#[macro_export]
macro_rules! fault_point {
    ($name:literal) => {{
        const _: () = assert!(
            $crate::fault::declared($name),
            concat!(
                "fault point `",
                $name,
                "` is not declared in cra_store::fault::POINTS"
            )
        );
        $crate::fault::reached($name);
    }};
}

/// The process reached the point `name`: aborts if it is the armed one.
#[inline]
pub fn reached(name: &'static str) {
    #[cfg(feature = "fault-points")]
    armed::reached(name);
    #[cfg(not(feature = "fault-points"))]
    let _ = name;
}

#[cfg(feature = "fault-points")]
mod armed {
    use std::io::Write;
    use std::sync::OnceLock;

    static ARMED: OnceLock<Option<String>> = OnceLock::new();

    pub(super) fn reached(name: &'static str) {
        let armed = ARMED.get_or_init(|| std::env::var(super::ARM_VAR).ok());
        if armed.as_deref() == Some(name) {
            let mut err = std::io::stderr().lock();
            let _ = writeln!(err, "{}{name}", super::HIT_MARK);
            let _ = err.flush();
            std::process::abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_declared() {
        for (i, p) in POINTS.iter().enumerate() {
            assert!(declared(p.name));
            assert!(
                POINTS[i + 1..].iter().all(|q| q.name != p.name),
                "{} is declared twice",
                p.name
            );
        }
        assert!(!declared("trace.append"));
        assert!(!declared("trace.append.committed.x"));
    }
}
