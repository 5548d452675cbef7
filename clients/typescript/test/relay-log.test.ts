/**
 * Relay and the transparency log through the client against a live server: a project, a deposit
 * pulled back, the orientation bundle, a fact superseded, read as of a past time and invalidated;
 * every event of a session a leaf of a signed checkpoint that a later one extends, and a flipped
 * proof byte, a rewritten root, a changed size line and another key each refused.
 */
import assert from "node:assert/strict";
import { createHash, generateKeyPairSync } from "node:crypto";
import { describe, test } from "node:test";

import { LogError, openCheckpoint, verifyInclusion, VerifierKey, type InclusionProof } from "@cra/client";
import { SKIP_LIVE, withServer } from "./server.js";

describe("Relay", { skip: SKIP_LIVE }, () => {
  const live = withServer();

  test("deposit, pull, orient, and facts as of a time", async () => {
    const cra = live.cra();
    await cra.createProject("proj_tsclient", "TypeScript client");
    const deposited = await cra.deposit("proj_tsclient", "Shipped the client", {
      fields: { handoff_note: "streams resume", open_questions: ["browsers?"] },
    });
    assert.match(deposited["content_hash"], /^sha256:/);
    const pulled = (await cra.pull("proj_tsclient"))["packages"];
    assert.deepEqual(pulled.map((p: { package_id: string }) => p.package_id), [deposited["package_id"]]);
    const relevant = await cra.pull("proj_tsclient", { mode: "relevant", query: "streams" });
    assert.equal(relevant["matches"][0]["package_id"], deposited["package_id"]);
    assert.ok((await cra.orient("proj_tsclient"))["open_questions"].includes("browsers?"));

    const first = await cra.assertFact("proj_tsclient", "client", "language", "python");
    await cra.assertFact("proj_tsclient", "client", "language", "python and typescript");
    const values = (facts: Array<{ value?: unknown }>): unknown[] => facts.map((f) => f.value);
    assert.deepEqual(values(await cra.facts("proj_tsclient", "client", "language")), ["python and typescript"]);
    const then = await cra.facts("proj_tsclient", "client", "language", { recordedAsOf: first["created_at"] });
    assert.deepEqual(values(then), ["python"]);
    assert.equal((await cra.facts("proj_tsclient", "client", "language", { history: true })).length, 2);
    assert.equal(await cra.invalidateFact("proj_tsclient", "client", "language"), 1);
    assert.deepEqual(await cra.facts("proj_tsclient", "client", "language"), []);
    await assert.rejects(cra.facts("proj_tsclient", "client", "language", { asOf: "yesterday" }), {
      token: "invalid_schema",
      pointer: "/as_of",
    });
  });
});

describe("the transparency log", { skip: SKIP_LIVE }, () => {
  const live = withServer();

  test("a session's events are in a signed checkpoint that later ones extend", async () => {
    const cra = live.cra();
    const operator = live.operator();
    const sid = (await cra.openSession("audited")).session_id;
    await cra.resolve(sid, "audited");
    const key = await operator.logKey();
    const first = await operator.checkpoint(key, { cut: true });
    const chain = await cra.trace(sid);
    const indexes = await Promise.all(chain.map((event) => cra.verifyInLog(event, first)));
    assert.equal(new Set(indexes).size, chain.length);
    await cra.resolve(sid, "again");
    const second = await operator.checkpoint(key, { cut: true });
    assert.ok(second.size > first.size);
    await cra.verifyExtends(first, second);

    const event = chain.at(-1)!;
    const query = { event_hash: event.event_hash, tree_size: String(second.size) };
    const proof: InclusionProof = await cra.request("GET", "/v1/log/proof/inclusion", { query });
    const hashes = proof.hashes.map((h) => Buffer.from(h, "hex"));
    const data = Buffer.from(event.event_hash, "hex");
    verifyInclusion(data, proof.leaf_index, second.size, hashes, second.root);
    const flipped = hashes.map((h, i) => (i === 0 ? Buffer.from(h.map((b, j) => (j === 0 ? b ^ 1 : b))) : h));
    assert.throws(() => verifyInclusion(data, proof.leaf_index, second.size, flipped, second.root), LogError);
    const rewritten = { ...second, root: Buffer.from(second.root.map((b, j) => (j === 0 ? b ^ 1 : b))) };
    await assert.rejects(cra.verifyExtends(first, rewritten), LogError);

    const note = await operator.requestText("GET", "/v1/log/checkpoint");
    const [origin, size, ...rest] = note.split("\n");
    assert.throws(() => openCheckpoint([origin, String(Number(size) + 1), ...rest].join("\n"), key), /does not verify/);
    assert.throws(() => openCheckpoint(note, anotherKey(key.name)), /no signature by/);
  });

  test("a verifier key with a wrong id is refused", async () => {
    const text = (await live.cra().requestText("GET", "/v1/log/key")).trim();
    const [name, keyId] = text.split("+");
    const wrong = text.replace(`+${keyId}+`, `+${keyId === "00000000" ? "11111111" : "00000000"}+`);
    assert.ok(name);
    assert.throws(() => VerifierKey.parse(wrong), /does not match/);
  });
});

/** A verifier key of the same name with a fresh Ed25519 key (a log's key swapped). */
function anotherKey(name: string): VerifierKey {
  const jwk = generateKeyPairSync("ed25519").publicKey.export({ format: "jwk" });
  const raw = Buffer.concat([Buffer.from([1]), Buffer.from(jwk.x as string, "base64url")]);
  const id = createHash("sha256").update(Buffer.concat([Buffer.from(`${name}\n`), raw])).digest().subarray(0, 4);
  return VerifierKey.parse(`${name}+${id.toString("hex")}+${raw.toString("base64")}`);
}
