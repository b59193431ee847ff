// What the package declares of the contract is what the schemas say.

import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { Strategies } from "../src/index.js";

const here = dirname(fileURLToPath(import.meta.url));

// Issue 42: the declarations listed strategies the service never sends.
test("the strategies are the schema's", () => {
  const schema = JSON.parse(readFileSync(join(here, "..", "..", "..", "schemas", "compaction_completed.json"), "utf8"));
  assert.deepEqual([...Strategies], schema.properties.strategy.enum);
  const dts = readFileSync(join(here, "..", "types", "index.d.ts"), "utf8");
  const declared = dts.match(/export (?:declare )?const Strategies: readonly \[([^\]]*)\]/);
  assert.ok(declared, "index.d.ts declares Strategies");
  assert.deepEqual(JSON.parse(`[${declared[1]}]`), schema.properties.strategy.enum);
});

// Issue 42: a request published where no service was provisioned threw an
// untyped error; it is NoServiceError, as the endpoints' calls are.
test("no service: NoServiceError", async () => {
  const { connect } = await import("@nats-io/transport-node");
  const { CompactorClient, NoServiceError } = await import("../src/index.js");
  const { startBareNATS } = await import("./service.js");
  const bare = await startBareNATS();
  const nc = await connect({ servers: bare.url });
  try {
    const c = new CompactorClient(nc, { timeoutMs: 5_000 });
    await assert.rejects(c.compact("s1"), NoServiceError);
    await assert.rejects(c.context("s1"), NoServiceError);
  } finally {
    await nc.close();
    await bare.stop();
  }
});

// Issue 44: every fact of the contract this package holds (src/contract.js)
// is the service's, as `compactor contract --json` prints them.
test("the contract is the service's", async () => {
  const { execFileSync } = await import("node:child_process");
  const { compactorBinary } = await import("./service.js");
  const c = await import("../src/contract.js");
  const facts = JSON.parse(execFileSync(compactorBinary(), ["contract", "--json"], { encoding: "utf8" }));
  const names = { create: "session_create", append: "session_append", upload: "session_upload", context: "session_context",
    history: "session_history", message: "session_message", delete: "session_delete", breaker: "breaker_get", compact: "compact", result: "result_get",
    search: "session_search", expand: "session_expand" };
  for (const [key, subject] of Object.entries(c.Subjects)) assert.equal(subject, facts.subjects[names[key]], `Subjects.${key}`);
  for (const [trigger, route] of Object.entries(c.RequestRoutes)) {
    const r = facts.routes.find((r) => r.request && r.trigger === trigger);
    assert.ok(r, `the service has no request route for ${trigger}`);
    assert.deepEqual({ type: route.type, prefix: route.prefix }, { type: r.type, prefix: r.prefix });
  }
  const results = facts.routes.filter((r) => !r.request);
  assert.deepEqual(Object.keys(c.EventSubjects).sort(), results.map((r) => r.type).sort());
  for (const r of results) assert.equal(c.EventSubjects[r.type], r.prefix, r.type);
  assert.deepEqual({ code: c.ErrorHeaders.code, error: c.ErrorHeaders.error }, { code: facts.headers.error_code, error: facts.headers.error });
  assert.equal(c.SessionIdPattern.source, facts.session_id.pattern);
  assert.deepEqual(JSON.parse(JSON.stringify(c.RecallTools)), facts.tools, "RecallTools");
  assert.equal(c.SessionIdError, facts.session_id.error);
  assert.equal(c.Limits.maxUploadPartBytes, facts.limits.max_upload_part_bytes);
  assert.equal(c.Limits.maxUploadParts, facts.limits.max_upload_parts);
  assert.equal(c.CloudEvents.specversion, facts.cloudevents.specversion);
  assert.equal(c.CloudEvents.headerPrefix, facts.cloudevents.header_prefix);
});
