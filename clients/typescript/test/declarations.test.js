// The declarations in types/ are generated from the source (issue 44):
// src/types.ts holds the contract's shapes, the JSDoc of src/*.js the
// rest, and `npm run types` (tsc -p tsconfig.types.json) writes them. The
// test generates them again and compares: a change to the source without
// `npm run types` fails here. Every value a module exports is declared,
// and nothing it does not export.

import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const types = join(root, "types");

test("types/ is what npm run types generates from the source", () => {
  const out = mkdtempSync(join(tmpdir(), "compactor-types-"));
  try {
    const tsc = join(root, "node_modules", "typescript", "bin", "tsc");
    try {
      execFileSync(process.execPath, [tsc, "-p", join(root, "tsconfig.types.json"), "--outDir", out], { encoding: "utf8", stdio: "pipe" });
    } catch (err) {
      assert.fail(`tsc:\n${err.stdout}${err.stderr}`);
    }
    const made = readdirSync(out).sort();
    assert.deepEqual(readdirSync(types).sort(), made, "the files of types/");
    for (const f of made) {
      assert.equal(readFileSync(join(types, f), "utf8"), readFileSync(join(out, f), "utf8"), `types/${f} is not what the source generates: run npm run types`);
    }
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
});

// declared returns the values a .d.ts declares (const, function, class),
// following its `export * from` lines.
function declared(file) {
  const text = readFileSync(join(types, file), "utf8");
  const names = new Set();
  for (const m of text.matchAll(/^export (?:declare )?(?:const|function|class) (\w+)/gm)) names.add(m[1]);
  for (const m of text.matchAll(/^export \{([^}]*)\} from/gm)) for (const n of m[1].split(",")) names.add(n.trim());
  for (const m of text.matchAll(/^export \* from "\.\/([\w-]+)\.js";/gm)) for (const n of declared(`${m[1]}.d.ts`)) names.add(n);
  return names;
}

for (const mod of ["index", "errors", "contract", "ai-sdk", "langchain"]) {
  test(`types/${mod}.d.ts declares what src/${mod}.js exports`, async () => {
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

test("CompactorClient's methods are declared with their types", () => {
  const text = readFileSync(join(types, "index.d.ts"), "utf8");
  const body = text.slice(text.indexOf("export class CompactorClient"));
  const cls = body.slice(0, body.indexOf("\n}\n"));
  const untyped = [...cls.matchAll(/^ {4}(\w+)\(.*\): (.*);$/gm)].filter((m) => /\bany\b/.test(m[0]) && m[1] !== "constructor").map((m) => m[1]);
  assert.deepEqual(untyped, [], "methods declared with any");
  const methods = [...cls.matchAll(/^ {4}(\w+)\(/gm)].map((m) => m[1]);
  assert.ok(methods.length >= 15, `only ${methods.length} methods declared`);
});
