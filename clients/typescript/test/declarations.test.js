// The hand-written declarations are checked against the code (issue 44):
// every value a module exports is declared, and nothing is declared that
// it does not export; CompactorClient's methods likewise.

import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const src = join(here, "..", "src");

// declared returns the values a .d.ts declares (const, function, class),
// following its `export * from` lines.
function declared(file) {
  const text = readFileSync(join(src, file), "utf8");
  const names = new Set();
  for (const m of text.matchAll(/^export declare (?:const|function|class) (\w+)/gm)) names.add(m[1]);
  for (const m of text.matchAll(/^export \* from "\.\/([\w-]+)\.js";/gm)) for (const n of declared(`${m[1]}.d.ts`)) names.add(n);
  return names;
}

for (const mod of ["index", "errors", "ai-sdk", "langchain"]) {
  test(`${mod}.d.ts declares what ${mod}.js exports`, async () => {
    let exported;
    try {
      exported = new Set(Object.keys(await import(`../src/${mod}.js`)));
    } catch (err) {
      if (err?.code === "ERR_MODULE_NOT_FOUND") return; // an adapter's optional peer is not installed
      throw err;
    }
    const decl = declared(`${mod}.d.ts`);
    assert.deepEqual([...exported].filter((n) => !decl.has(n)).sort(), [], `exported by ${mod}.js, not declared`);
    assert.deepEqual([...decl].filter((n) => !exported.has(n)).sort(), [], `declared in ${mod}.d.ts, not exported`);
  });
}

test("CompactorClient's declared methods are its methods", async () => {
  const { CompactorClient } = await import("../src/index.js");
  const text = readFileSync(join(src, "index.d.ts"), "utf8");
  const body = text.slice(text.indexOf("export declare class CompactorClient"));
  const cls = body.slice(0, body.indexOf("\n}\n"));
  const decl = new Set([...cls.matchAll(/^  (\w+)(?:<[^>]*>)?\(/gm)].map((m) => m[1]).filter((n) => n !== "constructor"));
  const methods = new Set(Object.getOwnPropertyNames(CompactorClient.prototype).filter((n) => n !== "constructor"));
  assert.deepEqual([...methods].filter((n) => !decl.has(n)).sort(), [], "methods not declared");
  assert.deepEqual([...decl].filter((n) => !methods.has(n)).sort(), [], "declared, not methods");
  assert.ok(methods.size >= 10, `only ${methods.size} methods`);
});
