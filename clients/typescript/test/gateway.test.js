// `compactor serve --gateway` driven by the providers' official SDKs from
// npm (openai: chat completions and responses; @anthropic-ai/sdk:
// messages with tool use), streamed and not, each pointed at the gateway by
// its base URL alone, with `compactor standin` as the upstream: agents of
// twenty tool steps past a 6,000-token window finish, every call the
// upstream took fits the window, and the session holds what each agent
// sent, once (an SDK's retry included).

import { test, before, after } from "node:test";
import assert from "node:assert/strict";

import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";
import { connect } from "@nats-io/transport-node";
import { CompactorClient } from "../src/index.js";
import { startGatewayStack } from "./service.js";

const WINDOW = 6000;
const STEPS = 20;
let stack, nc, compactor, upstream, gateway;

before(async () => {
  stack = await startGatewayStack({ window: WINDOW, steps: STEPS, toolArgs: { path: "notes.txt" } });
  ({ upstream, gateway } = stack);
  nc = await connect({ servers: stack.svc.url });
  compactor = new CompactorClient(nc, { timeoutMs: 30_000 });
});

after(async () => {
  await nc?.close();
  await stack?.stop();
});

/** A tool's output of about 600 tokens, its own for each step. */
function output(n) {
  let s = `notes, read ${n}:\n`;
  for (let i = 0; i < 60; i++) s += `line ${i} of read ${n}: setting_${n}_${i} = ${n * i}\n`;
  return s;
}

/** The upstream's calls so far. */
async function upstreamCalls() {
  return (await (await fetch(`${upstream}/standin/calls`)).json()).calls;
}

/**
 * The session's history once done(history) holds (a call's messages are
 * appended while it goes upstream: the last call's may still be on their
 * way when the agent has its answer), or after 10 s.
 */
async function historyOf(sid, done) {
  for (const deadline = Date.now() + 10_000; ; await new Promise((ok) => setTimeout(ok, 20))) {
    const h = await compactor.history(sid);
    if (done(h) || Date.now() > deadline) return h;
  }
}

/** Checks what the upstream took and what the session holds. */
async function checkRun(sid, before) {
  const calls = (await upstreamCalls()).slice(before);
  assert.ok(calls.length >= STEPS + 1, `${calls.length} upstream calls`);
  for (const c of calls) assert.ok(c.tokens <= WINDOW, `an upstream call of ${c.tokens} tokens, over the window ${WINDOW}`);
  assert.deepEqual((await (await fetch(`${upstream}/standin/calls`)).json()).refusals.filter((r) => /tool/.test(r)), [], "tool calls and results paired");
  const h = await historyOf(sid, (h) => h.messages.filter((m) => m.role === "tool").length >= STEPS);
  const results = h.messages.filter((m) => m.role === "tool");
  assert.equal(results.length, STEPS, "tool results stored");
  assert.deepEqual(results.map((m) => m.content), Array.from({ length: STEPS }, (_, i) => output(i + 1)));
  assert.equal(new Set(results.map((m) => m.tool_call_id)).size, STEPS, "each result once");
  h.messages.forEach((m, i) => assert.equal(m.seq, i + 1));
  assert.ok(h.compactions.length >= 1, "compacted");
}

const chatTool = { type: "function", function: { name: "read_file", description: "Read a file", parameters: { type: "object", properties: { path: { type: "string" } } } } };

for (const stream of [false, true]) {
  test(`openai chat.completions through the gateway (stream: ${stream})`, async () => {
    const openai = new OpenAI({ apiKey: "sk-test", baseURL: `${gateway}/v1`, maxRetries: 0 });
    const before = (await upstreamCalls()).length;
    const messages = [{ role: "system", content: "You read files." }, { role: "user", content: `Read notes.txt ${STEPS} times (chat, stream ${stream}).` }];
    let sid, reply, n = 0;
    for (let turn = 0; turn < 3 * STEPS; turn++) {
      let message;
      if (stream) {
        const s = openai.chat.completions.stream({ model: "gpt-4o", messages, tools: [chatTool] });
        message = (await s.finalChatCompletion()).choices[0].message;
      } else {
        const { data, response } = await openai.chat.completions.create({ model: "gpt-4o", messages, tools: [chatTool] }).withResponse();
        sid ??= response.headers.get("x-compactor-session");
        message = data.choices[0].message;
      }
      messages.push(message);
      if (!message.tool_calls?.length) {
        reply = message.content;
        break;
      }
      for (const call of message.tool_calls) messages.push({ role: "tool", tool_call_id: call.id, content: output(++n) });
    }
    assert.equal(reply, `done after ${STEPS} steps`);
    if (stream) {
      const { response } = await openai.chat.completions.create({ model: "gpt-4o", messages: messages.slice(0, 2) }).withResponse();
      sid = response.headers.get("x-compactor-session");
    }
    await checkRun(sid, before);
  });
}

test("openai responses through the gateway, streamed and not", async () => {
  const openai = new OpenAI({ apiKey: "sk-test", baseURL: `${gateway}/v1`, maxRetries: 0 });
  const before = (await upstreamCalls()).length;
  const input = [{ role: "developer", content: "You read files." }, { role: "user", content: `Read notes.txt ${STEPS} times (responses).` }];
  const tools = [{ type: "function", name: "read_file", parameters: chatTool.function.parameters, strict: false }];
  let sid, text, n = 0;
  for (let turn = 0; turn < 3 * STEPS; turn++) {
    let response;
    if (turn % 2 === 1) {
      const events = await openai.responses.create({ model: "gpt-4o", input, tools, store: false, stream: true });
      for await (const ev of events) if (ev.type === "response.completed") response = ev.response;
    } else {
      const r = await openai.responses.create({ model: "gpt-4o", input, tools, store: false }).withResponse();
      sid ??= r.response.headers.get("x-compactor-session");
      response = r.data;
    }
    input.push(...response.output);
    const calls = response.output.filter((o) => o.type === "function_call");
    if (!calls.length) {
      text = response.output_text;
      break;
    }
    for (const c of calls) input.push({ type: "function_call_output", call_id: c.call_id, output: output(++n) });
  }
  assert.equal(text, `done after ${STEPS} steps`);
  await checkRun(sid, before);
});

for (const stream of [false, true]) {
  test(`anthropic messages with tool use through the gateway (stream: ${stream})`, async () => {
    const anthropic = new Anthropic({ apiKey: "sk-ant-test", baseURL: gateway, maxRetries: 0 });
    const before = (await upstreamCalls()).length;
    const tools = [{ name: "read_file", description: "Read a file", input_schema: chatTool.function.parameters }];
    const messages = [{ role: "user", content: `Read notes.txt ${STEPS} times (anthropic, stream ${stream}).` }];
    const params = () => ({ model: "claude-sonnet-4-5", max_tokens: 1024, system: "You read files.", tools, messages });
    let sid, final, n = 0;
    for (let turn = 0; turn < 3 * STEPS; turn++) {
      let msg;
      if (stream) {
        msg = await anthropic.messages.stream(params()).finalMessage();
      } else {
        const r = await anthropic.messages.create(params()).withResponse();
        sid ??= r.response.headers.get("x-compactor-session");
        msg = r.data;
      }
      messages.push({ role: "assistant", content: msg.content });
      const uses = msg.content.filter((b) => b.type === "tool_use");
      if (msg.stop_reason !== "tool_use") {
        final = msg.content.find((b) => b.type === "text")?.text;
        break;
      }
      messages.push({ role: "user", content: uses.map((u) => ({ type: "tool_result", tool_use_id: u.id, content: output(++n) })) });
    }
    assert.equal(final, `done after ${STEPS} steps`);
    if (stream) {
      const r = await anthropic.messages.create({ ...params(), messages: messages.slice(0, 1) }).withResponse();
      sid = r.response.headers.get("x-compactor-session");
    }
    await checkRun(sid, before);
  });
}

test("an SDK's retry appends once", async () => {
  const openai = new OpenAI({ apiKey: "sk-test", baseURL: `${gateway}/v1`, maxRetries: 2 });
  const messages = [{ role: "user", content: "a call the upstream fails once, then answers" }];
  const before = (await upstreamCalls()).length;
  const { data, response } = await openai.chat.completions
    .create({ model: "gpt-4o", messages }, { headers: { "X-Standin-Fail-Once": "retry-1" } })
    .withResponse();
  assert.match(data.choices[0].message.content, /^done/);
  assert.equal((await upstreamCalls()).length - before, 2, "the SDK sent the call twice");
  const sid = response.headers.get("x-compactor-session");
  messages.push(data.choices[0].message, { role: "user", content: "and once more" });
  await openai.chat.completions.create({ model: "gpt-4o", messages }, { headers: { "X-Standin-Fail-Once": "retry-2" } });
  const h = await historyOf(sid, (h) => h.messages.length >= 3);
  assert.deepEqual(h.messages.map((m) => m.role), ["user", "assistant", "user"]);
});

test("provider-shaped errors for malformed calls", async () => {
  const openai = new OpenAI({ apiKey: "sk-test", baseURL: `${gateway}/v1`, maxRetries: 0 });
  await assert.rejects(openai.chat.completions.create({ model: "gpt-4o", messages: [{ role: "wizard", content: "x" }] }), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.type, "invalid_request_error");
    assert.match(e.message, /role "wizard"/);
    return true;
  });
  const anthropic = new Anthropic({ apiKey: "sk-ant-test", baseURL: gateway, maxRetries: 0 });
  await assert.rejects(anthropic.messages.create({ model: "claude-sonnet-4-5", max_tokens: 5, messages: [{ role: "user", content: [{ type: "tool_result", content: "x" }] }] }), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.error?.error?.type, "invalid_request_error");
    return true;
  });
});
