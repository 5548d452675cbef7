//! The command line's conventions, checked on every command the parser defines (so a new
//! command cannot forget them): `-o` is always `--output` and takes a format (`text` or
//! `json`), a file is always `--out`; a command that talks to a server takes `--url` (also
//! `$CRA_URL`) and, beside it, `--token` (also `$CRA_TOKEN`); every command has `--help` that
//! renders.

use clap::CommandFactory;

/// Every command, with its path (`cra trace export`), leaves and groups alike.
fn commands() -> Vec<(String, clap::Command)> {
    fn walk(path: String, command: &clap::Command, out: &mut Vec<(String, clap::Command)>) {
        out.push((path.clone(), command.clone()));
        for sub in command.get_subcommands() {
            walk(format!("{path} {}", sub.get_name()), sub, out);
        }
    }
    let mut out = Vec::new();
    let mut root = cra_cli::Cli::command();
    root.build();
    walk("cra".into(), &root, &mut out);
    out
}

#[test]
fn dash_o_is_always_the_output_format() {
    let mut checked = 0;
    for (path, command) in commands() {
        for arg in command.get_arguments() {
            if arg.get_short() == Some('o') {
                checked += 1;
                assert_eq!(
                    arg.get_long(),
                    Some("output"),
                    "`{path}`: -o must be --output"
                );
                let values: Vec<String> = arg
                    .get_possible_values()
                    .iter()
                    .map(|v| v.get_name().to_owned())
                    .collect();
                // `cra atlas check` also writes SARIF for code-review tools; every -o takes
                // text and json first.
                let extra: &[&str] = if path == "cra atlas check" {
                    &["sarif"]
                } else {
                    &[]
                };
                let expected: Vec<&str> = ["text", "json"].iter().chain(extra).copied().collect();
                assert_eq!(values, expected, "`{path}`: -o takes a format");
            }
            if arg.get_long() == Some("output") {
                assert_eq!(arg.get_short(), Some('o'), "`{path}`: --output is also -o");
            }
        }
    }
    assert!(checked > 20, "only {checked} commands take -o");
}

#[test]
fn a_command_that_talks_to_a_server_takes_url_and_token_from_flags_or_the_environment() {
    let mut servers = Vec::new();
    for (path, command) in commands() {
        let arg = |name: &str| {
            command
                .get_arguments()
                .find(|a| a.get_long() == Some(name))
                .cloned()
        };
        let Some(url) = arg("url") else { continue };
        servers.push(path.clone());
        // These run locally or against a server, chosen by giving --url: with $CRA_URL set in
        // a shell, every local run would become a server run (or conflict with its --data).
        if !["cra atlas simulate", "cra mcp serve", "cra mcp proxy"].contains(&path.as_str()) {
            let env = url.get_env().and_then(|e| e.to_str());
            assert_eq!(env, Some("CRA_URL"), "`{path} --url`");
        }
        if path == "cra log watch" {
            continue; // the log's routes are public: an auditor needs no key (specs/tlog.md)
        }
        let token = arg("token").unwrap_or_else(|| panic!("`{path}` takes --url but not --token"));
        assert_eq!(
            token.get_env().and_then(|e| e.to_str()),
            Some("CRA_TOKEN"),
            "`{path} --token`"
        );
    }
    for expected in [
        "cra trace state",
        "cra session open",
        "cra session execute",
        "cra approvals grant",
        "cra trace export",
        "cra trace tail",
    ] {
        assert!(
            servers.iter().any(|p| p == expected),
            "`{expected}` talks to a server: {servers:?}"
        );
    }
}

#[test]
fn every_command_renders_its_help() {
    for (path, mut command) in commands() {
        let help = command.render_help().to_string();
        assert!(help.contains("Usage:"), "`{path} --help`:\n{help}");
    }
}
