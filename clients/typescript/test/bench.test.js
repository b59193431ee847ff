// The append benchmark (bench/append.js) runs: a short run through a real
// compactor serve, appends and KV puts both made (its figures are make
// scale's; here, that it works).

import { test } from "node:test";
import assert from "node:assert/strict";
import { run, messages } from "../bench/append.js";

test("the append benchmark measures appends and KV puts", async () => {
  assert.ok(messages().length > 5);
  const r = await run({ runtimes: 2, seconds: 0.5 });
  assert.ok(r.appendsPerSecond > 0 && r.kvPutsPerSecond > 0, JSON.stringify(r));
});
