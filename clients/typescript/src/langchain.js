// The LangChain.js adapter: an agent middleware that takes the place of
// summarizationMiddleware, backed by the compactor. Before each model call
// it stores the agent's new messages in the session and, when a trigger
// condition holds, has the service compact the session and replaces the
// agent's messages with the service's context (system prompt, summary,
// recent turns, cleared tool outputs as placeholders). The whole history
// stays in the service (compactor session show).
//
//   import { createAgent } from "langchain";
//   import { compactorMiddleware } from "@compactor/client/langchain";
//   const agent = createAgent({ model, tools, middleware: [
//     compactorMiddleware({ client, sessionId: "thread-42", contextLimit: 128_000, trigger: { tokens: 100_000 } })] });

import { randomUUID } from "node:crypto";
import { createMiddleware } from "langchain";
import { AIMessage, HumanMessage, RemoveMessage, SystemMessage, ToolMessage } from "@langchain/core/messages";

import { tool } from "@langchain/core/tools";

import { RecallTools } from "./contract.js";
import { CompactorError } from "./errors.js";

/** @import { StructuredToolInterface } from "@langchain/core/tools" */
/** @import { BaseMessage } from "@langchain/core/messages" */
/** @import { AgentMiddleware } from "langchain" */
/** @import { CompactorClient } from "./index.js" */
/** @import { Completed, Message } from "./types.js" */

/**
 * A trigger condition, as summarizationMiddleware reads it: all that are
 * given must hold.
 * @typedef {object} ContextSize
 * @property {number} [tokens]
 * @property {number} [messages]
 * @property {number} [fraction] A share of contextLimit.
 */

/**
 * @typedef {object} CompactorMiddlewareOptions
 * @property {CompactorClient} client
 * @property {string | ((runtime: unknown) => string)} sessionId The session: a string, or a function of the agent's runtime (e.g. its thread id).
 * @property {number} contextLimit The model's window: the service compacts under it.
 * @property {ContextSize | ContextSize[]} [trigger] One condition, or a list of which any must hold (default {tokens: contextLimit}).
 * @property {string} [model] The session's model, for the service's token count (default "gpt-4o").
 * @property {(messages: BaseMessage[]) => number | Promise<number>} [tokenCounter] Counts the agent's messages for the trigger instead of the service's count.
 * @property {(completed: Completed) => void} [onCompaction] Called after each compaction.
 */

// LangGraph's id of a RemoveMessage that clears the state's messages.
const REMOVE_ALL_MESSAGES = "__remove_all__";
// What marks the service's summary in the agent's messages.
const SOURCE = "compactor";

function kind(m) {
  return typeof m.getType === "function" ? m.getType() : m._getType();
}

function textOf(content) {
  if (content == null) return "";
  if (typeof content === "string") return content;
  return content
    .filter((p) => p.type === "text")
    .map((p) => p.text)
    .join("\n");
}

/**
 * The compactor's message (OpenAI's chat format) of a LangChain message.
 * @param {BaseMessage} m
 * @returns {Message}
 */
export function fromLangChain(m) {
  const id = m.id;
  switch (kind(m)) {
    case "system":
      return { id, role: "system", content: textOf(m.content) };
    case "human":
      return {
        id,
        role: "user",
        content:
          typeof m.content === "string"
            ? m.content
            : m.content.map((p) => (p.type === "image_url" ? { type: "image_url", image_url: typeof p.image_url === "string" ? { url: p.image_url } : p.image_url } : { type: "text", text: p.text ?? JSON.stringify(p) })),
      };
    case "ai": {
      const calls = (m.tool_calls ?? []).map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: JSON.stringify(c.args ?? {}) } }));
      const out = { id, role: "assistant", content: textOf(m.content) || (calls.length ? null : "") };
      if (calls.length) out.tool_calls = calls;
      return out;
    }
    case "tool":
      return { id, role: "tool", tool_call_id: m.tool_call_id, name: m.name, content: textOf(m.content) };
  }
  throw new CompactorError(`a LangChain message of type ${kind(m)} has no compactor form`);
}

/**
 * The LangChain messages of the compactor's context; the summary is marked.
 * @param {Message[]} messages
 * @returns {BaseMessage[]}
 */
export function toLangChain(messages) {
  return messages.map((m) => {
    const content = typeof m.content === "string" || m.content == null ? (m.content ?? "") : m.content;
    switch (m.role) {
      case "system":
        return new SystemMessage({ id: m.id, content });
      case "user":
        return new HumanMessage({ id: m.id, content, additional_kwargs: m.is_compaction ? { lc_source: SOURCE, compaction_id: m.id } : {} });
      case "assistant":
        return new AIMessage({
          id: m.id,
          content: content ?? "",
          tool_calls: (m.tool_calls ?? []).map((c) => ({ id: c.id, name: c.function.name, args: parseArgs(c.function.arguments), type: "tool_call" })),
        });
      case "tool":
        return new ToolMessage({ id: m.id, content, tool_call_id: m.tool_call_id, name: m.name });
    }
    throw new CompactorError(`a message of role ${m.role} has no LangChain form`);
  });
}

function parseArgs(s) {
  try {
    return JSON.parse(s || "{}");
  } catch {
    return { input: s };
  }
}

/**
 * Whether a trigger holds, as summarizationMiddleware reads its trigger:
 * one condition ({tokens, messages, fraction}: all that are given must
 * hold) or a list of them (any must hold).
 */
function triggered(trigger, tokens, count, contextLimit) {
  const conditions = Array.isArray(trigger) ? trigger : [trigger];
  return conditions.some((c) => {
    let any = false;
    let met = true;
    if (c.tokens !== undefined) {
      any = true;
      met &&= tokens >= c.tokens;
    }
    if (c.messages !== undefined) {
      any = true;
      met &&= count >= c.messages;
    }
    if (c.fraction !== undefined) {
      any = true;
      met &&= tokens >= c.fraction * contextLimit;
    }
    return any && met;
  });
}

/**
 * An agent middleware for createAgent, a drop-in for
 * summarizationMiddleware backed by the compactor.
 *
 * options:
 * - client: a CompactorClient;
 * - sessionId: the session (a string, or a function of the agent's
 *   runtime, e.g. (runtime) => runtime.configurable?.thread_id);
 * - contextLimit: the model's window (the service compacts under it);
 * - trigger: as summarizationMiddleware's ({tokens}, {messages},
 *   {fraction} of contextLimit, or a list of such; default {tokens:
 *   contextLimit}), judged on the service's count of the context, or on
 *   tokenCounter(messages) when given;
 * - model: the session's model, for the service's token count (default
 *   "gpt-4o");
 * - onCompaction(completed): called after each compaction.
 * summarizationMiddleware's keep and summary prompt have no place here:
 * the service keeps the recent turns its configuration says and writes
 * its own summary (with the ledger of files, commands and errors).
 * @param {CompactorMiddlewareOptions} options
 * @returns {AgentMiddleware}
 */
export function compactorMiddleware({ client, sessionId, contextLimit, trigger, model = "gpt-4o", tokenCounter, onCompaction } = {}) {
  if (!client || !sessionId || !(contextLimit > 0)) {
    throw new CompactorError("compactorMiddleware needs a client, a sessionId and a contextLimit");
  }
  const when = trigger ?? { tokens: contextLimit };
  const created = new Set();
  const stored = new Set();
  return createMiddleware({
    name: "CompactorMiddleware",
    beforeModel: async (state, runtime) => {
      const sid = typeof sessionId === "function" ? sessionId(runtime) : sessionId;
      if (!created.has(sid)) {
        await client.create(sid, { model, contextLimit });
        created.add(sid);
      }
      const fresh = [];
      for (const m of state.messages) {
        if (!m.id) m.id = randomUUID();
        const key = `${sid}\u0000${m.id}`;
        if (stored.has(key) || m.additional_kwargs?.lc_source === SOURCE) continue;
        fresh.push(fromLangChain(m));
        stored.add(key);
      }
      if (fresh.length) await client.append(sid, fresh);
      const view = await client.context(sid);
      const tokens = tokenCounter ? await tokenCounter(state.messages) : view.tokens;
      if (!triggered(when, tokens, state.messages.length, contextLimit)) return undefined;
      const done = await client.compact(sid, { contextLimit, requestedTokens: tokens, messageCount: state.messages.length });
      onCompaction?.(done);
      const after = await client.context(sid);
      if (!after.compaction_id) return undefined;
      return { messages: [new RemoveMessage({ id: REMOVE_ALL_MESSAGES }), ...toLangChain(after.messages)] };
    },
  });
}

/**
 * The recall tools for LangChain.js: search_history and expand_history,
 * bound to one session, for createAgent's tools; each answers what the
 * endpoint answers, as JSON.
 * @param {{ client: CompactorClient; sessionId: string }} options
 * @returns {StructuredToolInterface[]}
 */
export function recallTools({ client, sessionId } = {}) {
  if (!client || !sessionId) throw new CompactorError("recallTools needs a client and a sessionId");
  return RecallTools.map((t) =>
    tool(async (args) => JSON.stringify(await client.runTool(sessionId, t.name, args)), { name: t.name, description: t.description, schema: t.parameters }),
  );
}
