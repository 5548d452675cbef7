//! The `-o text|json` switch shared by every command.

/// How a command prints its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum OutputFormat {
    /// For people.
    #[default]
    Text,
    /// One JSON document on standard output, for programs.
    Json,
}
