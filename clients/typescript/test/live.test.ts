/**
 * The README's walk-through through the client against a live `cra serve` each test starts
 * (`CRA_BIN`): session, resolve, execute (pending), grant, execute (success), and an exported
 * chain that verifies offline; refusals as `CraError` with tokens and pointers; numbers
 * JavaScript would change hash as written; a stream that resumes across a server restart.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { Client, CraError, readChain, verifyChain, type TraceEvent } from "@cra/client";
import { SKIP_LIVE, withServer } from "./server.js";

describe("the walk-through", { skip: SKIP_LIVE }, () => {
  const { cra, operator } = withServer();

  test("session, resolve, approval, execute, and a chain that verifies offline", async () => {
    const agent = cra();
    assert.equal((await agent.health()).status, "ok");
    const sid = (await agent.openSession("say hello")).session_id;
    const resolution = await agent.resolve(sid, "say hello");
    assert.equal(resolution["decision"]["type"], "requires_approval");
    const approvalId: string = resolution["decision"]["approval_id"];

    const call = { message: "hello" };
    const pending = await agent.execute(sid, resolution["resolution_id"], "example.echo", call);
    assert.equal(pending["status"], "pending_approval", JSON.stringify(pending));
    assert.equal(pending["error"]["code"], "approval_pending");
    const listed = (await operator().approvals()).map((a) => a["approval_id"]);
    assert.ok(listed.includes(approvalId));

    await operator().decide(approvalId, "grant", "fine");
    const decided = await agent.waitForDecision(approvalId, 10);
    assert.equal(decided["status"], "granted");
    const done = await agent.execute(sid, resolution["resolution_id"], "example.echo", call);
    assert.equal(done["status"], "success", JSON.stringify(done));

    await agent.endSession(sid);
    const chain = await agent.trace(sid);
    assert.ok(chain.length > 5);
    assert.equal(verifyChain(chain), undefined);
    assert.equal(chain.at(-1)?.event_type, "session.ended");

    const changed = structuredClone(chain);
    (changed[2] as TraceEvent).payload["x"] = 1;
    assert.deepEqual(pick(verifyChain(changed)), [2, "hash_mismatch"]);
    assert.deepEqual(pick(verifyChain(chain.slice(1))), [0, "sequence_gap"]);
    const edited = await agent.trace(sid);
    (edited[3] as TraceEvent).payload["x"] = 1;
    assert.deepEqual(pick(verifyChain(edited)), [3, "hash_mismatch"], "an edit after reading is seen");
  });

  test("numbers JavaScript would change (1.0, integers past 2^53) hash as the server wrote them", async () => {
    const agent = cra();
    const sid = (await agent.openSession("exact numbers")).session_id;
    const body = JSON.stringify(agent.envelope(sid, "resolve")).replace(
      /}$/,
      ',"task":{"goal":"exact","intended_parameters":{"example.echo":{"ratio":1.0,"big":123456789012345678901,"tiny":1e-7}}}}',
    );
    const answer = await fetch(`${agent.url}/v1/resolve`, {
      method: "POST",
      headers: { authorization: `Bearer ${agent.token}`, "content-type": "application/json" },
      body,
    });
    assert.equal(answer.status, 200, await answer.text());
    const text = await agent.requestText("GET", `/v1/traces/${sid}`);
    assert.ok(text.includes("1.0") && text.includes("123456789012345678901"), "the server kept the numbers");
    assert.equal(verifyChain(readChain(text)), undefined);
    const plain = JSON.parse(text) as TraceEvent[];
    assert.notEqual(verifyChain(plain), undefined, "JSON.parse alone loses them (the test can fail)");
  });

  test("refusals are CraErrors with status, token and pointers", async () => {
    const agent = cra();
    await assert.rejects(agent.request("POST", "/v1/sessions", { body: { agent_id: "agent-7" } }), (e: CraError) => {
      assert.deepEqual([e.status, e.token], [400, "invalid_request"]);
      assert.ok(e.pointers.includes("/goal"), e.pointers.join());
      return true;
    });
    const stranger = new Client(agent.url, "not-a-key", { agentId: "agent-7" });
    await assert.rejects(stranger.openSession("anything"), { status: 401, token: "unauthenticated" });
    await assert.rejects(agent.session("0190a000-0000-7000-8000-00000000dead"), { status: 404 });
    await assert.rejects(agent.decide("0190a000-0000-7000-8000-00000000dead", "grant"), { status: 403, token: "forbidden" });
    const nowhere = new Client("http://127.0.0.1:9", "x", { timeoutMs: 2000 });
    await assert.rejects(nowhere.health(), { status: 0, token: "unavailable" });
  });
});

describe("live streams", { skip: SKIP_LIVE }, () => {
  const live = withServer();

  test("a stream resumes after the server restarts, with every event once and in order", async () => {
    const agent = live.cra();
    const sid = (await agent.openSession("watch me")).session_id;
    await agent.resolve(sid, "first");
    const stream = agent.stream(sid);
    const seen: TraceEvent[] = [];
    const take = async (count: number): Promise<void> => {
      while (seen.length < count) {
        const next = await stream.next();
        assert.ok(!next.done, "the stream ended early");
        seen.push(next.value);
      }
    };
    await take((await agent.trace(sid)).length);
    await live.server.restart();
    await agent.resolve(sid, "second");
    await agent.endSession(sid);
    const chain = await agent.trace(sid);
    await take(chain.length);
    assert.equal((await stream.next()).done, true, "the stream ends after session.ended");
    assert.deepEqual(seen.map((e) => e.sequence), chain.map((_, i) => i));
    assert.deepEqual(seen, chain);
    assert.equal(verifyChain(seen), undefined);
  });

  test("a stream the server refuses is a CraError", async () => {
    const stranger = new Client(live.server.url, "not-a-key");
    await assert.rejects(stranger.stream("0190a000-0000-7000-8000-00000000dead").next(), { status: 401 });
  });
});

function pick(finding: { index: number; code: string } | undefined): [number, string] | undefined {
  return finding && [finding.index, finding.code];
}

