"""cra's OpenTelemetry export against the reference decoder: an OTLP/HTTP receiver that decodes
each request with PyPI's `opentelemetry-proto` (pinned in requirements.txt, installed by
.ci/install), a `cra serve --otlp-endpoint` pointed at it, and one session driven through the
HTTP API with a W3C `traceparent` on its calls.

    python tools/peers/otlp_receiver.py --cra target/debug/cra

Checks, each a line `ok` or `FAIL`, then `N passed, N failed` (exit 1 on a failure): the body
is `application/x-protobuf` that decodes as `ExportTraceServiceRequest`; the resource names
cra; one span per operation (a resolve, three executes, an approval decision, a deposit, the
session); every span of the session in the trace whose id is the session's UUID; parents as
the chain says (executes and the decision under the resolve, the resolve under the session's
root); GenAI and tool-call attributes; the caller's traceparent recorded in the TRACE payload
and linked from the spans of its calls; the exported count in /metrics; and, against a
collector that refuses every export, three attempts of the batch, then the failure counted.
"""

import argparse
import json
import os
import re
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

# The MCP peers' server start, keys (agent `bot`, operator `oscar`) and test atlas.
from mcp_peers import AGENT_KEY as AGENT, OPERATOR_KEY as OPERATOR, start_server

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
# How long the export may take to arrive (a bound for a broken exporter, not a pace).
DEADLINE_S = 10.0

passed = 0
failed = 0


def check(what, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok    {what}")
    else:
        failed += 1
        print(f"FAIL  {what}" + (f"\n      {detail}" if detail else ""))


class Receiver(BaseHTTPRequestHandler):
    """Keeps every decoded export and the content type it came with."""

    exports = []
    lock = threading.Lock()

    def do_POST(self):  # noqa: N802 (the handler's name is http.server's)
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        try:
            decoded = ExportTraceServiceRequest.FromString(body)
            error = None
        except Exception as e:  # the check below reports it
            decoded, error = None, str(e)
        with Receiver.lock:
            Receiver.exports.append((self.path, self.headers.get("content-type"), decoded, error))
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


def spans():
    """Every span received so far, with its resource's attributes."""
    out = []
    with Receiver.lock:
        for _, _, req, _ in Receiver.exports:
            for rs in req.resource_spans if req else []:
                resource = {a.key: a.value.string_value for a in rs.resource.attributes}
                for ss in rs.scope_spans:
                    out.extend((resource, ss.scope.name, s) for s in ss.spans)
    return out


def attrs(span):
    out = {}
    for a in span.attributes:
        v = a.value
        out[a.key] = v.string_value if v.HasField("string_value") else (
            v.int_value if v.HasField("int_value") else v.bool_value)
    return out


def api(base, key, method, path, body=None, headers=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method)
    req.add_header("authorization", f"Bearer {key}")
    if data is not None:
        req.add_header("content-type", "application/json")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            text = resp.read().decode()
            return resp.status, json.loads(text) if text else None
    except urllib.error.HTTPError as e:
        text = e.read().decode()
        return e.code, json.loads(text) if text else None


def now():
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def envelope(session, operation):
    return {"carp_version": "1.0", "request_id": str(uuid.uuid4()), "timestamp": now(),
            "operation": operation, "requester": {"session_id": session, "agent_id": "bot"}}


def drive(base):
    """One session: a resolve and three executes with the traceparent, an approval granted, a
    deposit, the end. Answers the session id, the resolution id and the execution ids."""
    tp = {"traceparent": TRACEPARENT}
    status, opened = api(base, AGENT, "POST", "/v1/sessions", {"agent_id": "bot", "goal": "otlp"})
    check("a session opens", status == 201, opened)
    sid = opened["session_id"]
    status, res = api(base, AGENT, "POST", "/v1/resolve", {**envelope(sid, "resolve"), "task": {"goal": "ops"}}, tp)
    check("a resolve with a traceparent answers", status == 200, res)
    rid = res["resolution_id"]

    def execute(action, params):
        body = {**envelope(sid, "execute"),
                "execution": {"resolution_id": rid, "action_id": action, "parameters": params}}
        return api(base, AGENT, "POST", "/v1/execute", body, tp)

    status, read = execute("doc.read", {"page": "intro"})
    check("doc.read runs", status == 200, read)
    status, waiting = execute("deploy.run", {"version": "1.2.3"})
    check("deploy.run waits for its approval", status == 409, waiting)
    _, pending = api(base, OPERATOR, "GET", "/v1/approvals")
    approval = next(a["approval_id"] for a in pending if a["session_id"] == sid)
    status, _ = api(base, OPERATOR, "POST", f"/v1/approvals/{approval}", {"decision": "grant", "note": "ok"})
    check("the operator grants it", status == 200)
    status, ran = execute("deploy.run", {"version": "1.2.3"})
    check("deploy.run runs once granted", status == 200, ran)
    status, _ = api(base, OPERATOR, "POST", "/v1/projects", {"project_id": "otlp", "name": "OTLP"})
    package = {"package_id": "pkg_" + uuid.uuid4().hex, "project_id": "otlp", "relay_version": "0.1",
               "title": "handoff", "status": "complete", "package_type": "standard", "review_type": "none",
               "created_at": now(), "created_by": {"id": "oscar", "type": "human", "session_id": None}}
    status, deposited = api(base, OPERATOR, "POST", "/v1/projects/otlp/packages", package)
    check("a package is deposited", status == 201, deposited)
    status, _ = api(base, AGENT, "DELETE", f"/v1/sessions/{sid}")
    check("the session ends", status == 204)
    return sid, rid, [read["execution_id"], waiting["execution_id"], ran["execution_id"]], approval, package["package_id"]


class Refuser(BaseHTTPRequestHandler):
    """A collector that is there but refuses every export (503), counting the attempts."""

    attempts = 0

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("content-length", "0")))
        Refuser.attempts += 1
        self.send_response(503)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def metric(base, name):
    """The value of an unlabelled counter in `base`'s /metrics (0 when absent)."""
    req = urllib.request.Request(base + "/metrics", headers={"authorization": f"Bearer {OPERATOR}"})
    text = urllib.request.urlopen(req, timeout=30).read().decode()
    found = re.search(rf"^{name} (\d+)", text, re.M)
    return int(found.group(1)) if found else 0


def refused_exports(cra, work):
    """A collector refusing every export: the batch is tried three times (the first, then after
    1 s and 2 s), then given up and counted, and the server answers all along."""
    refuser = ThreadingHTTPServer(("127.0.0.1", 0), Refuser)
    threading.Thread(target=refuser.serve_forever, daemon=True).start()
    config = work / "refused.toml"
    config.write_text(f'[otlp]\nendpoint = "http://127.0.0.1:{refuser.server_port}"\n')
    server, base = start_server(cra, work, name="refused", config=config)
    try:
        status, opened = api(base, AGENT, "POST", "/v1/sessions", {"agent_id": "bot", "goal": "refused"})
        ended, _ = api(base, AGENT, "DELETE", f"/v1/sessions/{opened['session_id']}")
        check("with a refusing collector the server answers", status == 201 and ended == 204)
        until = time.monotonic() + DEADLINE_S
        while time.monotonic() < until and metric(base, "cra_otlp_spans_failed_total") < 1:
            time.sleep(0.1)  # polling for a condition, bounded by the deadline
        check("a refused batch is tried three times, then given up and counted",
              Refuser.attempts == 3 and metric(base, "cra_otlp_spans_failed_total") == 1
              and metric(base, "cra_otlp_spans_exported_total") == 0,
              f"attempts {Refuser.attempts}")
    finally:
        server.terminate()
        server.wait()
        refuser.shutdown()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cra", required=True, help="the cra binary")
    args = parser.parse_args()
    receiver = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    work = Path(tempfile.mkdtemp(prefix="cra-otlp-"))
    config = work / "otlp.toml"
    config.write_text(f'[otlp]\nendpoint = "http://127.0.0.1:{receiver.server_port}"\n')
    server, base = start_server(os.path.abspath(args.cra), work, config=config)
    try:
        sid, rid, executions, approval, package_id = drive(base)
        trace_id = uuid.UUID(sid).bytes
        until = time.monotonic() + DEADLINE_S
        while time.monotonic() < until and not any(
                s.name.startswith("invoke_agent") and s.trace_id == trace_id for _, _, s in spans()):
            time.sleep(0.05)  # polling the receiver for a condition, bounded by the deadline
        with Receiver.lock:
            exports = list(Receiver.exports)
        check("exports arrive at /v1/traces as application/x-protobuf",
              exports and all(p == "/v1/traces" and t == "application/x-protobuf" for p, t, _, _ in exports),
              [(p, t) for p, t, _, _ in exports])
        check("every export decodes as ExportTraceServiceRequest", all(e[3] is None for e in exports),
              [e[3] for e in exports if e[3]])
        received = spans()
        check("the resource is cra and the scope is cra",
              all(r.get("service.name") == "cra" and scope == "cra" for r, scope, _ in received))
        mine = [s for _, _, s in received if s.trace_id == trace_id]
        by_name = {}
        for s in mine:
            by_name.setdefault(s.name.split(" ")[0], []).append(s)
        counts = {k: len(v) for k, v in by_name.items()}
        check("one span per operation of the session: a resolve, three executes, an approval, the session",
              counts == {"resolve": 1, "execute_tool": 3, "approval": 1, "invoke_agent": 1}, counts)
        root = by_name.get("invoke_agent", [None])[0]
        resolve = by_name.get("resolve", [None])[0]
        if not (root and resolve):
            return
        check("the session's root has no parent and names the agent",
              root.parent_span_id == b"" and attrs(root).get("gen_ai.agent.id") == "bot"
              and attrs(root).get("gen_ai.operation.name") == "invoke_agent", attrs(root))
        check("the resolve is under the root", resolve.parent_span_id == root.span_id)
        ra = attrs(resolve)
        check("the resolve says its decision and resolution",
              ra.get("cra.resolution_id") == rid and ra.get("cra.decision") == "requires_approval"
              and ra.get("gen_ai.conversation.id") == sid, ra)
        tp_trace, tp_span = bytes.fromhex(TRACEPARENT[3:35]), bytes.fromhex(TRACEPARENT[36:52])
        check("the resolve links the caller's traceparent",
              [(l.trace_id, l.span_id) for l in resolve.links] == [(tp_trace, tp_span)])
        executes = {attrs(s)["gen_ai.tool.call.id"]: s for s in by_name["execute_tool"]}
        check("an execute span per execution id", sorted(executes) == sorted(executions), sorted(executes))
        check("each execute is under the resolve and links the traceparent",
              all(s.parent_span_id == resolve.span_id and len(s.links) == 1 for s in executes.values()))
        first = attrs(executes[executions[0]])
        check("an execute carries the tool-call conventions",
              first.get("gen_ai.operation.name") == "execute_tool" and first.get("gen_ai.tool.name") == "doc.read"
              and executes[executions[0]].name == "execute_tool doc.read" and first.get("cra.decision") == "allow",
              first)
        check("the execute that waited says so",
              attrs(executes[executions[1]]).get("cra.decision") == "require_approval"
              and attrs(executes[executions[1]]).get("cra.approval_id") == approval)
        check("a span's times are ordered", all(s.start_time_unix_nano <= s.end_time_unix_nano for s in mine))
        decision = by_name["approval"][0]
        da = attrs(decision)
        check("the approval decision is under the resolve, granted by oscar",
              decision.parent_span_id == resolve.span_id and da.get("cra.approval.decision") == "granted"
              and da.get("cra.approval.decided_by") == "oscar" and da.get("cra.approval_id") == approval, da)
        deposits = [s for _, _, s in received if s.name == "deposit"]
        check("the deposit is a span naming its package",
              len(deposits) == 1 and attrs(deposits[0]).get("cra.package_id") == package_id,
              [attrs(d) for d in deposits])
        _, events = api(base, OPERATOR, "GET", f"/v1/traces/{sid}")
        recorded = [e["payload"].get("traceparent") for e in events
                    if e["event_type"] in ("carp.request.received", "action.requested")]
        check("the traceparent is recorded in the TRACE payloads of its calls",
              recorded == [TRACEPARENT] * 4, recorded)
        exported = metric(base, "cra_otlp_spans_exported_total")
        check("/metrics counts the exported spans", exported >= 7, exported)
        refused_exports(os.path.abspath(args.cra), work)
    finally:
        server.terminate()
        server.wait()
        receiver.shutdown()
        print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
