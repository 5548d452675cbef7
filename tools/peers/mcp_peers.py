#!/usr/bin/env python3
"""cra's MCP doors driven by the official MCP Python SDK (`mcp`, a peer we did not write).

Four runs, one per transport and protocol era, each against the test atlas
(`crates/cra-cli/tests/fixtures/trace/atlas`: `doc.read` allowed, `deploy.run` needs approval,
`db.drop` denied):
  stdio, 2025-11-25   `cra mcp serve` with `ClientSession.initialize()`
  stdio, 2026-07-28   `cra mcp serve` with the stateless client (`server/discover`)
  http,  2025-11-25   `/mcp` on `cra serve`, an MCP session holding the CARP session
  http,  2026-07-28   `/mcp`, the session named by `cra/session.open` and `_meta["cra/session_id"]`

Then the filesystem MCP server (`@modelcontextprotocol/server-filesystem`, pinned in
tools/peers/package-lock.json) over a temporary directory, governed two ways:
  proxy               `cra atlas import-mcp --writes deny`, then `cra mcp proxy` over stdio:
                      reads run and return the file, writes are refused and change nothing
  executor            `cra atlas import-mcp --writes approve`, the server as an `mcp` executor
                      of `cra serve`, through `cra mcp proxy --url` (the README's client
                      entry, upstream names kept): a write waits for an operator, who grants
                      it over the HTTP API, and the retried call writes the file once; an
                      upstream killed during a call is `executor_crashed`, a call past the
                      executor's timeout is `executor_timeout`, and each time the next call
                      runs (on a restarted upstream after the crash); no upstream outlives
                      the server once it stops

And the stdio transport's hold on its pipes: standard input and output are non-blocking while
`cra mcp serve` serves and blocking again once it has gone, and standard output stays blocking
when standard error is the same pipe (`2>&1`).

In each run the client lists the tools (exactly the allowed actions), reads an allowed page,
is refused a bad argument, the denied action and an unknown name, is told a deploy awaits
approval, and reads the context block, whose SHA-256 it compares with the chain's
`context.injected`. After the run, the session's chain is exported with `cra trace export`,
verified with `tools/appendix_b.py`, and checked to hold an event for every call.

Usage: tools/peers/mcp_peers.py --cra PATH/TO/cra [--keep DIR]
Prints one line per check and a summary; exit 0 when every check held, 1 otherwise.
"""

import argparse
import asyncio
import hashlib
import json
import os
import re
import select
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx2
import mcp_types._v2025_11_25 as wire_2025
import mcp_types._v2026_07_28 as wire_2026
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import ValidationError
from mcp import Client, ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

ROOT = Path(__file__).resolve().parents[2]
ATLAS = ROOT / "crates/cra-cli/tests/fixtures/trace/atlas"
AGENT_KEY = "mcp-peer-agent-key-0000"
OPERATOR_KEY = "mcp-peer-operator-key-0"
KEYS = f"""
[[keys]]
token = "{AGENT_KEY}"
actor_id = "bot"
actor_type = "agent"
roles = ["agent"]

[[keys]]
token = "{OPERATOR_KEY}"
actor_id = "oscar"
actor_type = "human"
roles = ["operator"]
"""
SESSION_IN_INSTRUCTIONS = re.compile(r"CARP session ([0-9a-f-]{36})")
TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")
CALL_TIMEOUT_MS = 2000
APPROVAL_IN_TEXT = re.compile(r"approval ([0-9a-f-]{36})")
FS_SERVER = ROOT / "tools/peers/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"

failures = 0
passed = 0


def check(run, what, ok, detail=""):
    """Records one check and prints it."""
    global failures, passed
    if ok:
        passed += 1
        print(f"ok    {run}: {what}")
    else:
        failures += 1
        print(f"FAIL  {run}: {what}" + (f"\n      {detail}" if detail else ""))


def text_of(result):
    return "".join(c.text for c in result.content if getattr(c, "type", "") == "text")


def schema_checks(run, era, tools):
    """The tool list validates against the MCP schema of its era (the official SDK's wire models,
    generated from that schema), each inputSchema is a valid JSON Schema (2020-12), and each
    action's tool name keeps to the characters MCP asks tool names to use."""
    models = {"2025-11-25": wire_2025, "2026-07-28": wire_2026}[era]
    wire = tools.model_dump(by_alias=True, exclude_none=True, mode="json")
    try:
        models.ListToolsResult.model_validate(wire)
        check(run, f"tools/list validates against the {era} schema", True)
    except ValidationError as e:
        check(run, f"tools/list validates against the {era} schema", False, e)
    bad = []
    for tool in wire["tools"]:
        try:
            Draft202012Validator.check_schema(tool["inputSchema"])
        except SchemaError as e:
            bad.append((tool["name"], e.message))
    check(run, "every inputSchema is a valid JSON Schema", not bad, bad)
    names = [t["name"] for t in wire["tools"] if not t["name"].startswith("cra/")]
    check(run, "action tool names use [A-Za-z0-9_.-], 1 to 128 of them",
          all(TOOL_NAME.fullmatch(n) for n in names), names)


async def exercise(run, client, meta=None):
    """The calls every run makes; returns the context block's text by URI. `meta` (the session
    handle of the stateless era) goes on every request when given."""
    kw = {"meta": meta} if meta else {}
    tools = await client.list_tools(**kw)
    schema_checks(run, run.split()[-1], tools)
    names = sorted(t.name for t in tools.tools if not t.name.startswith("cra/"))
    check(run, "tools/list is exactly the allowed actions", names == ["ci_rerun", "deploy_run", "doc_read"], names)
    schema = next(t.input_schema for t in tools.tools if t.name == "doc_read")
    check(run, "inputSchema is the action's parameters_schema", schema.get("required") == ["page"], schema)

    read = await client.call_tool("doc_read", {"page": "intro"}, **kw)
    check(run, "an allowed call runs", not read.is_error and json.loads(text_of(read)) == {"echo": {"page": "intro"}}, text_of(read))
    bad = await client.call_tool("doc_read", {"page": 7}, **kw)
    check(run, "a bad argument is an error result", bad.is_error and "invalid_parameters" in text_of(bad), text_of(bad))
    deploy = await client.call_tool("deploy_run", {"version": "1.2.3"}, **kw)
    check(run, "a gated call awaits approval", deploy.is_error and "approval" in text_of(deploy), text_of(deploy))
    try:
        denied = await client.call_tool("db_drop", {}, **kw)
        check(run, "a denied action is refused naming its policy", denied.is_error and "deny-drop" in text_of(denied), text_of(denied))
    except MCPError as e:
        check(run, "a denied action is refused naming its policy", False, f"protocol error instead: {e}")
    try:
        await client.call_tool("no_such_tool", {}, **kw)
        check(run, "an unknown tool name is a protocol error", False, "it answered")
    except MCPError as e:
        check(run, "an unknown tool name is a protocol error", "no atlas action" in str(e), str(e))

    resources = await client.list_resources(**kw)
    texts = {}
    for r in resources.resources:
        contents = await client.read_resource(str(r.uri), **kw)
        texts[str(r.uri)] = contents.contents[0].text
    check(run, "the resolution's context is readable", len(texts) == 1, list(texts))
    return texts


def chain_checks(run, chain_file, texts):
    """The exported chain verifies with the Appendix B reference and records every call."""
    verified = subprocess.run(
        [sys.executable, str(ROOT / "tools/appendix_b.py"), "verify", str(chain_file)],
        capture_output=True, text=True,
    )
    check(run, "the chain verifies with tools/appendix_b.py", verified.returncode == 0, verified.stdout + verified.stderr)
    events = [json.loads(line) for line in chain_file.read_text().splitlines() if line.strip()]
    kinds = [e["event_type"] for e in events]
    # doc_read twice (one ran, one bad argument), deploy_run, db_drop; the unknown name records nothing.
    check(run, "every call is an action.requested", kinds.count("action.requested") == 4, kinds)
    check(run, "the allowed call's outcome is recorded", "action.executed" in kinds, kinds)
    check(run, "the session ended", kinds[-1] == "session.ended", kinds[-1:])
    recorded = {e["payload"].get("content_hash") for e in events if e["event_type"] == "context.injected"}
    served = {"sha256:" + hashlib.sha256(t.encode()).hexdigest() for t in texts.values()}
    check(run, "each resource hashes to what context.injected recorded", served and served <= recorded, (served, recorded))


def export(cra, args, out):
    subprocess.run([cra, "trace", "export", *args, "--out", str(out)], check=True, capture_output=True)


async def stdio_run(cra, work, era):
    run = f"stdio {era}"
    data = work / f"stdio-{era}"
    params = StdioServerParameters(
        command=cra,
        args=["mcp", "serve", "--agent", "bot", "--atlas", str(ATLAS), "--data", str(data)],
    )
    if era == "2025-11-25":
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                init = await session.initialize()
                check(run, "the handshake negotiates 2025-11-25", init.protocol_version == era, init.protocol_version)
                session_id = SESSION_IN_INSTRUCTIONS.search(init.instructions or "").group(1)
                texts = await exercise(run, session)
    else:
        async with Client(params, mode="auto") as client:
            check(run, "discovery negotiates 2026-07-28", client.protocol_version == era, client.protocol_version)
            session_id = SESSION_IN_INSTRUCTIONS.search(client.instructions or "").group(1)
            texts = await exercise(run, client)
    # The client has closed the server's input: the server ended the session and exited.
    chain = work / f"{run.replace(' ', '-')}.trace.jsonl"
    export(cra, ["--data", str(data), "--session", session_id], chain)
    chain_checks(run, chain, texts)


def stdio_pipes(cra, work):
    """`cra mcp serve` on pipes this process also holds (a child's standard streams share the
    open file with the parent's end, and with it the non-blocking flag): what the server lends
    itself while serving, it gives back when it is done."""
    run = "stdio pipes"
    for shared in (False, True):
        label = "stdout is stderr" if shared else "own stderr"
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        data = work / f"pipes-{'shared' if shared else 'own'}"
        server = subprocess.Popen(
            [cra, "mcp", "serve", "--agent", "bot", "--atlas", str(ATLAS), "--data", str(data)],
            stdin=in_r, stdout=out_w, stderr=out_w if shared else subprocess.DEVNULL)
        initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "pipes", "version": "1"}}}
        os.write(in_w, (json.dumps(initialize) + "\n").encode())
        check(run, f"{label}: the server answers over the pipes", answer_on(out_r, 1))
        check(run, f"{label}: standard input is non-blocking while it serves", not os.get_blocking(in_r))
        check(run, f"{label}: standard output is " + ("left blocking" if shared else "non-blocking"),
              os.get_blocking(out_w) == shared)
        os.close(in_w)
        server.wait()
        os.close(out_r)
        check(run, f"{label}: both are blocking again once it has gone",
              os.get_blocking(in_r) and os.get_blocking(out_w))
        os.close(in_r)
        os.close(out_w)


def answer_on(fd, request_id, deadline=10.0):
    """Whether a JSON-RPC answer to `request_id` arrives on `fd` within `deadline` seconds (a
    bound for a broken server, not a pace); lines that are not JSON (notices) are skipped."""
    buffered = b""
    until = time.monotonic() + deadline
    while (left := until - time.monotonic()) > 0:
        if not select.select([fd], [], [], left)[0]:
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        buffered += chunk
        *lines, buffered = buffered.split(b"\n")
        for line in lines:
            if line.startswith(b"{") and json.loads(line).get("id") == request_id:
                return True
    return False


async def http_run(cra, work, url, era):
    run = f"http {era}"
    headers = {"Authorization": f"Bearer {AGENT_KEY}"}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        unauthenticated = await http.post(url, headers={"Authorization": ""}, json={})
        check(run, "no credentials: 401 naming Bearer", unauthenticated.status_code == 401
              and unauthenticated.headers.get("www-authenticate", "").startswith("Bearer"), unauthenticated.headers)
        if era == "2025-11-25":
            async with Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
                check(run, "the handshake negotiates 2025-11-25", client.protocol_version == era, client.protocol_version)
                session_id = SESSION_IN_INSTRUCTIONS.search(client.instructions or "").group(1)
                texts = await exercise(run, client)
            # Leaving sent DELETE /mcp, which ended the CARP session before it answered.
        else:
            async with Client(streamable_http_client(url, http_client=http), mode=era) as client:
                listed = await client.list_tools()
                check(run, "without a session only the session tools are listed",
                      sorted(t.name for t in listed.tools) == ["cra/session.end", "cra/session.open"], listed.tools)
                opened = await client.call_tool("cra/session.open", {"goal": "python peer"})
                session_id = json.loads(text_of(opened))["session_id"]
                meta = {"cra/session_id": session_id}
                texts = await exercise(run, client, meta)
                ended = await client.call_tool("cra/session.end", {}, meta=meta)
                check(run, "cra/session.end ends the session", not ended.is_error, text_of(ended))
    chain = work / f"{run.replace(' ', '-')}.trace.jsonl"
    export(cra, ["--url", url.removesuffix("/mcp"), "--token", AGENT_KEY, "--session", session_id], chain)
    chain_checks(run, chain, texts)


def import_atlas(cra, work, files, writes):
    """`cra atlas import-mcp` of the filesystem server over `files`; returns the atlas directory."""
    out = work / f"fs-atlas-{writes}"
    imported = subprocess.run(
        [cra, "atlas", "import-mcp", "--upstream-cmd", f"node {FS_SERVER} {files}", "--name", "fs",
         "--out", str(out), "--writes", writes, "-o", "json"],
        capture_output=True, text=True,
    )
    summary = json.loads(imported.stdout or "{}")
    tools = {a["tool"]: a["action_id"] for a in summary.get("actions", [])}
    check(f"import-mcp {writes}", "one action per upstream tool, named by the written rule",
          tools.get("read_text_file") == "fs.read.text.file" and tools.get("write_file") == "fs.write.file",
          imported.stdout + imported.stderr)
    return out


async def proxy_run(cra, work):
    run = "proxy filesystem"
    files = work / "proxied-files"
    files.mkdir()
    (files / "notes.txt").write_text("the original\n")
    atlas = import_atlas(cra, work, files, "deny")
    data = work / "proxy-data"
    params = StdioServerParameters(
        command=cra,
        args=["mcp", "proxy", "--atlas", str(atlas), "--agent", "bot", "--data", str(data),
              "--upstream-cmd", f"node {FS_SERVER} {files}"],
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            session_id = SESSION_IN_INSTRUCTIONS.search(init.instructions or "").group(1)
            names = {t.name for t in (await session.list_tools()).tools}
            check(run, "tools keep their upstream names; writes are not listed",
                  "read_text_file" in names and "write_file" not in names, sorted(names))
            read = await session.call_tool("read_text_file", {"path": str(files / "notes.txt")})
            check(run, "an allowed read returns the file", not read.is_error and text_of(read) == "the original\n", text_of(read))
            written = await session.call_tool("write_file", {"path": str(files / "notes.txt"), "content": "overwritten"})
            check(run, "a denied write is refused naming its policy", written.is_error and "deny-writes" in text_of(written), text_of(written))
    check(run, "the refused write changed nothing", (files / "notes.txt").read_text() == "the original\n")
    chain = work / "proxy-filesystem.trace.jsonl"
    export(cra, ["--data", str(data), "--session", session_id], chain)
    verified = subprocess.run([sys.executable, str(ROOT / "tools/appendix_b.py"), "verify", str(chain)], capture_output=True)
    check(run, "the chain verifies with tools/appendix_b.py", verified.returncode == 0, verified.stdout)
    kinds = [json.loads(line)["event_type"] for line in chain.read_text().splitlines()]
    check(run, "both calls are in the chain", kinds.count("action.requested") == 2
          and "action.executed" in kinds and "action.denied" in kinds, kinds)


async def executor_run(cra, work):
    run = "executor filesystem"
    files = work / "served-files"
    files.mkdir()
    (files / "notes.txt").write_text("the original\n")
    atlas = import_atlas(cra, work, files, "approve")
    config = work / "fs-serve.toml"
    config.write_text(f"""
[executors.fs]
kind = "mcp"
command = ["node", {json.dumps(str(FS_SERVER))}, {json.dumps(str(files))}]
timeout_ms = {CALL_TIMEOUT_MS}
""")
    server, base = start_server(cra, work, "fs-served", atlas, config)
    # The client's entry of the README: `cra mcp proxy --url --token`, tools under their
    # upstream names, the server running the upstream and deciding.
    relay = StdioServerParameters(command=cra, args=["mcp", "proxy", "--url", base, "--token", AGENT_KEY])
    try:
        async with httpx2.AsyncClient(timeout=30) as http:
            async with Client(relay, mode="legacy") as client:
                session_id = SESSION_IN_INSTRUCTIONS.search(client.instructions or "").group(1)
                names = {t.name for t in (await client.list_tools()).tools}
                check(run, "the proxy shows the upstream's tool names", {"read_text_file", "write_file"} <= names, sorted(names))
                target = str(files / "notes.txt")
                read = await client.call_tool("read_text_file", {"path": target})
                check(run, "an allowed read returns the file", not read.is_error and text_of(read) == "the original\n", text_of(read))
                arguments = {"path": target, "content": "approved content"}
                pending = await client.call_tool("write_file", arguments)
                approval = APPROVAL_IN_TEXT.search(text_of(pending))
                check(run, "a write waits for an operator", pending.is_error and approval is not None, text_of(pending))
                check(run, "nothing is written before the grant", (files / "notes.txt").read_text() == "the original\n")
                granted = await http.post(f"{base}/v1/approvals/{approval.group(1)}",
                                          headers={"Authorization": f"Bearer {OPERATOR_KEY}"},
                                          json={"decision": "grant", "note": "checked by the peer suite"})
                check(run, "the operator grants it over the HTTP API", granted.status_code == 200, granted.text)
                retried = await client.call_tool("write_file", arguments)
                check(run, "the retried call writes the file", not retried.is_error
                      and (files / "notes.txt").read_text() == "approved content", text_of(retried))
                await crash_during_a_call(run, client, server, files)
                await timeout_of_a_call(run, client, files)
        chain = work / "executor-filesystem.trace.jsonl"
        export(cra, ["--url", base, "--token", AGENT_KEY, "--session", session_id], chain)
    finally:
        upstreams = children_of(server)
        server.terminate()
        server.wait()
    # A stopping server stops what it started: an upstream left running would hold its files.
    # Two at the end: the idle upstream, and the one a timed-out call left (still shutting down).
    check(run, "no upstream outlives the server", len(upstreams) >= 1
          and not any(Path(f"/proc/{pid}").exists() for pid in upstreams), upstreams)
    verified = subprocess.run([sys.executable, str(ROOT / "tools/appendix_b.py"), "verify", str(chain)], capture_output=True)
    check(run, "the chain verifies with tools/appendix_b.py", verified.returncode == 0, verified.stdout)
    events = [json.loads(line) for line in chain.read_text().splitlines()]
    kinds = [e["event_type"] for e in events]
    writes = [e for e in events if e["event_type"] == "action.executed" and e["payload"].get("action_id") == "fs.write.file"]
    failed = [e["payload"].get("error_code") for e in events if e["event_type"] == "action.failed"]
    check(run, "every call is in the chain and the write ran once",
          kinds.count("action.requested") == 7 and "approval.granted" in kinds and len(writes) == 1, kinds)
    check(run, "the crash and the timeout are recorded as action.failed",
          failed == ["executor_crashed", "executor_timeout"], failed)


def children_of(process):
    """The process's children, whichever of its threads started them (the server's: the
    upstream's node)."""
    return [pid for task in Path(f"/proc/{process.pid}/task").iterdir()
            for pid in (task / "children").read_text().split()]


async def crash_during_a_call(run, client, server, files):
    """Kills the upstream while it serves a call: the call is `executor_crashed`, and the next
    call runs on a restarted upstream. The upstream is caught mid-call deterministically: it
    reads a FIFO, and opening the FIFO's other end returns once it has."""
    fifo = files / "blocking.fifo"
    os.mkfifo(fifo)
    call = asyncio.create_task(client.call_tool("read_text_file", {"path": str(fifo)}))
    writer = await asyncio.to_thread(os.open, fifo, os.O_WRONLY)
    children = children_of(server)
    check(run, "the upstream runs as the server's child", len(children) == 1, children)
    for pid in children:
        os.kill(int(pid), 9)
    crashed = await call
    os.close(writer)
    check(run, "an upstream killed during a call is executor_crashed",
          crashed.is_error and "executor_crashed" in text_of(crashed), text_of(crashed))
    again = await client.call_tool("read_text_file", {"path": str(files / "notes.txt")})
    check(run, "the next call runs on a restarted upstream", not again.is_error
          and text_of(again) == "approved content", text_of(again))


async def timeout_of_a_call(run, client, files):
    """A call the upstream never finishes (it waits on a FIFO nobody opens) is
    `executor_timeout` once the executor's `timeout_ms` has passed, and the next call runs."""
    fifo = files / "never.fifo"
    os.mkfifo(fifo)
    stuck = await client.call_tool("read_text_file", {"path": str(fifo)})
    check(run, f"a call past timeout_ms ({CALL_TIMEOUT_MS} ms) is executor_timeout",
          stuck.is_error and "executor_timeout" in text_of(stuck), text_of(stuck))
    again = await client.call_tool("read_text_file", {"path": str(files / "notes.txt")})
    check(run, "the next call after a timeout runs", not again.is_error, text_of(again))


def start_server(cra, work, name="served", atlas=ATLAS, config=None):
    """`cra serve` on a free loopback port; returns the process and its base URL."""
    (work / "keys.toml").write_text(KEYS)
    command = [cra, "serve", "--addr", "127.0.0.1:0", "--data", str(work / name), "--atlas", str(atlas),
               "--api-keys", str(work / "keys.toml")]
    if config:
        command += ["--config", str(config)]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    for line in server.stdout:
        m = re.search(r"listening on (http://\S+)", line)
        if m:
            # Keep draining its log, so that a full pipe never stops the server.
            threading.Thread(target=lambda: [None for _ in server.stdout], daemon=True).start()
            return server, m.group(1)
    raise SystemExit(f"cra serve did not start (exit {server.wait()})")


async def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cra", required=True, help="the cra binary")
    parser.add_argument("--keep", help="work in this directory and keep it")
    args = parser.parse_args()
    cra = os.path.abspath(args.cra)
    work = Path(args.keep or tempfile.mkdtemp(prefix="cra-mcp-peers-"))
    work.mkdir(parents=True, exist_ok=True)
    for era in ("2025-11-25", "2026-07-28"):
        await stdio_run(cra, work, era)
    stdio_pipes(cra, work)
    server, base = start_server(cra, work)
    try:
        for era in ("2025-11-25", "2026-07-28"):
            await http_run(cra, work, f"{base}/mcp", era)
    finally:
        server.terminate()
        server.wait()
    await proxy_run(cra, work)
    await executor_run(cra, work)
    print(f"mcp peers (python mcp SDK): {passed} passed; {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
