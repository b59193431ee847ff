// An agent CLI nobody here wrote, unmodified, behind the gateway:
// pi-coding-agent (@mariozechner/pi-coding-agent, from npm) in print mode,
// its provider's base URL pointed at `compactor serve --gateway`, once
// through Anthropic's Messages API and once through OpenAI's Chat
// Completions. `compactor standin` scripts the model: twenty calls of pi's
// own read tool on a real file, then "done". The task runs past the
// window several times over: pi finishes it, every call the upstream took
// fits the window with its tool calls and results paired (the stand-in
// refuses an unpaired one as the providers do), and the session holds
// what pi sent, each message once.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, mkdirSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { connect } from "@nats-io/transport-node";
import { CompactorClient } from "../src/index.js";
import { startGatewayStack } from "./service.js";

const WINDOW = 12000;
const STEPS = 20;
// (the package exports no package.json: its CLI is found in node_modules)
const piCLI = join(dirname(fileURLToPath(import.meta.url)), "..", "node_modules", "@mariozechner", "pi-coding-agent", "dist", "cli.js");

let stack, nc, compactor, dir;

before(async () => {
  stack = await startGatewayStack({ window: WINDOW, steps: STEPS, toolArgs: { path: "notes.txt" } });
  nc = await connect({ servers: stack.svc.url });
  compactor = new CompactorClient(nc, { timeoutMs: 30_000 });
  dir = mkdtempSync(join(tmpdir(), "compactor-pi-"));
});

after(async () => {
  await nc?.close();
  await stack?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/**
 * Runs a command with no stdin (pi in print mode reads a piped stdin to
 * its end) and resolves with its stdout; rejects with its stderr when it
 * fails or runs past 4 minutes.
 */
function run(cmd, args, opts) {
  return new Promise((ok, fail) => {
    const child = spawn(cmd, args, { ...opts, stdio: ["ignore", "pipe", "pipe"] });
    let out = "", err = "";
    child.stdout.on("data", (b) => (out += b));
    child.stderr.on("data", (b) => (err += b));
    const timer = setTimeout(() => child.kill(), 240_000);
    child.once("exit", (code, signal) => {
      clearTimeout(timer);
      if (code === 0) ok(out);
      else fail(new Error(`${cmd} ${args.join(" ")}: exit ${code ?? signal}\n${err}\n${out}`));
    });
  });
}

/** The gateway's sessions (gw-...) in the store. */
async function gatewaySessions() {
  const answer = await nc.request("compactor.session.list", JSON.stringify({ prefix: "gw-" }), { timeout: 10_000 });
  return answer.json().sessions.map((s) => s.session_id);
}

for (const [api, model] of [["anthropic-messages", "claude-sonnet-4-5"], ["openai-completions", "gpt-4o"]]) {
  test(`pi-coding-agent through the gateway (${api})`, async () => {
    const home = join(dir, api);
    const work = join(home, "work");
    mkdirSync(work, { recursive: true });
    // pi's window is the model's real one: it never compacts on its own
    // (and its auto-compaction is off); the gateway's is WINDOW.
    const baseUrl = api === "anthropic-messages" ? stack.gateway : `${stack.gateway}/v1`;
    writeFileSync(join(home, "models.json"), JSON.stringify({ providers: { gw: { baseUrl, api, apiKey: "sk-standin",
      compat: { supportsDeveloperRole: false, supportsReasoningEffort: false },
      models: [{ id: model, contextWindow: 200000, maxTokens: 2048 }] } } }));
    writeFileSync(join(home, "settings.json"), JSON.stringify({ compaction: { enabled: false } }));
    let notes = "";
    for (let i = 0; i < 60; i++) notes += `line ${i}: the setting value_${i} is ${i * 7} (${api})\n`;
    writeFileSync(join(work, "notes.txt"), notes);
    const before = (await stack.calls()).calls.length;
    const sessionsBefore = new Set(await gatewaySessions());

    const stdout = await run(process.execPath, [piCLI, "-p", "--no-session", "--provider", "gw", "--model", model,
      "--tools", "read", `Read notes.txt ${STEPS} times and report.`], { cwd: work, env: { ...process.env, PI_CODING_AGENT_DIR: home } });
    assert.match(stdout, new RegExp(`done after ${STEPS} steps`));

    const { calls, refusals } = await stack.calls();
    const mine = calls.slice(before);
    assert.equal(mine.length, STEPS + 1, "one upstream call a step, and the last");
    for (const c of mine) assert.ok(c.tokens <= WINDOW && !c.refused, `an upstream call of ${c.tokens} tokens, over the window ${WINDOW}`);
    assert.deepEqual(refusals, [], "no call refused (tool calls and results paired)");
    assert.ok(Math.max(...mine.map((c) => c.tokens)) < WINDOW && mine.some((c, i) => i > 0 && c.tokens < mine[i - 1].tokens), "compacted along the way");

    const sessions = (await gatewaySessions()).filter((s) => !sessionsBefore.has(s));
    assert.equal(sessions.length, 1, `one session for the conversation: ${sessions}`);
    let h;
    for (const deadline = Date.now() + 10_000; Date.now() < deadline; await new Promise((ok) => setTimeout(ok, 50))) {
      h = await compactor.history(sessions[0]);
      if (h.messages.filter((m) => m.role === "tool").length >= STEPS) break;
    }
    const results = h.messages.filter((m) => m.role === "tool");
    assert.equal(results.length, STEPS, "every tool result stored");
    assert.equal(new Set(results.map((m) => m.tool_call_id)).size, STEPS, "each once");
    for (const r of results) assert.match(JSON.stringify(r.content), /line 59: the setting value_59/);
    h.messages.forEach((m, i) => assert.equal(m.seq, i + 1));
    assert.ok(h.compactions.length >= 1, "compacted in the store");
  });
}
