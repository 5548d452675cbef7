//! The README's five-minute first run, extracted and run verbatim: the commands of its `sh`
//! block after the heading "A five-minute first run" (with `cra session`), and of the one after
//! "The same steps over plain HTTP" (with `curl`), each with the `cra` under test on the `PATH`,
//! in an empty directory. Each must reach an allowed execute and a verified chain, so the
//! walk-throughs a new user follows stay true.

use std::path::Path;
use std::process::Command;

/// The ```` ```sh ```` block after the heading `heading` in `markdown`, after skipping `skip`
/// blocks (the install command is for people, not for CI).
fn sh_block_after<'a>(markdown: &'a str, heading: &str, skip: usize) -> &'a str {
    let from = markdown
        .find(heading)
        .unwrap_or_else(|| panic!("the README has no heading `{heading}`"));
    let rest = &markdown[from..];
    let walk = rest
        .split("```sh\n")
        .nth(1 + skip)
        .expect("the walk-through block");
    &walk[..walk.find("```").expect("the block ends")]
}

fn readme() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md")).unwrap()
}

#[cfg(unix)]
#[test]
fn the_readme_first_run_reaches_an_allowed_execute_and_a_verified_chain() {
    let readme = readme();
    let block = sh_block_after(&readme, "## A five-minute first run", 1);
    assert!(
        block.contains("cra session execute"),
        "the block executes an action with cra"
    );
    assert!(
        !block.contains("curl"),
        "the first run needs nothing but cra"
    );
    let (dir, out) = run_walkthrough(block);
    assert!(out.contains("valid: "), "the chain verified:\n{out}");
    let executed = std::fs::read_to_string(dir.path().join("executed.txt")).unwrap();
    let mut lines = executed.lines();
    assert_eq!(lines.next(), Some("success"));
    let result: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(result, serde_json::json!({"echo": {"message": "hello"}}));
}

#[cfg(unix)]
#[test]
fn the_readme_http_walkthrough_reaches_an_allowed_execute_and_a_verified_chain() {
    let readme = readme();
    let block = sh_block_after(&readme, "### The same steps over plain HTTP", 0);
    assert!(
        block.contains("/v1/execute"),
        "the block executes an action over HTTP"
    );
    let (dir, out) = run_walkthrough(block);
    assert!(out.contains("success"), "the execute succeeded:\n{out}");
    assert!(out.contains("valid: "), "the chain verified:\n{out}");
    let executed = std::fs::read_to_string(dir.path().join("executed.json")).unwrap();
    let executed: serde_json::Value = serde_json::from_str(&executed).unwrap();
    assert_eq!(
        executed["result"],
        serde_json::json!({"echo": {"message": "hello"}})
    );
}

/// Runs `block` in bash (`-euo pipefail`) in a fresh directory with the `cra` under test first
/// on the `PATH`; answers the directory and what the block printed, once it succeeded.
#[cfg(unix)]
fn run_walkthrough(block: &str) -> (tempfile::TempDir, String) {
    use std::os::unix::process::CommandExt;

    // Both walk-throughs serve on the README's port, 8421: one at a time (a panic in the other
    // leaves the lock poisoned, not the port taken).
    static PORT_8421: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _port = PORT_8421
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = tempfile::tempdir().unwrap();
    let bin = Path::new(env!("CARGO_BIN_EXE_cra")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut child = Command::new("bash")
        .args(["-euo", "pipefail", "-c", block])
        .current_dir(dir.path())
        .env("PATH", path)
        // Its own process group, so that a failing step's server is stopped below too.
        .process_group(0)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let group = child.id();
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || std::io::read_to_string(stdout).unwrap());
    let err = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap());
    let status = child.wait().unwrap();
    let _ = Command::new("kill")
        .args(["-TERM", "--", &format!("-{group}")])
        .status();
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    let log = std::fs::read_to_string(dir.path().join("serve.log")).unwrap_or_default();
    assert!(
        status.success(),
        "the walk-through failed ({status})\nstdout:\n{out}\nstderr:\n{err}\nserve.log:\n{log}"
    );
    (dir, out)
}
