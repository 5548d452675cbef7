//! The exit-code contract every `cra` command follows (errata, "CLI exit codes").

use std::process::ExitCode;

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 0: success, valid, same, all tests passed.
    Success,
    /// 1: the command could not run (unreadable file, bad arguments, unreachable server).
    CouldNotRun,
    /// 2: a negative result (invalid chain, failing test, deny under `--fail-on`, formatting
    /// needed, replay divergence, traces differ).
    Negative,
    /// 3: the atlas is invalid.
    InvalidAtlas,
    /// 4: the resolution requires approval (under `--fail-on`).
    RequiresApproval,
}

impl Exit {
    /// The numeric process status.
    pub fn code(self) -> u8 {
        match self {
            Exit::Success => 0,
            Exit::CouldNotRun => 1,
            Exit::Negative => 2,
            Exit::InvalidAtlas => 3,
            Exit::RequiresApproval => 4,
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> Self {
        ExitCode::from(e.code())
    }
}
