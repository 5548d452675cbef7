/**
 * `cra serve` on loopback over a fresh data directory, for the live tests. `CRA_BIN` names the
 * binary (CI passes the one it built); without it the live tests are skipped. The atlas comes
 * from `cra atlas init` with a policy that makes its one action wait for a human; an agent key
 * acts and an operator key decides.
 */
import { after, before } from "node:test";
import { spawn, spawnSync, type ChildProcessWithoutNullStreams } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

import { Client } from "@cra/client";

/** The repository's root (tests run from `build/test`). */
export const REPO_ROOT = fileURLToPath(new URL("../../../../", import.meta.url));

/** Why the live tests cannot run here, if they cannot. */
export const SKIP_LIVE = process.env["CRA_BIN"] ? false : "set CRA_BIN to the cra binary to run the live tests";

export class LiveServer {
  readonly root = mkdtempSync(join(tmpdir(), "cra-ts-client-"));
  readonly agentToken = `cra_test_agent_${"a".repeat(40)}`;
  readonly operatorToken = `cra_test_operator_${"b".repeat(40)}`;
  url = "";
  private process: ChildProcessWithoutNullStreams | undefined;
  private stderr = "";
  private readonly args: string[];

  constructor(readonly cra = process.env["CRA_BIN"] ?? "cra") {
    const atlas = join(this.root, "atlas");
    const init = spawnSync(cra, ["atlas", "init", atlas, "--id", "com.example.tsclient"], { encoding: "utf8" });
    if (init.status !== 0) throw new Error(`cra atlas init failed: ${init.stderr}`);
    const gate = [{
      policy_id: "approve-echo",
      type: "require_approval",
      description: "A human confirms every echo.",
      actions: ["example.echo"],
    }];
    writeFileSync(join(atlas, "policies", "approve.json"), JSON.stringify(gate));
    const keys = join(this.root, "api-keys.toml");
    writeFileSync(
      keys,
      `[[keys]]\ntoken = "${this.agentToken}"\nactor_id = "agent-7"\nactor_type = "agent"\nroles = ["agent"]\n` +
        `[[keys]]\ntoken = "${this.operatorToken}"\nactor_id = "ops"\nactor_type = "human"\nroles = ["operator"]\n`,
    );
    this.args = ["serve", "--data", join(this.root, "data"), "--atlas", atlas, "--api-keys", keys];
  }

  /** Starts the server on `addr`; resolves with its URL once it listens. */
  async start(addr = "127.0.0.1:0"): Promise<string> {
    const child = spawn(this.cra, [...this.args, "--addr", addr]);
    this.process = child;
    child.stderr.on("data", (chunk: Buffer) => (this.stderr += chunk.toString()));
    const prefix = "cra serve: listening on ";
    for await (const line of createInterface({ input: child.stdout })) {
      if (line.startsWith(prefix)) {
        this.url = line.slice(prefix.length).trim();
        child.stdout.resume();
        return this.url;
      }
    }
    throw new Error(`cra serve stopped: ${this.stderr}`);
  }

  /** Stops the server and starts it again on the same port and data. */
  async restart(): Promise<void> {
    const url = this.url;
    await this.stop();
    await this.start(url.split("://")[1]);
    if (this.url !== url) throw new Error(`restarted on ${this.url}, not ${url}`);
  }

  async stop(): Promise<void> {
    const child = this.process;
    if (child === undefined || child.exitCode !== null) return;
    const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
    child.kill("SIGTERM");
    await exited;
  }

  async dispose(): Promise<void> {
    await this.stop();
    rmSync(this.root, { recursive: true, force: true });
  }
}

/** A fresh server for a group of tests, with an agent's client and an operator's. */
export function withServer(): { server: LiveServer; cra: () => Client; operator: () => Client } {
  const server = SKIP_LIVE ? undefined : new LiveServer();
  before(async () => {
    await server?.start();
  });
  after(async () => {
    await server?.dispose();
  });
  const live = (): LiveServer => server as LiveServer;
  return {
    get server() {
      return live();
    },
    cra: () => new Client(live().url, live().agentToken, { agentId: "agent-7" }),
    operator: () => new Client(live().url, live().operatorToken),
  };
}

