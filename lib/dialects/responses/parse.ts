// Parses a Responses API request (POST /v1/responses) into the chat completions body that is the
// pipeline's internal form, then validates that with the chat validator: one set of rules for
// messages, images, tools and sampling, whatever dialect the client speaks. The Responses-only
// fields (store, previous_response_id, metadata, instructions) are returned beside it.

import type { ChatMessage, ChatRequest, ContentPart } from '../../hub/chat.js';
import { validateChatRequest } from '../../hub/validate.js';
import { GatewayError } from '../../errors.js';
import { isObject } from '../../objects.js';
import { missing, unsupported, wrongType } from '../../hub/params.js';

/** What the Responses dialect keeps about one request beyond the internal ChatRequest. */
export interface ResponsesInput {
  /** The messages of this request's own `input` (no instructions, no earlier turns). */
  input: ChatMessage[];
  instructions: string | null;
  store: boolean;
  previousResponseId: string | null;
  metadata: Record<string, string>;
  /** The request's settings, echoed in the response object. */
  echo: Record<string, unknown>;
}

function str(v: unknown, param: string): string {
  if (typeof v !== 'string') throw v === undefined ? missing(param) : wrongType(param, 'a string');
  return v;
}

const ROLES = ['user', 'assistant', 'system', 'developer'] as const;

/** A message item's content: a string, or input_text / input_image / output_text parts. */
function content(v: unknown, param: string, role: string): string | ContentPart[] {
  if (typeof v === 'string') return v;
  if (!Array.isArray(v)) throw wrongType(param, 'a string or an array of content parts');
  const parts: ContentPart[] = [];
  v.forEach((p, i) => {
    const at = `${param}[${i}]`;
    if (!isObject(p)) throw wrongType(at, 'an object');
    if (p.type === 'input_text' || p.type === 'output_text') parts.push({ type: 'text', text: str(p.text, `${at}.text`) });
    else if (p.type === 'input_image') {
      const url = str(p.image_url, `${at}.image_url`);
      const detail = p.detail === undefined || p.detail === null ? undefined : str(p.detail, `${at}.detail`);
      parts.push({ type: 'image_url', image_url: detail === undefined ? { url } : { url, detail } });
    } else throw unsupported(`${at}.type`, p.type, ['input_text', 'input_image', 'output_text']);
  });
  // An assistant turn is text only in the chat format.
  if (role === 'assistant') return parts.map((p) => (p.type === 'text' ? p.text : '')).join('');
  return parts;
}

/** `input` as chat messages: function calls join the assistant turn before them. */
function messages(input: unknown): ChatMessage[] {
  if (typeof input === 'string') return [{ role: 'user', content: input }];
  if (!Array.isArray(input)) throw input === undefined ? missing('input') : wrongType('input', 'a string or an array of items');
  const out: ChatMessage[] = [];
  input.forEach((item, i) => {
    const at = `input[${i}]`;
    if (!isObject(item)) throw wrongType(at, 'an object');
    const type = item.type ?? 'message';
    if (type === 'message') {
      const role = str(item.role, `${at}.role`);
      if (!(ROLES as readonly string[]).includes(role)) throw unsupported(`${at}.role`, role, ROLES);
      out.push({ role: role as ChatMessage['role'], content: content(item.content, `${at}.content`, role) });
    } else if (type === 'function_call') {
      const call = {
        id: str(item.call_id, `${at}.call_id`), type: 'function' as const,
        function: { name: str(item.name, `${at}.name`), arguments: str(item.arguments, `${at}.arguments`) },
      };
      const last = out[out.length - 1];
      if (last !== undefined && last.role === 'assistant') (last.tool_calls ??= []).push(call);
      else out.push({ role: 'assistant', content: null, tool_calls: [call] });
    } else if (type === 'function_call_output') {
      const output = item.output;
      const text = typeof output === 'string' ? output : Array.isArray(output)
        ? output.map((p) => (isObject(p) && typeof p.text === 'string' ? p.text : '')).join('')
        : (() => { throw wrongType(`${at}.output`, 'a string'); })();
      out.push({ role: 'tool', tool_call_id: str(item.call_id, `${at}.call_id`), content: text });
    } else if (type === 'reasoning') {
      // A reasoning item of an earlier answer, passed back as clients pass every output item
      // back: the chat format has no place for a model's past thinking, so it is left out.
    } else {
      throw unsupported(`${at}.type`, type, ['message', 'function_call', 'function_call_output', 'reasoning']);
    }
  });
  return out;
}

function tools(v: unknown): unknown {
  if (v === undefined || v === null) return undefined;
  if (!Array.isArray(v)) throw wrongType('tools', 'an array');
  return v.map((t, i) => {
    if (!isObject(t)) throw wrongType(`tools[${i}]`, 'an object');
    if (t.type !== 'function') throw unsupported(`tools[${i}].type`, t.type, ['function']);
    const fn: Record<string, unknown> = { name: str(t.name, `tools[${i}].name`) };
    if (t.description !== undefined && t.description !== null) fn.description = t.description;
    if (t.parameters !== undefined && t.parameters !== null) fn.parameters = t.parameters;
    if (t.strict !== undefined && t.strict !== null) fn.strict = t.strict;
    return { type: 'function', function: fn };
  });
}

function toolChoice(v: unknown): unknown {
  if (v === undefined || v === null || typeof v === 'string') return v ?? undefined;
  if (isObject(v) && v.type === 'function') return { type: 'function', function: { name: str(v.name, 'tool_choice.name') } };
  throw unsupported('tool_choice', v, ['none', 'auto', 'required', '{"type":"function","name":...}']);
}

/**
 * `text.format` -> chat's response_format: json_object as is, json_schema with its name, schema,
 * strict and description under `json_schema`; `text` (the default) asks for nothing. Returns the
 * chat field (undefined for plain text) and the `text` object the response echoes.
 */
function textFormat(v: unknown): { responseFormat: Record<string, unknown> | undefined; echo: Record<string, unknown> } {
  const plain = { format: { type: 'text' } };
  if (v === undefined || v === null) return { responseFormat: undefined, echo: plain };
  if (!isObject(v)) throw wrongType('text', 'an object');
  const f = v.format;
  if (f === undefined || f === null) return { responseFormat: undefined, echo: plain };
  if (!isObject(f)) throw wrongType('text.format', 'an object');
  if (f.type === 'text') return { responseFormat: undefined, echo: plain };
  if (f.type === 'json_object') return { responseFormat: { type: 'json_object' }, echo: { format: { type: 'json_object' } } };
  if (f.type !== 'json_schema') throw unsupported('text.format.type', f.type, ['text', 'json_object', 'json_schema']);
  const name = str(f.name, 'text.format.name');
  if (f.schema === undefined || f.schema === null) throw missing('text.format.schema');
  if (!isObject(f.schema)) throw wrongType('text.format.schema', 'an object');
  const schema: Record<string, unknown> = { name, schema: f.schema };
  if (f.strict !== undefined && f.strict !== null) {
    if (typeof f.strict !== 'boolean') throw wrongType('text.format.strict', 'a boolean');
    schema.strict = f.strict;
  }
  if (f.description !== undefined && f.description !== null) schema.description = str(f.description, 'text.format.description');
  return { responseFormat: { type: 'json_schema', json_schema: schema }, echo: { format: { type: 'json_schema', ...schema } } };
}

/**
 * `include`: extra data an OpenAI answer can carry (encrypted reasoning, logprobs, tool
 * results...). Tollgate has none of it to add; reasoning text is always in the reasoning item.
 * The field is checked for its type and otherwise accepted, like any field the route does not
 * act on.
 */
function include(v: unknown): void {
  if (v === undefined || v === null) return;
  if (!Array.isArray(v)) throw wrongType('include', 'an array of strings');
  v.forEach((x, i) => { if (typeof x !== 'string') throw wrongType(`include[${i}]`, 'a string'); });
}

function metadata(v: unknown): Record<string, string> {
  if (v === undefined || v === null) return {};
  if (!isObject(v)) throw wrongType('metadata', 'an object of strings');
  const entries = Object.entries(v);
  if (entries.length > 16) throw new GatewayError('invalid_value', "Invalid value for 'metadata': at most 16 keys.", { param: 'metadata' });
  for (const [k, val] of entries) {
    if (typeof val !== 'string') throw wrongType(`metadata.${k}`, 'a string');
    if (k.length > 64 || val.length > 512) {
      throw new GatewayError('invalid_value', "Invalid value for 'metadata': keys up to 64 and values up to 512 characters.", { param: 'metadata' });
    }
  }
  return v as Record<string, string>;
}

/** Parses a Responses request; `previous` (the stored conversation) is prepended by the dialect. */
export function parseResponses(body: unknown): { request: ChatRequest; extra: ResponsesInput } {
  if (!isObject(body)) throw wrongType('body', 'a JSON object');
  const instructions = body.instructions === undefined || body.instructions === null ? null : str(body.instructions, 'instructions');
  const input = messages(body.input);
  const storeFlag = body.store === undefined || body.store === null ? true : body.store;
  if (typeof storeFlag !== 'boolean') throw wrongType('store', 'a boolean');
  const prev = body.previous_response_id === undefined || body.previous_response_id === null
    ? null : str(body.previous_response_id, 'previous_response_id');
  const meta = metadata(body.metadata);
  const chat: Record<string, unknown> = {
    model: body.model,
    messages: instructions === null ? input : [{ role: 'system', content: instructions }, ...input],
  };
  if (body.max_output_tokens !== undefined && body.max_output_tokens !== null) chat.max_completion_tokens = body.max_output_tokens;
  for (const k of ['temperature', 'top_p', 'parallel_tool_calls', 'stream', 'user'] as const) {
    if (body[k] !== undefined && body[k] !== null) chat[k] = body[k];
  }
  const t = tools(body.tools);
  if (t !== undefined) chat.tools = t;
  const tc = toolChoice(body.tool_choice);
  if (tc !== undefined) chat.tool_choice = tc;
  const text = textFormat(body.text);
  if (text.responseFormat !== undefined) chat.response_format = text.responseFormat;
  include(body.include);
  let request: ChatRequest;
  try {
    request = validateChatRequest(chat);
  } catch (err) {
    // The chat validator names chat fields; say the Responses name where it differs.
    if (err instanceof GatewayError && err.param === 'max_completion_tokens') {
      throw new GatewayError(err.code, err.message.replaceAll('max_completion_tokens', 'max_output_tokens'), { param: 'max_output_tokens' });
    }
    throw err;
  }
  const echo = {
    instructions,
    text: text.echo,
    max_output_tokens: request.maxOutputTokens ?? null,
    temperature: typeof body.temperature === 'number' ? body.temperature : 1,
    top_p: typeof body.top_p === 'number' ? body.top_p : 1,
    parallel_tool_calls: typeof body.parallel_tool_calls === 'boolean' ? body.parallel_tool_calls : true,
    tool_choice: body.tool_choice ?? 'auto',
    tools: Array.isArray(body.tools)
      ? body.tools.map((x: Record<string, unknown>) => ({
        type: 'function', name: x.name, description: x.description ?? null, parameters: x.parameters ?? null, strict: x.strict ?? null,
      }))
      : [],
  };
  return { request, extra: { input, instructions, store: storeFlag, previousResponseId: prev, metadata: meta, echo } };
}
