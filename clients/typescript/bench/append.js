// The TypeScript client's appends against nats.js publishing raw KV puts,
// in the same run on the same server (issue 43): N runtimes each append
// one message at a time to their own session through
// compactor.session.append (CompactorClient.append), then N writers put
// the same bytes as KV values (a JetStream publish to a KV bucket's
// subject, one key each, as a KV put is). A real `compactor serve` (its
// embedded server, syncing every write) serves both.
//
//   node bench/append.js [--runtimes 8] [--seconds 5] [--json] [--out FILE]
//
// It exits 1 when the appends are under GOAL of the KV puts.
//
// Messages: the bundled tau-bench agent run's (internal/demo), those
// without tool calls, cycled.

import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { connect } from "@nats-io/transport-node";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { CompactorClient } from "../src/index.js";
import { startService } from "../test/service.js";

const repo = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");

function arg(name, dflt) {
  const i = process.argv.indexOf(name);
  return i > 0 && i + 1 < process.argv.length ? process.argv[i + 1] : dflt;
}

/** The run's messages without tool calls or results, as a runtime sends them. */
export function messages() {
  const run = JSON.parse(readFileSync(join(repo, "internal/demo/tau-bench-airline-task2.json"), "utf8"));
  return run.messages.filter((m) => m.role !== "system" && m.role !== "tool" && !m.tool_calls && typeof m.content === "string");
}

/** Runs fn(worker, k) on n workers for ms; resolves with calls a second and the first error. */
async function drive(n, ms, fn) {
  const stop = Date.now() + ms;
  let done = 0;
  let failed = null;
  const start = process.hrtime.bigint();
  await Promise.all(
    Array.from({ length: n }, async (_, w) => {
      for (let k = 0; Date.now() < stop; k++) {
        try {
          await fn(w, k);
          done++;
        } catch (e) {
          failed ??= e;
          return;
        }
      }
    }),
  );
  const secs = Number(process.hrtime.bigint() - start) / 1e9;
  return { perSecond: done / secs, done, failed };
}

/** Measures runtimes appending against KV puts; resolves with the figures. */
export async function run({ runtimes = 8, seconds = 5, url } = {}) {
  const svc = url ? null : await startService();
  const nc = await connect({ servers: url ?? svc.url });
  try {
    const client = new CompactorClient(nc);
    const msgs = messages();
    const bytes = msgs.map((m) => new TextEncoder().encode(JSON.stringify(m)));
    const stamp = Date.now().toString(36);
    const ids = Array.from({ length: runtimes }, (_, w) => `ts-bench-${stamp}-${w}`);
    for (const id of ids) await client.create(id, { model: "gpt-4.1" });
    const appends = await drive(runtimes, seconds * 1000, (w, k) => client.append(ids[w], [{ id: `m${k}`, ...msgs[k % msgs.length] }]));
    if (appends.failed) throw new Error(`append: ${appends.failed.message}`);
    const jsm = await jetstreamManager(nc);
    const bucket = `bench_ts_${stamp}`;
    await jsm.streams.add({
      name: `KV_${bucket}`,
      subjects: [`$KV.${bucket}.>`],
      max_msgs_per_subject: 1,
      discard: "new",
      allow_rollup_hdrs: true,
      deny_delete: true,
      allow_direct: true,
      num_replicas: 1,
    });
    const js = jetstream(nc);
    const puts = await drive(runtimes, seconds * 1000, (w, k) => js.publish(`$KV.${bucket}.${w}.${k}`, bytes[k % bytes.length]));
    if (puts.failed) throw new Error(`KV put: ${puts.failed.message}`);
    await jsm.streams.delete(`KV_${bucket}`);
    return { runtimes, seconds, appendsPerSecond: appends.perSecond, kvPutsPerSecond: puts.perSecond, ratio: appends.perSecond / puts.perSecond };
  } finally {
    await nc.close();
    await svc?.stop();
  }
}

/** The report docs/TS-APPENDS.md holds. */
export function markdown(r, command) {
  const met = r.ratio >= GOAL;
  return `# The TypeScript client's appends

Written by \`${command}\` on Node ${process.version}; figures from that run only. Do not edit by hand.

${r.runtimes} runtimes, each appending one message at a time (the bundled tau-bench run's messages without tool calls, cycled) to its own session through \`compactor.session.append\` with \`CompactorClient.append\`, for ${r.seconds} s; then ${r.runtimes} writers putting the same messages' bytes as raw KV values with nats.js (a JetStream publish to the bucket's subject, one key each), for as long. One \`compactor serve\` and its embedded nats-server (syncing every write) serve both.

| appends/s | raw KV puts/s | ratio | goal | |
| ---: | ---: | ---: | ---: | --- |
| ${r.appendsPerSecond.toFixed(0)} | ${r.kvPutsPerSecond.toFixed(0)} | ${r.ratio.toFixed(2)}x | >= ${GOAL}x | ${met ? "met" : "**missed**"} |
`;
}

/** The goal: the client's appends at least half raw KV puts. */
export const GOAL = 0.5;

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const r = await run({ runtimes: Number(arg("--runtimes", 8)), seconds: Number(arg("--seconds", 5)) });
  if (process.argv.includes("--json")) console.log(JSON.stringify(r));
  console.error(
    `${r.runtimes} runtimes, ${r.seconds} s: ${r.appendsPerSecond.toFixed(0)} appends/s through the TypeScript client against ${r.kvPutsPerSecond.toFixed(0)} raw KV puts/s with nats.js: ${r.ratio.toFixed(2)}x`,
  );
  const out = arg("--out", "");
  if (out) {
    const { writeFileSync } = await import("node:fs");
    writeFileSync(out, markdown(r, `node clients/typescript/bench/append.js ${process.argv.slice(2).join(" ")}`));
    console.error(`wrote ${out}`);
  }
  if (r.ratio < GOAL) process.exitCode = 1;
}
