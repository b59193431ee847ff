// Recall through the TypeScript client, against a real `compactor serve`:
// search and expand what a compaction summarised, and the recall tools as
// the AI SDK and LangChain.js call them.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";

import { connect } from "@nats-io/transport-node";
import { CompactorClient, text, openAITools, anthropicTools, RecallTools } from "../src/index.js";
import { recallTools as aiSdkTools } from "../src/ai-sdk.js";
import { recallTools as langchainTools } from "../src/langchain.js";
import { startService } from "./service.js";

let svc, nc, client;

before(async () => {
  svc = await startService();
  nc = await connect({ servers: svc.url });
  client = new CompactorClient(nc, { timeoutMs: 30_000 });
  const messages = [];
  for (let i = 0; i < 30; i++) {
    messages.push(text(`u${i}`, "user", `question ${i}: where is my bag tagged BAG-${String(i).padStart(4, "0")} now?`));
    messages.push(text(`a${i}`, "assistant", `bag BAG-${String(i).padStart(4, "0")} is in Lisbon; it arrives on day ${(i % 28) + 1}`));
  }
  await client.create("ts-recall", { contextLimit: 1500, messages });
  await client.compactSync("ts-recall", { requestId: "ts-r1" });
});

after(async () => {
  await nc?.close();
  await svc?.stop();
});

test("search and expand what a compaction summarised", async () => {
  const found = await client.search("ts-recall", "where is BAG-0004?");
  const top = found.hits[0];
  assert.equal(top.state, "summarised");
  assert.ok(top.compaction_id, "a summarised hit names its compaction");
  assert.ok(top.snippet.some((p) => p.text.includes("BAG-0004")), JSON.stringify(top));
  const page = await client.expand("ts-recall", { compactionId: top.compaction_id, limit: 5 });
  assert.equal(page.messages.length, 5);
  assert.ok(page.next > 0);
  assert.deepEqual(page.states, ["summarised", "summarised", "summarised", "summarised", "summarised"]);
  const next = await client.expand("ts-recall", { compactionId: top.compaction_id, limit: 5, after: page.next });
  assert.equal(next.messages[0].seq, page.messages[4].seq + 1);
});

test("the tools, one definition in every format", async () => {
  assert.deepEqual(openAITools().map((t) => t.function.name), RecallTools.map((t) => t.name));
  assert.deepEqual(anthropicTools().map((t) => t.input_schema), RecallTools.map((t) => t.parameters));
  const ai = aiSdkTools({ client, sessionId: "ts-recall" });
  const viaAI = await ai.search_history.execute({ query: "BAG-0007", limit: 1 }, { toolCallId: "t1", messages: [] });
  assert.equal(viaAI.hits.length, 1);
  assert.ok(viaAI.hits[0].snippet.some((p) => p.text.includes("BAG-0007")));
  const [search, expand] = langchainTools({ client, sessionId: "ts-recall" });
  assert.equal(search.name, "search_history");
  const viaLC = JSON.parse(await search.invoke({ query: "BAG-0009", limit: 1 }));
  assert.ok(viaLC.hits[0].snippet.some((p) => p.text.includes("BAG-0009")));
  const original = JSON.parse(await expand.invoke({ from_seq: 3, to_seq: 3 }));
  assert.equal(original.messages[0].content, "question 1: where is my bag tagged BAG-0001 now?");
  await assert.rejects(client.runTool("ts-recall", "rm_rf", {}), /no recall tool/);
});
