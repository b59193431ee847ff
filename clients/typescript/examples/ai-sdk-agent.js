// A 40-turn coding agent written with the Vercel AI SDK, kept inside a
// 3,000-token window by the compactor through prepareStep. The model is a
// stand-in (the AI SDK's MockLanguageModelV3): it reads one file per step,
// then answers. Run it against a local `compactor serve`:
//
//   compactor serve &            # NATS on 127.0.0.1:4222, the offline summariser
//   node examples/ai-sdk-agent.js
//
// NATS_URL names another server.

import { connect } from "@nats-io/transport-node";
import { generateText, jsonSchema, stepCountIs, tool } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import { getEncoding } from "js-tiktoken";

import { CompactorClient } from "@compactor/client";
import { compactorPrepareStep } from "@compactor/client/ai-sdk";

const enc = getEncoding("o200k_base");

/**
 * The tokens of what a prompt says, counted as OpenAI counts a chat: each
 * message's text, tool calls (name and arguments) and results, and 3 a
 * message.
 */
export function promptTokens(prompt) {
  let n = 3;
  for (const m of prompt) {
    n += 3;
    const parts = typeof m.content === "string" ? [{ type: "text", text: m.content }] : m.content;
    for (const p of parts) {
      if (p.type === "text") n += enc.encode(p.text).length;
      else if (p.type === "tool-call") n += enc.encode(p.toolName + (typeof p.input === "string" ? p.input : JSON.stringify(p.input))).length;
      else if (p.type === "tool-result") n += enc.encode(typeof p.output?.value === "string" ? p.output.value : JSON.stringify(p.output?.value ?? "")).length;
    }
  }
  return n;
}

/** A file's contents as the tool returns them: about 200 tokens. */
function fileContents(path) {
  const lines = [`// ${path}`, "package billing", ""];
  for (let i = 0; i < 12; i++) lines.push(`func charge${i}(amount int) error { return ledger.Post("${path}", amount+${i}) }`);
  return lines.join("\n");
}

/**
 * Runs the agent: turns tool calls, then a final answer. Returns what each
 * step's model call got (its tokens) and the compactions.
 */
export async function runAgent({ natsUrl = process.env.NATS_URL ?? "nats://127.0.0.1:4222", sessionId = `ai-sdk-${Date.now()}`, turns = 40, contextLimit = 3000 } = {}) {
  const nc = await connect({ servers: natsUrl });
  try {
    const client = new CompactorClient(nc, { source: "urn:example:ai-sdk-agent" });
    const steps = [];
    let calls = 0;
    const model = new MockLanguageModelV3({
      doGenerate: async ({ prompt }) => {
        steps.push({ tokens: promptTokens(prompt), messages: prompt.length });
        const k = calls++;
        const usage = { inputTokens: { total: 0, noCache: 0, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 0, text: 0, reasoning: 0 } };
        if (k < turns) {
          return {
            content: [
              { type: "text", text: `Step ${k + 1}: reading the next file.` },
              { type: "tool-call", toolCallId: `call_${k}`, toolName: "read_file", input: JSON.stringify({ path: `billing/charge_${k}.go` }) },
            ],
            finishReason: { unified: "tool-calls", raw: "tool_calls" },
            usage,
            warnings: [],
          };
        }
        return { content: [{ type: "text", text: `Read ${turns} files; the charges all post to the ledger.` }], finishReason: { unified: "stop", raw: "stop" }, usage, warnings: [] };
      },
    });
    const compactions = [];
    const result = await generateText({
      model,
      allowSystemInMessages: true, // the system prompt is the session's first message
      messages: [
        { role: "system", content: "You are a coding agent. Read the billing package file by file, then summarise it." },
        { role: "user", content: "Review every file of billing/ and tell me where the charges go." },
      ],
      tools: {
        read_file: tool({
          description: "Read a file of the repository",
          inputSchema: jsonSchema({ type: "object", properties: { path: { type: "string" } }, required: ["path"] }),
          execute: async ({ path }) => fileContents(path),
        }),
      },
      stopWhen: stepCountIs(turns + 1),
      prepareStep: compactorPrepareStep({ client, sessionId, contextLimit, onCompaction: (c) => compactions.push(c) }),
    });
    return { sessionId, steps, compactions, text: result.text, toolCalls: calls };
  } finally {
    await nc.close();
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const out = await runAgent();
  console.log(`${out.steps.length} model calls, the largest ${Math.max(...out.steps.map((s) => s.tokens))} tokens; ${out.compactions.length} compactions of session ${out.sessionId}`);
  console.log(out.text);
}
