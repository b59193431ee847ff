// @compactor/client: the runtime's side of the compactor's contract for
// JavaScript and TypeScript. Sessions are written and read through the
// service's NATS micro endpoints (compactor.session.*); compactions are
// requested with a CloudEvent (binary mode) on agent.context.<trigger>.<id>,
// stored in JetStream, and answered by one result event on
// compaction.completed.<id> or compaction.failed.<id>. The caller owns the
// NATS connection.

import { createHash, randomUUID } from "node:crypto";
import { headers as natsHeaders } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";

import {
  CompactionFailedError,
  CompactorError,
  ConflictError,
  EndpointError,
  NoResultError,
  NoServiceError,
  NotFoundError,
  StorageFullError,
} from "./errors.js";

export * from "./errors.js";

// The contract's shapes (src/types.ts), as this module's types.
/** @typedef {import("./types.js").Role} Role */
/** @typedef {import("./types.js").ContentPart} ContentPart */
/** @typedef {import("./types.js").ToolCall} ToolCall */
/** @typedef {import("./types.js").Compaction} Compaction */
/** @typedef {import("./types.js").Message} Message */
/** @typedef {import("./types.js").ChatMessage} ChatMessage */
/** @typedef {import("./types.js").Created} Created */
/** @typedef {import("./types.js").Appended} Appended */
/** @typedef {import("./types.js").ContextView} ContextView */
/** @typedef {import("./types.js").SessionRecord} SessionRecord */
/** @typedef {import("./types.js").Prepared} Prepared */
/** @typedef {import("./types.js").History} History */
/** @typedef {import("./types.js").Deleted} Deleted */
/** @typedef {import("./types.js").Breaker} Breaker */
/** @typedef {import("./types.js").Completed} Completed */
/** @typedef {import("./types.js").Failed} Failed */
/** @typedef {import("./types.js").ResultEvent} ResultEvent */
/** @typedef {import("./types.js").CircuitEvent} CircuitEvent */
/** @typedef {import("./types.js").CircuitSubscription} CircuitSubscription */
/** @typedef {import("./types.js").CompactOptions} CompactOptions */
/** @typedef {import("./types.js").NewSession} NewSession */
/** @typedef {import("./types.js").Strategy} Strategy */
/** @typedef {import("./types.js").ToolDef} ToolDef */
/** @typedef {import("./types.js").MessageState} MessageState */
/** @typedef {import("./types.js").SearchOptions} SearchOptions */
/** @typedef {import("./types.js").SnippetPart} SnippetPart */
/** @typedef {import("./types.js").SearchHit} SearchHit */
/** @typedef {import("./types.js").SearchAnswer} SearchAnswer */
/** @typedef {import("./types.js").ExpandOptions} ExpandOptions */
/** @typedef {import("./types.js").Expanded} Expanded */
/**
 * @template [T=unknown]
 * @typedef {import("./types.js").CloudEvent<T>} CloudEvent
 */
/** @import { NatsConnection } from "@nats-io/transport-node" */

import { Subjects, RequestRoutes, EventSubjects, ErrorHeaders, SessionIdPattern, SessionIdError, Limits, CloudEvents, RecallTools } from "./contract.js";
export { Subjects, EventSubjects, RequestRoutes, ErrorHeaders, SessionIdPattern, SessionIdError, Limits, RecallTools } from "./contract.js";

/**
 * The strategies a completed result may name: how it reduced the context
 * (schemas/compaction_completed.json's enum; the tests compare them).
 */
export const Strategies = Object.freeze(/** @type {const} */ (["cleared", "single", "chunked", "incremental", "prepared", "prepared_topup", "resumed", "existing", "redelivered"]));

/** The CloudEvents source of requests when the client is given none. */
export const DEFAULT_SOURCE = "urn:compactor:client";

const encoder = new TextEncoder();
const decoder = new TextDecoder();

function checkSession(sessionId) {
  if (typeof sessionId !== "string" || !SessionIdPattern.test(sessionId)) {
    throw new CompactorError(`${SessionIdError}, not ${JSON.stringify(sessionId)}`);
  }
}

/**
 * A text message; id makes an append of it safe to repeat.
 * @param {string} id
 * @param {Role} role
 * @param {string} content
 * @returns {Message}
 */
export function text(id, role, content) {
  return { id, role, content };
}

/**
 * The messages as a provider's chat API takes them (OpenAI's format): the
 * chat fields alone, without the ids, seqs, token counts and compaction
 * metadata the service keeps.
 * @param {Message[]} messages
 * @returns {ChatMessage[]}
 */
export function toChat(messages) {
  return messages.map((m) => {
    const out = { role: m.role, content: m.content ?? null };
    if (m.name) out.name = m.name;
    if (m.tool_calls?.length) out.tool_calls = m.tool_calls;
    if (m.tool_call_id) out.tool_call_id = m.tool_call_id;
    return out;
  });
}

function withoutEmpty(obj) {
  const out = {};
  for (const [k, v] of Object.entries(obj)) {
    if (v !== undefined && v !== null && v !== "" && v !== 0) out[k] = v;
  }
  return out;
}

/** The request event's data for a session. */
function requestData(sessionId, o) {
  return withoutEmpty({
    session_id: sessionId,
    model: o.model,
    context_limit: o.contextLimit,
    requested_tokens: o.requestedTokens,
    message_count: o.messageCount,
    provider: o.provider,
    error_code: o.errorCode,
    error_message: o.errorMessage,
    summary_model: o.summaryModel,
    summary_context_limit: o.summaryContextLimit,
    focus: o.focus,
    cache: o.cache
      ? { last_request_time: new Date(o.cache.lastRequestTime).toISOString(), ttl_seconds: o.cache.ttlSeconds }
      : undefined,
  });
}

/** A header value as the CloudEvents NATS binding writes it. */
function headerValue(s) {
  return String(s).replace(/[^\x21-\x7e]|["%]/gu, (c) =>
    [...encoder.encode(c)].map((b) => "%" + b.toString(16).toUpperCase().padStart(2, "0")).join(""),
  );
}

function headerDecode(s) {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

/** The header of CloudEvents attribute name in binary mode. */
const ce = (name) => CloudEvents.headerPrefix + name;

// The CloudEvents attributes that are not extensions.
const standard = new Set(["specversion", "id", "source", "type", "subject", "time", "datacontenttype", "dataschema"]);

/**
 * Reads a CloudEvent from a NATS message, in binary mode (ce- headers) or
 * structured mode (application/cloudevents+json).
 * @param {{ headers?: any; data: Uint8Array }} msg
 * @returns {CloudEvent}
 */
export function decodeEvent(msg) {
  const h = msg.headers;
  const type = h?.get(ce("type"));
  if (type) {
    const body = msg.data.length ? decoder.decode(msg.data) : "";
    const extensions = {};
    for (const [k] of h) {
      const name = k.toLowerCase();
      if (name.startsWith(CloudEvents.headerPrefix) && !standard.has(name.slice(CloudEvents.headerPrefix.length))) extensions[name.slice(CloudEvents.headerPrefix.length)] = headerDecode(h.get(k));
    }
    return {
      id: headerDecode(h.get(ce("id"))),
      type: headerDecode(type),
      source: headerDecode(h.get(ce("source"))),
      subject: headerDecode(h.get(ce("subject"))),
      time: h.get(ce("time")),
      extensions,
      data: body ? JSON.parse(body) : null,
    };
  }
  const ev = JSON.parse(decoder.decode(msg.data));
  const extensions = {};
  for (const [k, v] of Object.entries(ev)) if (!standard.has(k) && k !== "data" && k !== "data_base64") extensions[k] = v;
  return { id: ev.id, type: ev.type, source: ev.source, subject: ev.subject, time: ev.time, extensions, data: ev.data ?? null };
}

/** The compactor's client over a NATS connection the caller owns. */
export class CompactorClient {
  #nc;
  #js;
  #source;
  #timeoutMs;

  /**
   * @param {NatsConnection} nc a connected NATS connection (@nats-io/transport-node)
   * @param {{ source?: string; timeoutMs?: number }} [options] source: the
   *   CloudEvents source of the requests (a URI-reference naming the
   *   runtime); timeoutMs: bounds each endpoint request (default 30 s)
   */
  constructor(nc, { source = DEFAULT_SOURCE, timeoutMs = 30_000 } = {}) {
    if (!nc || nc.isClosed?.()) throw new CompactorError("a connected NATS connection is required");
    if (!source) throw new CompactorError("source must not be empty");
    if (!(timeoutMs > 0)) throw new CompactorError(`timeoutMs ${timeoutMs} must be positive`);
    this.#nc = nc;
    this.#js = jetstream(nc);
    this.#source = source;
    this.#timeoutMs = timeoutMs;
  }

  get #maxPayload() {
    return this.#nc.info?.max_payload ?? 1024 * 1024;
  }

  /** One endpoint request with a JSON body; the answer's JSON. */
  async #call(subject, body, { timeoutMs = this.#timeoutMs, headers } = {}) {
    const payload = encoder.encode(JSON.stringify(body));
    if (payload.length > this.#maxPayload) {
      throw new CompactorError(`${subject}: a request of ${payload.length} bytes is over the server's max_payload (${this.#maxPayload})`);
    }
    let m;
    try {
      m = await this.#nc.request(subject, payload, { timeout: timeoutMs, headers });
    } catch (err) {
      if (err?.isNoResponders?.() || err?.name === "NoRespondersError" || err?.cause?.name === "NoRespondersError") {
        throw new NoServiceError(subject, { cause: err });
      }
      throw new CompactorError(`${subject}: ${err?.message ?? err}`, { cause: err });
    }
    const code = m.headers?.get(ErrorHeaders.code);
    const text = m.data.length ? decoder.decode(m.data) : "";
    if (code) {
      let eb = {};
      try {
        eb = JSON.parse(text);
      } catch {
        // not JSON: the header says it all
      }
      return { error: { code: Number(code), message: eb.error || m.headers.get(ErrorHeaders.error) || "", body: eb } };
    }
    return { value: text ? JSON.parse(text) : null };
  }

  async #endpoint(subject, body, options) {
    const r = await this.#call(subject, body, options);
    if (r.error) throw endpointError(subject, r.error);
    return r.value;
  }

  /**
   * Stores a new session under sessionId ("" or undefined: the service
   * makes a UUID, which the answer names). The same create again answers
   * the session; another content on a taken id throws ConflictError.
   * @param {string | undefined} sessionId
   * @param {NewSession} [session]
   * @returns {Promise<Created>}
   */
  async create(sessionId, { model, contextLimit, messages = [] } = {}) {
    if (sessionId) checkSession(sessionId);
    if (contextLimit !== undefined && !(contextLimit >= 0)) throw new CompactorError(`contextLimit ${contextLimit} must be >= 0`);
    return this.#endpoint(Subjects.create, withoutEmpty({ session_id: sessionId, model, context_limit: contextLimit, messages }));
  }

  /**
   * Adds messages to a session. A message whose id is stored already is
   * not written again (status "already_applied"): an append is safe to
   * repeat. Messages too large for one request are uploaded in parts
   * first and appended with the others at once. expectedHeadSeq applies
   * the append only if the session's last seq is that (else ConflictError
   * with headSeq).
   * @param {string} sessionId
   * @param {Message[]} messages
   * @param {{ expectedHeadSeq?: number }} [options]
   * @returns {Promise<Appended>}
   */
  async append(sessionId, messages, { expectedHeadSeq } = {}) {
    checkSession(sessionId);
    if (!Array.isArray(messages) || messages.length === 0) throw new CompactorError("append needs at least one message");
    const raws = messages.map((m) => JSON.stringify(m));
    let size = 256 + raws.reduce((n, r) => n + encoder.encode(r).length + 1, 0);
    const room = this.#maxPayload - 1024;
    const order = raws.map((_, i) => i).sort((a, b) => raws[b].length - raws[a].length);
    const parts = raws.map((r) => JSON.parse(r));
    for (const i of order) {
      if (size <= room) break;
      const ref = await this.#upload(sessionId, encoder.encode(raws[i]));
      size += JSON.stringify(ref).length - encoder.encode(raws[i]).length;
      parts[i] = ref;
    }
    if (size > room) throw new CompactorError(`${messages.length} messages do not fit one append even uploaded one by one: append fewer at once`);
    const body = { session_id: sessionId, messages: parts };
    if (expectedHeadSeq !== undefined) body.expected_head_seq = expectedHeadSeq;
    return this.#endpoint(Subjects.append, body);
  }

  /** Stores a message's JSON in parts; the reference to append instead. */
  async #upload(sessionId, raw) {
    const id = "c-" + createHash("sha256").update(raw).digest("hex").slice(0, 32);
    const part = Math.min(Limits.maxUploadPartBytes, Math.floor(((this.#maxPayload - 1024) * 3) / 4));
    const parts = Math.ceil(raw.length / part);
    if (parts > Limits.maxUploadParts) {
      throw new CompactorError(`a message of ${raw.length} bytes is over what the service stores (${Limits.maxUploadParts} parts of ${part} bytes)`);
    }
    for (let p = 0; p < parts; p++) {
      const data = Buffer.from(raw.subarray(p * part, Math.min(raw.length, (p + 1) * part))).toString("base64");
      await this.#endpoint(Subjects.upload, { session_id: sessionId, upload_id: id, part: p, parts, data });
    }
    return { upload_id: id };
  }

  /**
   * What to send to the model now: the system prompt and pinned messages,
   * the summary, then the messages after it. An answer over one NATS
   * message is read in parts.
   * @param {string} sessionId
   * @returns {Promise<ContextView>}
   */
  async context(sessionId) {
    return this.#read(Subjects.context, sessionId);
  }

  /**
   * The session's record, every message, every compaction and its prepared one.
   * @param {string} sessionId
   * @returns {Promise<History>}
   */
  async history(sessionId) {
    return this.#read(Subjects.history, sessionId);
  }

  async #read(subject, sessionId) {
    checkSession(sessionId);
    const r = await this.#call(subject, { session_id: sessionId });
    if (!r.error) return r.value;
    if (r.error.code !== 413) throw endpointError(subject, r.error);
    for (let attempt = 0; ; attempt++) {
      try {
        return JSON.parse(decoder.decode(await this.#readParts(subject, sessionId)));
      } catch (err) {
        // written while read: read the new answer, a few times at most
        if (err instanceof ConflictError && attempt < 4) continue;
        throw err;
      }
    }
  }

  async #readParts(subject, sessionId) {
    const chunks = [];
    let digest = "";
    for (let p = 0, parts = 1; p < parts; p++) {
      const body = { session_id: sessionId, part: p };
      if (digest) body.digest = digest;
      const ap = await this.#endpoint(subject, body);
      parts = ap.parts;
      digest = ap.digest;
      chunks.push(Buffer.from(ap.data, "base64"));
    }
    const whole = Buffer.concat(chunks);
    if (createHash("sha256").update(whole).digest("hex") !== digest) {
      throw new CompactorError(`${subject} of ${sessionId}: the parts do not match their digest`);
    }
    return whole;
  }

  /**
   * One stored message by its seq, summarised or not: the original of what
   * a compaction replaced. A message too large for one answer is read in
   * parts.
   * @param {string} sessionId
   * @param {number} seq
   * @returns {Promise<Message>}
   */
  async message(sessionId, seq) {
    checkSession(sessionId);
    if (!(seq >= 1)) throw new CompactorError(`seq ${seq} must be >= 1`);
    const r = await this.#call(Subjects.message, { session_id: sessionId, seq });
    if (!r.error) return r.value;
    if (r.error.code !== 413) throw endpointError(Subjects.message, r.error);
    const chunks = [];
    for (let p = 0, parts = 1; p < parts; p++) {
      const mp = await this.#endpoint(Subjects.message, { session_id: sessionId, seq, part: p });
      parts = mp.parts;
      chunks.push(Buffer.from(mp.data, "base64"));
    }
    return JSON.parse(decoder.decode(Buffer.concat(chunks)));
  }

  /**
   * Finds the session's stored messages that match query, whatever
   * compaction did with them (raw, cleared or summarised): ranked by its
   * words and identifiers (mode "terms", the default), or the latest that
   * hold it as written ("substring") or match it ("regex"); each hit with a
   * snippet (it and a neighbour each side, within 300 tokens). With
   * allSessions, the tenant's other recent sessions too, each hit naming its
   * session_id.
   * @param {string} sessionId
   * @param {string} query
   * @param {SearchOptions} [options]
   * @returns {Promise<SearchAnswer>}
   */
  async search(sessionId, query, { mode, roles, states, fromSeq, toSeq, limit, allSessions } = {}) {
    checkSession(sessionId);
    const body = { session_id: sessionId, query };
    if (mode) body.mode = mode;
    if (roles) body.roles = roles;
    if (states) body.states = states;
    if (fromSeq) body.from_seq = fromSeq;
    if (toSeq) body.to_seq = toSeq;
    if (limit) body.limit = limit;
    if (allSessions) body.all_sessions = true;
    return this.#endpoint(Subjects.search, body);
  }

  /**
   * One page of the originals behind a compaction ({ compactionId }), a
   * tool call and its results ({ toolCallId }) or a seq range ({ fromSeq,
   * toSeq }), each with its state; the next page starts after the answer's
   * next ({ after: page.next }).
   * @param {string} sessionId
   * @param {ExpandOptions} options
   * @returns {Promise<Expanded>}
   */
  async expand(sessionId, { compactionId, toolCallId, fromSeq, toSeq, after, limit } = {}) {
    checkSession(sessionId);
    const body = { session_id: sessionId };
    if (compactionId) body.compaction_id = compactionId;
    if (toolCallId) body.tool_call_id = toolCallId;
    if (fromSeq) body.from_seq = fromSeq;
    if (toSeq) body.to_seq = toSeq;
    if (after) body.after = after;
    if (limit) body.limit = limit;
    return this.#endpoint(Subjects.expand, body);
  }

  /**
   * Runs a recall tool call (RecallTools: search_history or
   * expand_history) a model made in session sessionId, with its arguments
   * as the model wrote them; answers what the endpoint answers.
   * @param {string} sessionId
   * @param {string} name
   * @param {Record<string, unknown> | string} [args]
   * @returns {Promise<SearchAnswer | Expanded>}
   */
  async runTool(sessionId, name, args = {}) {
    const a = typeof args === "string" ? JSON.parse(args || "{}") : args;
    switch (name) {
      case "search_history":
        return this.search(sessionId, a.query, { mode: a.mode, roles: a.roles, states: a.states, fromSeq: a.from_seq, toSeq: a.to_seq, limit: a.limit, allSessions: a.all_sessions });
      case "expand_history":
        // another session of the tenant, as an all_sessions hit named it
        return this.expand(a.session_id || sessionId, { compactionId: a.compaction_id, toolCallId: a.tool_call_id, fromSeq: a.from_seq, toSeq: a.to_seq, after: a.after });
    }
    throw new CompactorError(`no recall tool ${JSON.stringify(name)} (the tools are search_history and expand_history)`);
  }

  /**
   * Removes a session; deleting one that does not exist answers the same.
   * @param {string} sessionId
   * @returns {Promise<Deleted>}
   */
  async delete(sessionId) {
    checkSession(sessionId);
    return this.#endpoint(Subjects.delete, { session_id: sessionId });
  }

  /**
   * The session's circuit breaker.
   * @param {string} sessionId
   * @returns {Promise<Breaker>}
   */
  async breaker(sessionId) {
    checkSession(sessionId);
    return this.#endpoint(Subjects.breaker, { session_id: sessionId });
  }

  /** Publishes a request event in binary mode to the AGENT_CONTEXT stream. */
  async #publishRequest(sessionId, trigger, o) {
    const route = RequestRoutes[trigger];
    const h = natsHeaders();
    h.set(ce("specversion"), CloudEvents.specversion);
    h.set(ce("id"), headerValue(o.requestId));
    h.set(ce("source"), headerValue(this.#source));
    h.set(ce("type"), route.type);
    h.set(ce("subject"), sessionId);
    h.set(ce("time"), new Date().toISOString());
    h.set(ce("datacontenttype"), "application/json");
    h.set("Content-Type", "application/json");
    if (o.traceparent) {
      h.set(ce("traceparent"), headerValue(o.traceparent));
      if (o.tracestate) h.set(ce("tracestate"), headerValue(o.tracestate));
    }
    const data = encoder.encode(JSON.stringify(requestData(sessionId, o)));
    try {
      return await this.#js.publish(route.prefix + sessionId, data, { msgID: o.requestId, headers: h, timeout: this.#timeoutMs });
    } catch (err) {
      // No stream takes the subject (nats.js says JetStream is not
      // enabled): no service was ever provisioned here.
      if (err?.isNoResponders?.() || /no responders|NoResponders|JetStreamNotEnabled/i.test(`${err?.name} ${err?.message} ${err?.cause?.name}`)) {
        throw new NoServiceError(route.prefix + sessionId, { cause: err });
      }
      throw new CompactorError(`publish request to ${route.prefix + sessionId}: ${err?.message ?? err}`, { cause: err });
    }
  }

  /**
   * Asks for a compaction of the session with a request event
   * (ContextOverBudget, or context_overflow with trigger "overflow") and
   * waits for its one result: the CompactionCompleted data, or a thrown
   * CompactionFailedError with the CompactionFailed data. It subscribes
   * before publishing, so the result cannot be missed. After timeoutMs
   * (default 2 min) it throws NoResultError: the request is stored and
   * will still be answered; the same requestId waits for the same result.
   *
   * options: requestId (default a new UUID), trigger ("over_budget" or
   * "overflow"), model, contextLimit, requestedTokens, messageCount,
   * provider, errorCode, errorMessage (an overflow's), summaryModel,
   * summaryContextLimit, focus, cache ({lastRequestTime, ttlSeconds}),
   * traceparent, tracestate, timeoutMs, signal.
   * @param {string} sessionId
   * @param {CompactOptions} [options]
   * @returns {Promise<Completed>}
   */
  async compact(sessionId, options = {}) {
    checkSession(sessionId);
    const o = { requestId: randomUUID(), trigger: "over_budget", timeoutMs: 120_000, ...options };
    if (o.trigger !== "over_budget" && o.trigger !== "overflow") {
      throw new CompactorError(`trigger ${JSON.stringify(o.trigger)} is not over_budget or overflow`);
    }
    const results = this.results(sessionId, { signal: o.signal });
    try {
      await this.#nc.flush();
      const ack = await this.#publishRequest(sessionId, o.trigger, o);
      // Sent before, its result may be stored already; and a result a
      // subscriber saw may reach the stream a moment after: a duplicate
      // looks again every second while it waits.
      let stored, polling;
      if (ack.duplicate) {
        stored = await this.#storedResult(sessionId, o.requestId);
        if (!stored) {
          polling = setInterval(() => {
            this.#storedResult(sessionId, o.requestId).then(
              (found) => {
                if (found && !stored) {
                  stored = found;
                  results.return();
                }
              },
              () => {}, // looked again next second
            );
          }, 1000);
        }
      }
      const timer = stored ? undefined : setTimeout(() => results.return(), o.timeoutMs);
      try {
        for await (const ev of stored ? [] : results) {
          if (ev.data?.request_id !== o.requestId) continue; // another request's
          if (ev.type === "CompactionFailed") throw new CompactionFailedError(ev.data);
          return ev.data;
        }
      } finally {
        clearTimeout(timer);
        clearInterval(polling);
      }
      if (stored?.type === "CompactionFailed") throw new CompactionFailedError(stored.data);
      if (stored) return stored.data;
      o.signal?.throwIfAborted();
      throw new NoResultError(o.requestId, sessionId, o.timeoutMs);
    } finally {
      await results.return();
    }
  }

  /**
   * The stored result event of a request (a request has one: the first
   * published, whichever kind) through the compactor.result.get endpoint:
   * {type, id, data}; undefined when none is stored yet.
   */
  async #storedResult(sessionId, requestId) {
    const r = await this.#call(Subjects.result, { session_id: sessionId, request_id: requestId });
    if (r.error?.code === 404) return undefined;
    if (r.error) throw endpointError(Subjects.result, r.error);
    return r.value;
  }

  /**
   * Asks for a compaction through the compactor.compact endpoint and
   * returns its result: the same result, and the same result event
   * published, as compact ("manual" is a trigger here too). A failed
   * compaction throws CompactionFailedError; any other error means no
   * result (send the same requestId again).
   * @param {string} sessionId
   * @param {CompactOptions} [options]
   * @returns {Promise<Completed>}
   */
  async compactSync(sessionId, options = {}) {
    checkSession(sessionId);
    const o = { requestId: randomUUID(), trigger: "over_budget", timeoutMs: 120_000, ...options };
    if (!["over_budget", "overflow", "manual"].includes(o.trigger)) {
      throw new CompactorError(`trigger ${JSON.stringify(o.trigger)} is not over_budget, overflow or manual`);
    }
    let headers;
    if (o.traceparent) {
      headers = natsHeaders();
      headers.set("traceparent", o.traceparent);
      if (o.tracestate) headers.set("tracestate", o.tracestate);
    }
    const body = { ...requestData(sessionId, o), request_id: o.requestId, trigger: o.trigger };
    const r = await this.#call(Subjects.compact, body, { timeoutMs: o.timeoutMs, headers });
    if (!r.error) return r.value;
    const f = r.error.body;
    if (!f?.reason || (r.error.code === 503 && f.reason !== "summary_failed" && f.reason !== "circuit_open")) {
      throw endpointError(Subjects.compact, r.error);
    }
    throw new CompactionFailedError(f);
  }

  /**
   * Tells the service the session's context nears its budget (a
   * ContextNearBudget event): it prepares the compaction the coming
   * request will need, so that request does not wait for a summary model.
   * No event answers it; it returns once the event is stored.
   * @param {string} sessionId
   * @param {CompactOptions} [options]
   * @returns {Promise<void>}
   */
  async nearBudget(sessionId, options = {}) {
    checkSession(sessionId);
    await this.#publishRequest(sessionId, "near_budget", { requestId: randomUUID(), ...options });
  }

  /**
   * The session's result events as they are published, as an async
   * iterator of {type, id, data} (type "CompactionCompleted" or
   * "CompactionFailed"); it ends with return(), break, or the signal.
   * @param {string} sessionId
   * @param {{ signal?: AbortSignal }} [options]
   * @returns {AsyncIterableIterator<ResultEvent> & { return(): Promise<IteratorResult<ResultEvent>> }}
   */
  results(sessionId, { signal } = {}) {
    checkSession(sessionId);
    return this.#events([EventSubjects.CompactionCompleted + sessionId, EventSubjects.CompactionFailed + sessionId], signal);
  }

  /**
   * Calls handler with each circuit event of a session (every session's
   * for "" or undefined): {type: "CompactionCircuitOpened" |
   * "CompactionCircuitClosed", sessionId, data}. Returns a subscription:
   * unsubscribe() stops at once, drain() once the events received are
   * handled.
   * @param {string | undefined} sessionId
   * @param {(event: CircuitEvent) => void} handler
   * @returns {CircuitSubscription}
   */
  subscribeCircuit(sessionId, handler) {
    const tok = sessionId ? (checkSession(sessionId), sessionId) : "*";
    if (typeof handler !== "function") throw new CompactorError("subscribeCircuit needs a handler");
    const subs = [EventSubjects.CompactionCircuitOpened + tok, EventSubjects.CompactionCircuitClosed + tok].map((subject) =>
      this.#nc.subscribe(subject, {
        callback: (err, msg) => {
          if (err) return;
          let ev;
          try {
            ev = decodeEvent(msg);
          } catch {
            return; // not an event
          }
          handler({ type: ev.type, sessionId: ev.subject, data: ev.data });
        },
      }),
    );
    return {
      unsubscribe: () => subs.forEach((s) => s.unsubscribe()),
      drain: () => Promise.all(subs.map((s) => s.drain())).then(() => undefined),
      closed: Promise.all(subs.map((s) => s.closed)).then(() => undefined),
    };
  }

  /** An async iterator over the events on subjects. */
  #events(subjects, signal) {
    const queue = [];
    let wake = null;
    let done = false;
    const push = (item) => {
      queue.push(item);
      wake?.();
    };
    const subs = subjects.map((subject) =>
      this.#nc.subscribe(subject, {
        callback: (err, msg) => {
          if (err) return;
          try {
            push(decodeEvent(msg));
          } catch {
            // not an event
          }
        },
      }),
    );
    const finish = () => {
      if (!done) {
        done = true;
        subs.forEach((s) => s.unsubscribe());
        wake?.();
      }
    };
    signal?.addEventListener("abort", finish, { once: true });
    return {
      [Symbol.asyncIterator]() {
        return this;
      },
      async next() {
        for (;;) {
          if (queue.length) return { value: queue.shift(), done: false };
          if (done) return { value: undefined, done: true };
          await new Promise((resolve) => (wake = resolve));
          wake = null;
        }
      },
      async return() {
        finish();
        queue.length = 0;
        return { value: undefined, done: true };
      },
    };
  }
}

function endpointError(subject, { code, message, body }) {
  if (code === 404) return new NotFoundError(subject, code, message, body);
  if (code === 409) return new ConflictError(subject, code, message, body);
  if (code === 507) return new StorageFullError(subject, code, message, body);
  return new EndpointError(subject, code, message, body);
}

/**
 * RecallTools in the OpenAI Chat Completions tools format.
 * @returns {{ type: "function"; function: { name: string; description: string; parameters: Record<string, unknown> } }[]}
 */
export function openAITools() {
  return RecallTools.map((t) => ({ type: "function", function: { name: t.name, description: t.description, parameters: t.parameters } }));
}

/**
 * RecallTools in the Anthropic Messages tools format.
 * @returns {{ name: string; description: string; input_schema: Record<string, unknown> }[]}
 */
export function anthropicTools() {
  return RecallTools.map((t) => ({ name: t.name, description: t.description, input_schema: t.parameters }));
}
