// A 40-turn coding agent written with LangChain.js's createAgent, kept
// inside a 3,000-token window by the compactor's middleware in the place
// of summarizationMiddleware. The model is a stand-in chat model: it
// reads one file per turn, then answers. Run it against a local
// `compactor serve`:
//
//   compactor serve &            # NATS on 127.0.0.1:4222, the offline summariser
//   node examples/langchain-agent.js
//
// NATS_URL names another server.

import { connect } from "@nats-io/transport-node";
import { createAgent, tool } from "langchain";
import { BaseChatModel } from "@langchain/core/language_models/chat_models";
import { AIMessage } from "@langchain/core/messages";
import { getEncoding } from "js-tiktoken";

import { CompactorClient } from "@compactor/client";
import { compactorMiddleware } from "@compactor/client/langchain";

const enc = getEncoding("o200k_base");

/**
 * The tokens of what the model gets, counted as OpenAI counts a chat: each
 * message's text, tool calls and results, and 3 a message.
 */
export function messageTokens(messages) {
  let n = 3;
  for (const m of messages) {
    n += 3;
    n += enc.encode(typeof m.content === "string" ? m.content : JSON.stringify(m.content)).length;
    for (const c of m.tool_calls ?? []) n += enc.encode(c.name + JSON.stringify(c.args)).length;
  }
  return n;
}

/** A stand-in chat model: turns tool calls (read_file), then an answer. */
class StandInModel extends BaseChatModel {
  constructor(turns, onCall) {
    super({});
    this.turns = turns;
    this.onCall = onCall;
    this.calls = 0;
  }

  _llmType() {
    return "stand-in";
  }

  bindTools() {
    return this;
  }

  async _generate(messages) {
    this.onCall(messages);
    const k = this.calls++;
    const message =
      k < this.turns
        ? new AIMessage({ content: `Step ${k + 1}: reading the next file.`, tool_calls: [{ id: `call_${k}`, name: "read_file", args: { path: `billing/charge_${k}.go` }, type: "tool_call" }] })
        : new AIMessage({ content: `Read ${this.turns} files; the charges all post to the ledger.` });
    return { generations: [{ text: typeof message.content === "string" ? message.content : "", message }] };
  }
}

/** A file's contents as the tool returns them: about 200 tokens. */
function fileContents(path) {
  const lines = [`// ${path}`, "package billing", ""];
  for (let i = 0; i < 12; i++) lines.push(`func charge${i}(amount int) error { return ledger.Post("${path}", amount+${i}) }`);
  return lines.join("\n");
}

/**
 * Runs the agent: turns tool calls, then a final answer. Returns what each
 * model call got (its tokens) and the compactions.
 */
export async function runAgent({ natsUrl = process.env.NATS_URL ?? "nats://127.0.0.1:4222", sessionId = `langchain-${Date.now()}`, turns = 40, contextLimit = 3000 } = {}) {
  const nc = await connect({ servers: natsUrl });
  try {
    const client = new CompactorClient(nc, { source: "urn:example:langchain-agent" });
    const steps = [];
    const compactions = [];
    const readFile = tool(async ({ path }) => fileContents(path), {
      name: "read_file",
      description: "Read a file of the repository",
      schema: { type: "object", properties: { path: { type: "string" } }, required: ["path"] },
    });
    const agent = createAgent({
      model: new StandInModel(turns, (messages) => steps.push({ tokens: messageTokens(messages), messages: messages.length })),
      tools: [readFile],
      systemPrompt: "You are a coding agent. Read the billing package file by file, then summarise it.",
      middleware: [compactorMiddleware({ client, sessionId, contextLimit, onCompaction: (c) => compactions.push(c) })],
    });
    const result = await agent.invoke(
      { messages: [{ role: "user", content: "Review every file of billing/ and tell me where the charges go." }] },
      { recursionLimit: 4 * turns + 10 },
    );
    return { sessionId, steps, compactions, text: result.messages.at(-1).content, messages: result.messages };
  } finally {
    await nc.close();
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const out = await runAgent();
  console.log(`${out.steps.length} model calls, the largest ${Math.max(...out.steps.map((s) => s.tokens))} tokens; ${out.compactions.length} compactions of session ${out.sessionId}`);
  console.log(out.text);
}
