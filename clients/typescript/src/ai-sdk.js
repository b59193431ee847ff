// The Vercel AI SDK adapter: a prepareStep for generateText and streamText
// that keeps the step's messages in the compactor and, when the context is
// over its window, has the service compact it and returns the compacted
// context for the step.
//
//   import { compactorPrepareStep } from "@compactor/client/ai-sdk";
//   await generateText({ model, tools, messages, stopWhen: stepCountIs(50),
//     prepareStep: compactorPrepareStep({ client, sessionId: "chat-42", contextLimit: 128_000 }) });

import { jsonSchema, tool } from "ai";

import { RecallTools } from "./contract.js";
import { CompactorError } from "./errors.js";

/** @import { ModelMessage, PrepareStepFunction, ToolSet } from "ai" */
/** @import { CompactorClient } from "./index.js" */
/** @import { Completed, Message } from "./types.js" */

/**
 * @typedef {object} CompactorPrepareStepOptions
 * @property {CompactorClient} client
 * @property {string} sessionId
 * @property {number} contextLimit The model's window, or the budget to keep the context under.
 * @property {string} [model] The session's model, for the service's token count (default "gpt-4o").
 * @property {number} [threshold] Compact when the context is over contextLimit times this (default 1).
 * @property {(completed: Completed) => void} [onCompaction] Called after each compaction.
 */

/**
 * The compactor's messages (OpenAI's chat format) of one AI SDK
 * ModelMessage: a tool message's results become one tool message each.
 * id names the message; a message that becomes several gets id.1, id.2...
 * @param {ModelMessage} m
 * @param {string} id
 * @returns {Message[]}
 */
export function fromModelMessage(m, id) {
  switch (m.role) {
    case "system":
      return [{ id, role: "system", content: m.content }];
    case "user":
      return [{ id, role: "user", content: typeof m.content === "string" ? m.content : m.content.map(userPart) }];
    case "assistant": {
      if (typeof m.content === "string") return [{ id, role: "assistant", content: m.content }];
      const text = m.content.filter((p) => p.type === "text").map((p) => p.text).join("\n");
      const calls = m.content
        .filter((p) => p.type === "tool-call")
        .map((p) => ({ id: p.toolCallId, type: "function", function: { name: p.toolName, arguments: JSON.stringify(p.input ?? {}) } }));
      const out = { id, role: "assistant", content: text || (calls.length ? null : "") };
      if (calls.length) out.tool_calls = calls;
      return [out];
    }
    case "tool":
      return m.content
        .filter((p) => p.type === "tool-result")
        .map((p, j) => ({ id: `${id}.${j + 1}`, role: "tool", tool_call_id: p.toolCallId, name: p.toolName, content: outputText(p.output) }));
  }
  throw new CompactorError(`a message of role ${JSON.stringify(m.role)} has no compactor form`);
}

function userPart(p) {
  switch (p.type) {
    case "text":
      return { type: "text", text: p.text };
    case "image": {
      const url = p.image instanceof URL ? p.image.href : typeof p.image === "string" && /^(https?|data):/.test(p.image) ? p.image : dataURL(p.image, p.mediaType ?? "image/png");
      return { type: "image_url", image_url: { url } };
    }
    case "file":
      return { type: "file", file: { filename: p.filename, file_data: p.data instanceof URL ? p.data.href : dataURL(p.data, p.mediaType) } };
  }
  return { type: "text", text: JSON.stringify(p) };
}

function dataURL(data, mediaType) {
  const b64 = typeof data === "string" ? data : Buffer.from(data).toString("base64");
  return `data:${mediaType};base64,${b64}`;
}

// A tool result's output as the text a chat message carries.
function outputText(o) {
  if (o == null) return "";
  switch (o.type) {
    case "text":
    case "error-text":
      return o.value;
    case "json":
    case "error-json":
      return JSON.stringify(o.value);
    case "content":
      return o.value.map((v) => (v.type === "text" ? v.text : JSON.stringify(v))).join("\n");
  }
  return typeof o === "string" ? o : JSON.stringify(o);
}

/**
 * The AI SDK's ModelMessages of the compactor's context: the summary is a
 * user message, cleared tool outputs keep their placeholders.
 * @param {Message[]} messages
 * @returns {ModelMessage[]}
 */
export function toModelMessages(messages) {
  const toolNames = new Map();
  const out = [];
  for (const m of messages) {
    switch (m.role) {
      case "system":
        out.push({ role: "system", content: textOf(m.content) });
        break;
      case "user":
        out.push({ role: "user", content: typeof m.content === "string" || m.content == null ? (m.content ?? "") : m.content.map(fromUserPart) });
        break;
      case "assistant": {
        const parts = [];
        const t = textOf(m.content);
        if (t) parts.push({ type: "text", text: t });
        for (const c of m.tool_calls ?? []) {
          toolNames.set(c.id, c.function.name);
          parts.push({ type: "tool-call", toolCallId: c.id, toolName: c.function.name, input: parseArgs(c.function.arguments) });
        }
        out.push({ role: "assistant", content: parts.length ? parts : "" });
        break;
      }
      case "tool": {
        const part = { type: "tool-result", toolCallId: m.tool_call_id, toolName: m.name || toolNames.get(m.tool_call_id) || "tool", output: { type: "text", value: textOf(m.content) } };
        // The results of one call's tools travel in one tool message.
        const last = out.at(-1);
        if (last?.role === "tool") last.content.push(part);
        else out.push({ role: "tool", content: [part] });
        break;
      }
    }
  }
  return out;
}

function fromUserPart(p) {
  if (p.type === "text") return { type: "text", text: p.text };
  if (p.type === "image_url") return { type: "image", image: new URL(p.image_url.url) };
  return { type: "text", text: JSON.stringify(p) };
}

function textOf(content) {
  if (content == null) return "";
  if (typeof content === "string") return content;
  return content.filter((p) => p.type === "text").map((p) => p.text).join("\n");
}

function parseArgs(s) {
  try {
    return JSON.parse(s || "{}");
  } catch {
    return s;
  }
}

/**
 * A prepareStep that keeps the step's messages in the compactor session
 * sessionId and, when the service's count of its context is over
 * contextLimit (times threshold), asks for a compaction and returns the
 * compacted context as the step's messages. Before any compaction it
 * returns {} and the step runs on its own messages.
 *
 * Each message is stored under an id made of its place in the step's
 * message list (the initial messages, then each step's response), so a
 * repeated call stores nothing twice. Pass the whole conversation to each
 * generateText call of one session (response.messages appended), as the
 * AI SDK expects anyway.
 *
 * options: client (a CompactorClient), sessionId, contextLimit (the
 * model's window, or the budget to keep under), model (the session's
 * model for the service's token count, default "gpt-4o"), threshold
 * (default 1), onCompaction(completed) (called after each compaction).
 * @template {ToolSet} [TOOLS=ToolSet]
 * @param {CompactorPrepareStepOptions} options
 * @returns {PrepareStepFunction<TOOLS>}
 */
export function compactorPrepareStep({ client, sessionId, contextLimit, model = "gpt-4o", threshold = 1, onCompaction } = {}) {
  if (!client || !sessionId || !(contextLimit > 0)) {
    throw new CompactorError("compactorPrepareStep needs a client, a sessionId and a contextLimit");
  }
  let created = false;
  let stored = 0;
  return async ({ messages }) => {
    if (!created) {
      await client.create(sessionId, { model, contextLimit });
      created = true;
    }
    if (messages.length > stored) {
      const fresh = messages.slice(stored).flatMap((m, i) => fromModelMessage(m, `m${stored + i}`));
      if (fresh.length) await client.append(sessionId, fresh);
      stored = messages.length;
    }
    let view = await client.context(sessionId);
    if (view.tokens > contextLimit * threshold) {
      const done = await client.compact(sessionId, { contextLimit, requestedTokens: view.tokens, messageCount: view.messages.length });
      onCompaction?.(done);
      view = await client.context(sessionId);
    }
    if (!view.compaction_id) return {};
    return { messages: toModelMessages(view.messages) };
  };
}

/**
 * The recall tools for the AI SDK: search_history and expand_history,
 * bound to one session, for generateText's and streamText's tools. A model
 * that needs what the summary left out calls them; each answers what the
 * endpoint answers (hits with snippets, or a page of messages).
 *
 *   tools: { ...myTools, ...recallTools({ client, sessionId: "chat-42" }) }
 * @param {{ client: CompactorClient; sessionId: string }} options
 * @returns {ToolSet}
 */
export function recallTools({ client, sessionId } = {}) {
  if (!client || !sessionId) throw new CompactorError("recallTools needs a client and a sessionId");
  const out = {};
  for (const t of RecallTools) {
    out[t.name] = tool({ description: t.description, inputSchema: jsonSchema(t.parameters), execute: (args) => client.runTool(sessionId, t.name, args) });
  }
  return out;
}
