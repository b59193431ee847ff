// The package's types compile as a TypeScript runtime uses them (strict).

import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));

test("the types compile under strict settings", () => {
  const tsc = join(here, "..", "node_modules", "typescript", "bin", "tsc");
  try {
    execFileSync(process.execPath, [tsc, "-p", join(here, "types")], { encoding: "utf8", stdio: "pipe" });
  } catch (err) {
    assert.fail(`tsc:\n${err.stdout}${err.stderr}`);
  }
});
