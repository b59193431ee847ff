// Starts a real `compactor serve` (the binary `make build` writes to
// bin/compactor, built here when absent) on an embedded NATS server of its
// own, and a stand-in OpenAI-compatible model where a test needs one.

import { spawn, execFileSync } from "node:child_process";
import { createServer } from "node:http";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { createServer as netServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const repo = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");

/** The compactor binary: COMPACTOR_BIN, else bin/compactor (built when absent). */
export function compactorBinary() {
  if (process.env.COMPACTOR_BIN) return process.env.COMPACTOR_BIN;
  const bin = join(repo, "bin", "compactor");
  if (!existsSync(bin)) execFileSync("make", ["-C", repo, "build"], { stdio: "inherit" });
  return bin;
}

async function freePort() {
  return new Promise((ok, fail) => {
    const s = netServer();
    s.once("error", fail);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => ok(port));
    });
  });
}

/**
 * Runs `compactor serve` with args; resolves once it serves, with its NATS
 * URL, its log so far and stop().
 */
export async function startService(args = []) {
  const dir = mkdtempSync(join(tmpdir(), "compactor-ts-"));
  const port = await freePort();
  const child = spawn(compactorBinary(), ["serve", "--nats-port", String(port), "--data-dir", join(dir, "data"), "--metrics-addr", "", ...args], {
    stdio: ["ignore", "ignore", "pipe"],
  });
  let log = "";
  child.stderr.on("data", (b) => (log += b.toString()));
  await new Promise((ok, fail) => {
    const timer = setTimeout(() => fail(new Error(`compactor serve did not start in 60 s:\n${log}`)), 60_000);
    const check = () => {
      if (/msg=serving/.test(log)) {
        clearTimeout(timer);
        ok();
      }
    };
    child.stderr.on("data", check);
    child.once("exit", (code) => {
      clearTimeout(timer);
      fail(new Error(`compactor serve exited ${code}:\n${log}`));
    });
  });
  return {
    url: `nats://127.0.0.1:${port}`,
    log: () => log,
    async stop() {
      if (child.exitCode === null) {
        const exited = new Promise((ok) => child.once("exit", ok));
        child.kill("SIGTERM");
        await exited;
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * A stand-in for an OpenAI-compatible chat model: answer(body) returns the
 * assistant message ({content} or {tool_calls}) or {status, error} to fail
 * with the provider's own error body. Resolves with its base URL, the
 * requests it got and close().
 */
export async function standInModel(answer) {
  const requests = [];
  const server = createServer((req, res) => {
    let raw = "";
    req.on("data", (c) => (raw += c));
    req.on("end", () => {
      const body = JSON.parse(raw || "{}");
      requests.push(body);
      const out = answer(body);
      if (out.status) {
        res.writeHead(out.status, { "content-type": "application/json" });
        res.end(JSON.stringify({ error: { message: out.error, type: "invalid_request_error", param: null, code: null } }));
        return;
      }
      const message = { role: "assistant", content: out.content ?? null, refusal: null };
      if (out.tool_calls) message.tool_calls = out.tool_calls;
      const promptTokens = Math.ceil(raw.length / 4);
      const completionTokens = Math.ceil(JSON.stringify(message).length / 4);
      res.writeHead(200, { "content-type": "application/json" });
      res.end(
        JSON.stringify({
          id: `chatcmpl-${requests.length}`,
          object: "chat.completion",
          created: Math.floor(Date.now() / 1000),
          model: body.model,
          choices: [{ index: 0, message, logprobs: null, finish_reason: out.tool_calls ? "tool_calls" : "stop" }],
          usage: { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens },
        }),
      );
    });
  });
  await new Promise((ok) => server.listen(0, "127.0.0.1", ok));
  return {
    baseURL: `http://127.0.0.1:${server.address().port}/v1`,
    requests,
    close: () => new Promise((ok) => server.close(ok)),
  };
}

/**
 * Runs `compactor nats` (a bare NATS server with JetStream, no service);
 * resolves with its URL and stop().
 */
export async function startBareNATS() {
  const dir = mkdtempSync(join(tmpdir(), "compactor-ts-nats-"));
  const child = spawn(compactorBinary(), ["nats", "--port", "-1", "--data-dir", join(dir, "data"), "--sync", "1s"], { stdio: ["ignore", "pipe", "inherit"] });
  let out = "";
  const url = await new Promise((ok, fail) => {
    const timer = setTimeout(() => fail(new Error(`compactor nats did not start in 30 s:\n${out}`)), 30_000);
    child.stdout.on("data", (b) => {
      out += b.toString();
      const m = out.match(/ready (\S+)/);
      if (m) {
        clearTimeout(timer);
        ok(m[1]);
      }
    });
    child.once("exit", (code) => {
      clearTimeout(timer);
      fail(new Error(`compactor nats exited ${code}:\n${out}`));
    });
  });
  return {
    url,
    async stop() {
      if (child.exitCode === null) {
        const exited = new Promise((ok) => child.once("exit", ok));
        child.kill("SIGTERM");
        await exited;
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * Runs `compactor standin` (window tokens, calling its first tool `steps`
 * times with toolArgs, then answering "done after N steps") and
 * `compactor serve --gateway` in front of it with the same window.
 * Resolves with the service (startService's), the stand-in's and the
 * gateway's base URLs, the upstream's calls so far (calls()) and stop().
 */
export async function startGatewayStack({ window, steps, toolArgs = {} }) {
  const up = await freePort();
  const standin = spawn(compactorBinary(), ["standin", "--listen", `127.0.0.1:${up}`, "--window", String(window), "--steps", String(steps),
    "--tool-args", JSON.stringify(toolArgs)], { stdio: ["ignore", "ignore", "pipe"] });
  const upstream = `http://127.0.0.1:${up}`;
  const gw = await freePort();
  const gateway = `http://127.0.0.1:${gw}`;
  const svc = await startService(["--gateway", `127.0.0.1:${gw}`, "--openai-url", upstream, "--anthropic-url", upstream, "--window", String(window)]);
  for (let i = 0; ; i++) {
    try {
      if ((await fetch(`${gateway}/v1/models`)).ok) break;
    } catch (e) {
      if (i > 100) throw e;
    }
    await new Promise((ok) => setTimeout(ok, 100));
  }
  return {
    svc,
    upstream,
    gateway,
    /** The upstream's calls so far, and the calls it refused as malformed. */
    async calls() {
      return await (await fetch(`${upstream}/standin/calls`)).json();
    },
    async stop() {
      await svc.stop();
      standin.kill();
    },
  };
}
