// The adapters: each framework's real message types through the
// compactor's form and back, and a 40-turn agent loop written with each
// (a stand-in model, a 3,000-token window) against a real compactor serve.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { AIMessage, HumanMessage, SystemMessage, ToolMessage } from "@langchain/core/messages";

import { fromModelMessage, toModelMessages } from "../src/ai-sdk.js";
import { fromLangChain, toLangChain } from "../src/langchain.js";
import { runAgent as runAISDKAgent } from "../examples/ai-sdk-agent.js";
import { runAgent as runLangChainAgent } from "../examples/langchain-agent.js";
import { compactorBinary, startService } from "./service.js";

const window = 3000;

test("AI SDK messages: the compactor's form and back", () => {
  const messages = [
    { role: "system", content: "You are terse." },
    { role: "user", content: [{ type: "text", text: "What is in this picture?" }, { type: "image", image: new URL("https://example.com/cat.png") }] },
    {
      role: "assistant",
      content: [
        { type: "text", text: "Let me look it up." },
        { type: "tool-call", toolCallId: "c1", toolName: "lookup", input: { q: "cat" } },
        { type: "tool-call", toolCallId: "c2", toolName: "weather", input: { city: "Lisbon" } },
      ],
    },
    {
      role: "tool",
      content: [
        { type: "tool-result", toolCallId: "c1", toolName: "lookup", output: { type: "text", value: "a cat" } },
        { type: "tool-result", toolCallId: "c2", toolName: "weather", output: { type: "json", value: { temp: 21 } } },
      ],
    },
    { role: "assistant", content: "A cat; 21 degrees in Lisbon." },
  ];
  const stored = messages.flatMap((m, i) => fromModelMessage(m, `m${i}`));
  assert.deepEqual(
    stored.map((m) => [m.id, m.role]),
    [["m0", "system"], ["m1", "user"], ["m2", "assistant"], ["m3.1", "tool"], ["m3.2", "tool"], ["m4", "assistant"]],
  );
  assert.deepEqual(stored[1].content[1], { type: "image_url", image_url: { url: "https://example.com/cat.png" } });
  assert.deepEqual(stored[2].tool_calls[1], { id: "c2", type: "function", function: { name: "weather", arguments: '{"city":"Lisbon"}' } });
  assert.equal(stored[4].content, '{"temp":21}');
  const back = toModelMessages(stored);
  assert.equal(back.length, 5, "the two results travel in one tool message again");
  assert.deepEqual(back[2].content[1], { type: "tool-call", toolCallId: "c1", toolName: "lookup", input: { q: "cat" } });
  assert.deepEqual(back[3].content.map((p) => [p.toolCallId, p.toolName, p.output.value]), [["c1", "lookup", "a cat"], ["c2", "weather", '{"temp":21}']]);
  assert.ok(back[1].content[1].image instanceof URL);
});

test("LangChain messages: the compactor's form and back", () => {
  const messages = [
    new SystemMessage({ id: "s", content: "You are terse." }),
    new HumanMessage({ id: "h", content: "Weather in Lisbon?" }),
    new AIMessage({ id: "a", content: "", tool_calls: [{ id: "c1", name: "weather", args: { city: "Lisbon" }, type: "tool_call" }] }),
    new ToolMessage({ id: "t", content: "21 degrees", tool_call_id: "c1", name: "weather" }),
    new AIMessage({ id: "a2", content: "21 degrees in Lisbon." }),
  ];
  const stored = messages.map(fromLangChain);
  assert.deepEqual(stored[2], { id: "a", role: "assistant", content: null, tool_calls: [{ id: "c1", type: "function", function: { name: "weather", arguments: '{"city":"Lisbon"}' } }] });
  assert.deepEqual(stored[3], { id: "t", role: "tool", tool_call_id: "c1", name: "weather", content: "21 degrees" });
  const back = toLangChain([...stored.slice(0, 1), { id: "sum", role: "user", content: "Summary: ...", is_compaction: true }, ...stored.slice(1)]);
  assert.ok(back[0] instanceof SystemMessage && back[1] instanceof HumanMessage && back[3] instanceof AIMessage && back[4] instanceof ToolMessage);
  assert.equal(back[1].additional_kwargs.lc_source, "compactor", "the summary is marked, so it is never stored back");
  assert.deepEqual(back[3].tool_calls[0], { id: "c1", name: "weather", args: { city: "Lisbon" }, type: "tool_call" });
  assert.equal(back[4].tool_call_id, "c1");
});

describe("a 40-turn agent in a 3,000-token window", () => {
  let svc;
  before(async () => {
    svc = await startService();
  });
  after(async () => {
    await svc?.stop();
  });

  // The session as `compactor session show` prints it.
  function sessionShow(sid) {
    return JSON.parse(execFileSync(compactorBinary(), ["session", "show", sid, "--nats-url", svc.url], { encoding: "utf8" }));
  }

  // Every tool result follows the call it answers, in the service's
  // history: compaction never separated them.
  function callsAnswered(history) {
    const calls = new Set();
    for (const m of history.messages) {
      for (const c of m.tool_calls ?? []) calls.add(c.id);
      if (m.role === "tool") assert.ok(calls.has(m.tool_call_id), `tool result ${m.seq} answers no earlier call`);
    }
  }

  for (const [name, run] of [
    ["the Vercel AI SDK (prepareStep)", runAISDKAgent],
    ["LangChain.js (agent middleware)", runLangChainAgent],
  ]) {
    test(name, async () => {
      const sid = `agent-${name.split(" ")[1].replace(/\W/g, "")}`.toLowerCase();
      const out = await run({ natsUrl: svc.url, sessionId: sid, turns: 40, contextLimit: window });
      assert.equal(out.steps.length, 41, "40 tool calls, then the answer");
      const over = out.steps.map((s, i) => [i, s.tokens]).filter(([, t]) => t > window);
      assert.deepEqual(over, [], "every model call within the window");
      assert.ok(Math.max(...out.steps.map((s) => s.tokens)) > window * 0.8, "the window was nearly full: the loop needed compacting");
      const compacted = out.compactions.filter((c) => c.outcome === "compacted");
      assert.ok(compacted.length >= 3, `${compacted.length} compactions`);
      for (const c of compacted) assert.ok(c.tokens_after <= window, `a compaction left ${c.tokens_after} tokens`);
      assert.match(String(out.text), /Read 40 files/);
      const shown = sessionShow(sid);
      assert.equal(shown.compactions.length, compacted.length, "session show lists the compactions");
      assert.ok(shown.messages.length >= 2 * 40 + 1, `the service holds the whole history (${shown.messages.length} messages: the task, 40 calls and their results)`);
      callsAnswered(shown);
    });
  }
});
