// `compactor mcp` driven by the MCP project's TypeScript SDK client over
// stdio, as an agent that speaks MCP starts it: the recall tools listed
// with the service's one definition, and called.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";

import { connect } from "@nats-io/transport-node";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { CompactorClient, RecallTools, text } from "../src/index.js";
import { compactorBinary, startService } from "./service.js";

let svc, nc, mcp;

before(async () => {
  svc = await startService();
  nc = await connect({ servers: svc.url });
  const client = new CompactorClient(nc, { timeoutMs: 30_000 });
  const messages = [];
  for (let i = 0; i < 30; i++) {
    messages.push(text(`u${i}`, "user", `is ticket TCK-${100 + i} fixed?`));
    messages.push(text(`a${i}`, "assistant", `ticket TCK-${100 + i} was fixed in build ${500 + i}`));
  }
  await client.create("mcp-ts", { contextLimit: 1500, messages });
  await client.compactSync("mcp-ts", { requestId: "mcp-1" });
  mcp = new Client({ name: "compactor-ts-test", version: "1.0.0" });
  await mcp.connect(new StdioClientTransport({ command: compactorBinary(), args: ["mcp", "--session", "mcp-ts", "--nats-url", svc.url] }));
});

after(async () => {
  await mcp?.close();
  await nc?.close();
  await svc?.stop();
});

test("the recall tools over MCP", async () => {
  const { tools } = await mcp.listTools();
  assert.deepEqual(tools.map((t) => t.name).sort(), RecallTools.map((t) => t.name).sort());
  for (const t of tools) {
    assert.deepEqual(t.inputSchema, RecallTools.find((r) => r.name === t.name).parameters, t.name);
  }
  const found = await mcp.callTool({ name: "search_history", arguments: { query: "which build fixed TCK-103?" } });
  assert.ok(!found.isError, JSON.stringify(found));
  assert.match(found.content[0].text, /TCK-103 was fixed in build 503/);
  assert.match(found.content[0].text, /summarised \(expand_history compaction_id=/);
  const page = await mcp.callTool({ name: "expand_history", arguments: { from_seq: 5, to_seq: 6 } });
  assert.match(page.content[0].text, /^#5 user \[summarised\]: is ticket TCK-102 fixed\?/);
  const bad = await mcp.callTool({ name: "search_history", arguments: { query: "(", mode: "regex" } });
  assert.ok(bad.isError);
});
