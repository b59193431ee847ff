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
