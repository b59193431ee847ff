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
  const dts = readFileSync(join(here, "..", "src", "index.d.ts"), "utf8");
  const declared = dts.match(/export declare const Strategies: readonly \[([^\]]*)\]/);
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
