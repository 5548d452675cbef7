//! `cra completions SHELL`: a completion script for bash, zsh or fish, made from the same command
//! definitions the parser uses, so it names every command and flag this build has.
//!
//! Installing one (the README says where each shell looks): `cra completions bash >
//! ~/.local/share/bash-completion/completions/cra`, `cra completions zsh > ~/.zfunc/_cra`,
//! `cra completions fish > ~/.config/fish/completions/cra.fish`.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, CommandFactory, ValueEnum};
use serde_json::json;

use crate::exit::Exit;
use crate::output::OutputFormat;

/// The shells `cra completions` writes scripts for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Shell {
    /// bash (with the bash-completion package).
    Bash,
    /// zsh (a `_cra` function for `fpath`).
    Zsh,
    /// fish.
    Fish,
}

impl Shell {
    fn generator(self) -> clap_complete::Shell {
        match self {
            Shell::Bash => clap_complete::Shell::Bash,
            Shell::Zsh => clap_complete::Shell::Zsh,
            Shell::Fish => clap_complete::Shell::Fish,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Shell::Bash => "bash",
            Shell::Zsh => "zsh",
            Shell::Fish => "fish",
        }
    }
}

/// `cra completions` options.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to write a completion script for.
    #[arg(value_enum)]
    pub shell: Shell,
    /// Write the script to this file instead of standard output (replacing it).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Output format: text prints the script (or, with --out, where it went); json prints
    /// `{"shell", "script"}` (or `{"shell", "path", "bytes"}` with --out).
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

/// The completion script for `shell`, naming the command `cra`.
pub fn script(shell: Shell) -> String {
    let mut command = crate::Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(shell.generator(), &mut command, "cra", &mut out);
    // clap_complete writes only the text its templates and our command definitions hold.
    String::from_utf8_lossy(&out).into_owned()
}

/// Runs `cra completions`.
pub fn run(args: CompletionsArgs) -> Exit {
    let text = script(args.shell);
    let shown = match &args.out {
        Some(path) => {
            if let Err(e) = std::fs::write(path, &text) {
                eprintln!(
                    "cra completions: cannot write {}: {e}; choose a writable --out path",
                    path.display()
                );
                return Exit::CouldNotRun;
            }
            match args.output {
                OutputFormat::Text => format!(
                    "wrote the {} completion script to {}\n",
                    args.shell.name(),
                    path.display()
                ),
                OutputFormat::Json => format!(
                    "{}\n",
                    json!({"shell": args.shell.name(), "path": path, "bytes": text.len()})
                ),
            }
        }
        None => match args.output {
            OutputFormat::Text => text,
            OutputFormat::Json => {
                format!("{}\n", json!({"shell": args.shell.name(), "script": text}))
            }
        },
    };
    let mut stdout = std::io::stdout().lock();
    if stdout
        .write_all(shown.as_bytes())
        .and_then(|()| stdout.flush())
        .is_err()
    {
        return Exit::CouldNotRun;
    }
    Exit::Success
}
