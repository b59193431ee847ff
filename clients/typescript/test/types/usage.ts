// Compiled (not run) by test/types.test.js: the package's types as a
// TypeScript runtime uses them, under strict settings.
import { connect } from "@nats-io/transport-node";
import { generateText, stepCountIs, type ModelMessage } from "ai";
import { createAgent } from "langchain";

import { CompactionFailedError, CompactorClient, NotFoundError, text, toChat, type Completed, type ContextView } from "@compactor/client";
import { compactorPrepareStep } from "@compactor/client/ai-sdk";
import { compactorMiddleware } from "@compactor/client/langchain";

export async function loop(messages: ModelMessage[]): Promise<void> {
  const nc = await connect({ servers: "nats://127.0.0.1:4222" });
  const client = new CompactorClient(nc, { source: "urn:acme:agent" });
  await client.create("s1", { model: "gpt-4o", contextLimit: 8000, messages: [text("sys", "system", "Be brief.")] });
  await client.append("s1", [text("u1", "user", "Hi")], { expectedHeadSeq: 1 });
  const view: ContextView = await client.context("s1");
  const chat = toChat(view.messages);
  chat.forEach((m) => m.role.toUpperCase());
  try {
    const done: Completed = await client.compact("s1", { contextLimit: 8000, requestedTokens: view.tokens, cache: { lastRequestTime: new Date(), ttlSeconds: 300 } });
    done.tokens_after.toFixed();
  } catch (err) {
    if (err instanceof CompactionFailedError) err.reason.toUpperCase();
    if (err instanceof NotFoundError) err.code.toFixed();
  }
  for await (const ev of client.results("s1")) {
    if (ev.type === "CompactionCompleted") break;
  }
  const sub = client.subscribeCircuit(undefined, (e) => e.sessionId.toUpperCase());
  await sub.drain();
  await generateText({ model: "openai/gpt-4o", messages, stopWhen: stepCountIs(5), prepareStep: compactorPrepareStep({ client, sessionId: "s1", contextLimit: 8000 }) });
  createAgent({ model: "openai:gpt-4o", tools: [], middleware: [compactorMiddleware({ client, sessionId: "s1", contextLimit: 8000, trigger: [{ tokens: 6000 }, { messages: 50 }] })] });
  await nc.close();
}
