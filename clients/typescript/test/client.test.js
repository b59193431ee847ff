// The client against a real `compactor serve`: every call, large messages,
// a failed compaction, a repeated request, circuit and result events.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { connect } from "@nats-io/transport-node";

import {
  CompactionFailedError,
  CompactorClient,
  ConflictError,
  NoResultError,
  NotFoundError,
  text,
  toChat,
} from "../src/index.js";
import { standInModel, startService } from "./service.js";

function turns(from, n) {
  const out = [];
  for (let i = from; i < from + n; i++) {
    out.push(
      text(`u${i}`, "user", `Question ${i}: where is my bag tagged BAG-${String(i).padStart(4, "0")} now? It held my laptop.`),
      text(`a${i}`, "assistant", `Bag BAG-${String(i).padStart(4, "0")} is in Lisbon; it arrives on day ${(i % 28) + 1} by courier.`),
    );
  }
  return out;
}

async function eventually(f, ms = 30_000) {
  const end = Date.now() + ms;
  for (;;) {
    try {
      return await f();
    } catch (err) {
      if (Date.now() > end) throw err;
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}

describe("a runtime's calls against compactor serve", () => {
  let svc, nc, c;
  before(async () => {
    svc = await startService();
    nc = await connect({ servers: svc.url });
    c = new CompactorClient(nc, { source: "urn:test:ts-runtime" });
  });
  after(async () => {
    await nc?.close();
    await svc?.stop();
  });

  test("create, append, context, history, message, delete, breaker", async () => {
    const sys = text("sys", "system", "You are an airline's assistant.");
    const created = await c.create("s1", { contextLimit: 3000, messages: [sys, ...turns(0, 2)] });
    assert.equal(created.session_id, "s1");
    assert.equal(created.head_seq, 5);
    assert.ok(created.tokens > 0);
    // The same create again answers the session; another content conflicts.
    assert.deepEqual(await c.create("s1", { contextLimit: 3000, messages: [sys, ...turns(0, 2)] }), created);
    await assert.rejects(c.create("s1", { messages: turns(5, 1) }), ConflictError);

    const a = await c.append("s1", turns(2, 1));
    assert.equal(a.status, "applied");
    assert.deepEqual(a.ids, ["u2", "a2"]);
    assert.equal((await c.append("s1", turns(2, 1))).status, "already_applied", "an append repeated by id is applied once");
    const moved = await c.append("s1", turns(3, 1), { expectedHeadSeq: 4 }).catch((e) => e);
    assert.ok(moved instanceof ConflictError, String(moved));
    assert.equal(moved.headSeq, 7);
    await assert.rejects(c.append("nope", turns(0, 1)), NotFoundError);

    const view = await c.context("s1");
    assert.equal(view.head_seq, 7);
    assert.deepEqual(
      view.messages.map((m) => m.id),
      ["sys", "u0", "a0", "u1", "a1", "u2", "a2"],
    );
    assert.deepEqual(toChat(view.messages)[1], { role: "user", content: turns(0, 1)[0].content }, "toChat keeps the chat fields only");
    const hist = await c.history("s1");
    assert.equal(hist.record.session_id, "s1");
    assert.equal(hist.messages.length, 7);
    assert.deepEqual(hist.compactions, []);
    const m = await c.message("s1", 2);
    assert.equal(m.id, "u0");
    const br = await c.breaker("s1");
    assert.equal(br.failures, 0);

    assert.deepEqual(await c.delete("s1"), { session_id: "s1", deleted: true });
    assert.deepEqual(await c.delete("s1"), { session_id: "s1", deleted: true }, "a repeated delete answers the same");
    await assert.rejects(c.context("s1"), NotFoundError);
    await assert.rejects(c.create("bad id", {}), /session_id must be 1-200/);
  });

  test("messages over the server's max_payload go in parts, and come back whole", async () => {
    const big = "log line: all tests passed\n".repeat(60_000); // 1.6 MB, over the 1 MB max_payload
    await c.create("big", { model: "gpt-4o", contextLimit: 1_000_000, messages: [text("sys", "system", "You read logs.")] });
    const a = await c.append("big", [text("tool-out", "user", big), text("after", "assistant", "noted")]);
    assert.equal(a.status, "applied");
    assert.equal((await c.append("big", [text("tool-out", "user", big), text("after", "assistant", "noted")])).status, "already_applied");
    const view = await c.context("big"); // over one message: read in parts
    assert.equal(view.messages[1].content, big);
    assert.equal((await c.message("big", 2)).content, big);
    assert.equal((await c.history("big")).messages[1].content, big);
  });

  test("compact by event: one result, the same for a repeated request, with the trace", async () => {
    await c.create("ev", { contextLimit: 1500, messages: [text("sys", "system", "You are an airline's assistant."), ...turns(0, 40)] });
    const seen = c.results("ev");
    const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const done = await c.compact("ev", { requestId: "r-ev", contextLimit: 1500, traceparent, cache: { lastRequestTime: Date.now() - 60_000, ttlSeconds: 300 } });
    assert.equal(done.outcome, "compacted");
    assert.equal(done.request_id, "r-ev");
    assert.equal(done.cache_state, "warm");
    assert.ok(done.tokens_after < done.tokens_before);
    // The result event, as the iterator sees it, carries the request's trace.
    const { value: ev } = await seen.next();
    await seen.return();
    assert.equal(ev.type, "CompactionCompleted");
    assert.equal(ev.data.compaction_message_id, done.compaction_message_id);
    assert.match(ev.extensions.traceparent ?? "", /^00-4bf92f3577b34da6a3ce929d0e0e4736-/);
    // The same request id, by event or by endpoint: the same compaction.
    assert.equal((await c.compact("ev", { requestId: "r-ev" })).compaction_message_id, done.compaction_message_id);
    assert.equal((await c.compactSync("ev", { requestId: "r-ev" })).compaction_message_id, done.compaction_message_id);
    const view = await c.context("ev");
    assert.equal(view.tokens, done.tokens_after);
    assert.ok(view.messages[1].is_compaction);
    // An unknown session is a failed compaction, thrown with its reason.
    const nf = await c.compact("nowhere").catch((e) => e);
    assert.ok(nf instanceof CompactionFailedError, String(nf));
    assert.equal(nf.reason, "session_not_found");
    const nfs = await c.compactSync("nowhere").catch((e) => e);
    assert.ok(nfs instanceof CompactionFailedError && nfs.reason === "session_not_found", String(nfs));
  });

  test("near budget: the service prepares the coming compaction", async () => {
    const msgs = [text("sys", "system", "You are an airline's assistant."), ...turns(0, 100)];
    const probe = await c.create("prep-probe", { messages: msgs });
    await c.create("prep", { contextLimit: Math.floor((probe.tokens * 10) / 8), messages: msgs });
    await c.nearBudget("prep");
    const prepared = await eventually(async () => {
      const h = await c.history("prep");
      assert.equal(h.prepared[0]?.state, "ready");
      return h.prepared[0];
    });
    assert.equal(prepared.trigger, "near_budget");
    assert.ok(prepared.usable);
  });

  test("a wait that ends before the result: NoResultError, then the same request is answered", async () => {
    await c.create("late", { contextLimit: 1500, messages: turns(0, 40) });
    // A wait too short for any service: the request is stored all the same.
    const early = await c.compact("late", { requestId: "r-late", timeoutMs: 1 }).catch((e) => e);
    if (early instanceof NoResultError) {
      assert.equal(early.requestId, "r-late");
    } else {
      assert.equal(early.outcome, "compacted"); // a very fast machine
    }
    const done = await c.compact("late", { requestId: "r-late" });
    assert.equal(done.outcome, "compacted");
  });
});

describe("a failing summary model", () => {
  let model, svc, nc, c;
  before(async () => {
    model = await standInModel(() => ({ status: 400, error: "This model has been retired." }));
    svc = await startService(["--provider", "openai", "--base-url", model.baseURL, "--summary-model", "gpt-4o-mini", "--max-failures", "1"]);
    nc = await connect({ servers: svc.url });
    c = new CompactorClient(nc);
  });
  after(async () => {
    await nc?.close();
    await svc?.stop();
    await model?.close();
  });

  test("a failed compaction throws CompactionFailedError, and the breaker's event arrives", async () => {
    const circuit = [];
    const sub = c.subscribeCircuit("", (ev) => circuit.push(ev));
    await nc.flush();
    await c.create("f1", { contextLimit: 1500, messages: turns(0, 40) });
    const err = await c.compact("f1", { requestId: "r-f1" }).catch((e) => e);
    assert.ok(err instanceof CompactionFailedError, String(err));
    assert.equal(err.reason, "summary_failed");
    assert.equal(err.failed.failures, 1);
    assert.match(err.message, /retired/);
    await eventually(async () => assert.equal(circuit.length, 1));
    assert.equal(circuit[0].type, "CompactionCircuitOpened");
    assert.equal(circuit[0].sessionId, "f1");
    assert.equal(circuit[0].data.failures, 1);
    assert.equal((await c.breaker("f1")).state, "open");
    // The breaker is open: the next request fails at once, by its reason.
    const open = await c.compactSync("f1").catch((e) => e);
    assert.ok(open instanceof CompactionFailedError && open.reason === "circuit_open", String(open));
    await sub.drain();
    assert.ok(model.requests.length >= 1, "the service called the stand-in model");
  });
});
