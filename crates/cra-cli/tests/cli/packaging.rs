//! What a fresh machine installs: the Dockerfile's command and port, the completion scripts,
//! and the license files. No Docker engine runs here, so the image is not built; its command is
//! run with the binary under test instead, over directories standing in for its volume and
//! atlas folder.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use cra_cli::cmd::completions::{Shell, script};

use crate::serve::listening;
use crate::{http_get, terminate};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn dockerfile() -> String {
    std::fs::read_to_string(root().join("Dockerfile")).unwrap()
}

/// The JSON array of the Dockerfile's `instruction` line (exec form).
fn exec_form(dockerfile: &str, instruction: &str) -> Vec<String> {
    let line = dockerfile
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{instruction} ")))
        .unwrap_or_else(|| panic!("the Dockerfile has no {instruction}"));
    serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("{instruction} is not in exec form (a JSON array): {e}"))
}

/// The value after `flag` in `args`.
fn flag<'a>(args: &'a [String], flag: &str) -> &'a str {
    let at = args
        .iter()
        .position(|a| a == flag)
        .unwrap_or_else(|| panic!("the command has no {flag}: {args:?}"));
    &args[at + 1]
}

#[test]
fn the_dockerfile_command_serves_its_atlases_on_its_exposed_port_from_its_volume() {
    let file = dockerfile();
    assert_eq!(exec_form(&file, "ENTRYPOINT"), ["cra"]);
    let cmd = exec_form(&file, "CMD");
    let addr = flag(&cmd, "--addr");
    let data = flag(&cmd, "--data");
    let exposed = file
        .lines()
        .find_map(|l| l.strip_prefix("EXPOSE "))
        .expect("an EXPOSE line");
    assert_eq!(
        addr,
        format!("0.0.0.0:{exposed}"),
        "listens on every interface, on EXPOSE's port"
    );
    assert!(
        file.lines().any(|l| l == format!("VOLUME {data}")),
        "the data directory {data} is the volume"
    );
    let workdir = file
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("WORKDIR "))
        .expect("a WORKDIR");
    assert!(
        file.contains(&format!("mkdir -p {data} {workdir}/atlases")),
        "the image creates {data} and the atlas folder the server reads ({workdir}/atlases)"
    );

    // The same command on loopback, in a folder laid out as the image's WORKDIR (an atlas in
    // its atlases folder), over a fresh data directory.
    let dir = tempfile::tempdir().unwrap();
    let (volume, workdir) = (dir.path().join("data"), dir.path().join("etc-cra"));
    std::fs::create_dir_all(&volume).unwrap();
    let atlas = workdir.join("atlases/first");
    std::fs::create_dir_all(&atlas).unwrap();
    let example = root().join("atlases/com.example.customer-support");
    for entry in walk(&example) {
        let to = atlas.join(entry.strip_prefix(&example).unwrap());
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(&entry, &to).unwrap();
    }
    let args: Vec<std::ffi::OsString> = cmd
        .iter()
        .map(|a| match a.as_str() {
            a if a == addr => "127.0.0.1:0".into(),
            a if a == data => volume.clone().into_os_string(),
            a => a.into(),
        })
        .collect();
    let mut child = Command::new(env!("CARGO_BIN_EXE_cra"))
        .args(&args)
        .current_dir(&workdir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (url, _lines) = listening(&mut child);
    let health = http_get(format!("{url}/v1/health")).unwrap();
    assert_eq!(health.status(), 200);
    // The first start writes the admin key into the volume; with it, the atlas is listed.
    let keys = std::fs::read_to_string(volume.join("api-keys.toml")).unwrap();
    let token = keys
        .lines()
        .find(|l| l.trim_start().starts_with("token"))
        .and_then(|l| l.split('"').nth(1))
        .expect("an admin token in the volume's api-keys.toml");
    let atlases = cra_runtime::tls::blocking_http_client()
        .build()
        .unwrap()
        .get(format!("{url}/v1/atlases"))
        .bearer_auth(token)
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert!(
        atlases.contains("com.example.customer-support"),
        "the atlas in the atlases folder is served: {atlases}"
    );
    terminate(child);
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[test]
fn the_dockerfile_builds_with_a_rust_the_workspace_accepts() {
    let file = dockerfile();
    let image = file
        .lines()
        .find_map(|l| l.strip_prefix("FROM rust:"))
        .expect("a rust: builder stage");
    let version = image.split(['-', ' ']).next().unwrap();
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let required = manifest
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .expect("a workspace rust-version")
        .trim_matches('"');
    let parse = |v: &str| -> Vec<u32> { v.split('.').map(|n| n.parse().unwrap()).collect() };
    assert!(
        parse(version) >= parse(required),
        "the builder's Rust {version} is older than the workspace's rust-version {required}"
    );
}

/// Runs bash's completion of `line` (the cursor at its end) with the generated script and
/// answers what it offers.
fn bash_completes(line: &str) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cra.bash");
    std::fs::write(&path, script(Shell::Bash)).unwrap();
    let words: Vec<&str> = line.split(' ').collect();
    let current = words.len() - 1;
    let previous = if current > 0 { words[current - 1] } else { "" };
    let program = format!(
        "source {}; COMP_WORDS=({}); COMP_CWORD={current}; COMP_LINE='{line}'; COMP_POINT={}; \
         _cra cra '{}' '{previous}'; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        path.display(),
        words
            .iter()
            .map(|w| format!("'{w}'"))
            .collect::<Vec<_>>()
            .join(" "),
        line.len(),
        words[current],
    );
    let out = Command::new("bash")
        .args(["--norc", "-c", &program])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "bash: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect()
}

#[test]
fn bash_completes_commands_subcommands_and_flags() {
    assert_eq!(bash_completes("cra se"), ["serve", "session"]);
    assert_eq!(bash_completes("cra ses"), ["session"]);
    let trace = bash_completes("cra trace ");
    assert!(trace.iter().any(|w| w == "verify"), "{trace:?}");
    assert!(
        bash_completes("cra serve --ad")
            .iter()
            .any(|w| w == "--addr")
    );
    let shells = bash_completes("cra completions ");
    for shell in ["bash", "zsh", "fish"] {
        assert!(shells.iter().any(|w| w == shell), "{shells:?}");
    }
}

/// Runs fish's own completion of `line` (`complete -C`) with the generated script and answers
/// the candidates it offers (without their descriptions).
fn fish_completes(line: &str) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cra.fish");
    std::fs::write(&path, script(Shell::Fish)).unwrap();
    let program = format!("source {}; complete -C '{line}'", path.display());
    let out = Command::new("fish")
        .args(["--no-config", "-c", &program])
        .output()
        .unwrap_or_else(|e| panic!("this test needs fish on PATH (.ci/install installs it): {e}"));
    assert!(
        out.status.success(),
        "fish: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.split('\t').next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn fish_completes_commands_subcommands_and_flags() {
    assert_eq!(fish_completes("cra se"), ["serve", "session"]);
    assert!(
        fish_completes("cra session ")
            .iter()
            .any(|w| w == "execute")
    );
    assert!(fish_completes("cra trace ").iter().any(|w| w == "verify"));
    assert!(
        fish_completes("cra serve --ad")
            .iter()
            .any(|w| w == "--addr")
    );
}

/// zsh's completion cannot be driven without a terminal, so this checks what can be: the
/// script parses (`zsh -n`), and `compinit` then sourcing it registers `_cra` for `cra`.
#[test]
fn the_zsh_script_parses_and_registers_its_completion_function() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("_cra");
    std::fs::write(&path, script(Shell::Zsh)).unwrap();
    let zsh = |args: &[&str]| {
        let out = Command::new("zsh").args(args).output().unwrap_or_else(|e| {
            panic!("this test needs zsh on PATH (.ci/install installs it): {e}")
        });
        assert!(
            out.status.success(),
            "zsh: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    zsh(&["-n", path.to_str().unwrap()]);
    let program = format!(
        "autoload -U compinit; compinit -u -D; source {}; print -r -- $_comps[cra] ${{+functions[_cra]}}",
        path.display()
    );
    assert_eq!(zsh(&["-f", "-c", &program]).trim(), "_cra 1");
}

#[test]
fn every_shell_script_names_every_command() {
    use clap::CommandFactory;
    let command = cra_cli::Cli::command();
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let text = script(shell);
        for sub in command.get_subcommands() {
            assert!(
                text.contains(sub.get_name()),
                "the {shell:?} script lacks `{}`",
                sub.get_name()
            );
        }
    }
    assert!(script(Shell::Zsh).starts_with("#compdef cra"));
    assert!(script(Shell::Fish).contains("complete -c cra"));
}

#[test]
fn cra_completions_writes_a_file_and_answers_json() {
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("cra.fish");
    let cra = env!("CARGO_BIN_EXE_cra");
    let out = Command::new(cra)
        .args(["completions", "fish", "-o", "json", "--out"])
        .arg(&out_path)
        .output()
        .unwrap();
    assert!(out.status.success());
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let written = std::fs::read_to_string(&out_path).unwrap();
    assert_eq!(answer["shell"], "fish");
    assert_eq!(answer["bytes"], written.len());
    assert_eq!(written, script(Shell::Fish));

    let printed = Command::new(cra)
        .args(["completions", "bash", "-o", "json"])
        .output()
        .unwrap();
    let answer: serde_json::Value = serde_json::from_slice(&printed.stdout).unwrap();
    assert_eq!(answer["script"], script(Shell::Bash));

    let unwritable = Command::new(cra)
        .args(["completions", "zsh", "--out"])
        .arg(dir.path().join("no-such-folder/_cra"))
        .output()
        .unwrap();
    assert_eq!(unwritable.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&unwritable.stderr).contains("choose a writable --out"));
}

#[test]
fn the_license_file_is_the_license_the_workspace_declares() {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    assert!(manifest.contains("license = \"Apache-2.0\""));
    let license = std::fs::read_to_string(root().join("LICENSE")).unwrap();
    let heading: Vec<&str> = license
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .take(2)
        .collect();
    assert_eq!(heading, ["Apache License", "Version 2.0, January 2004"]);
    let third = std::fs::read_to_string(root().join("THIRD-PARTY.md")).unwrap();
    assert!(third.contains("| crate | version | license |"));
}
