// Anthropic Messages requests -> the internal (chat-shaped) request. Each problem is a 400 with
// our stable code and a `param` naming the Messages field path (`messages[1].content[0].type`),
// so a client sees its own field names, not the internal ones. The client's own body is kept
// (`native`) for upstreams that speak Messages themselves.

import type { ChatMessage, ChatRequest, ContentPart, ToolCall } from '../../hub/chat.js';
import { isValidImageUrl } from '../../hub/validate.js';
import { badValue, missing, unsupported, wrongType } from '../../hub/params.js';
import { GatewayError } from '../../errors.js';
import { ASSISTANT_BLOCK_TYPES, TOOL_CHOICE_TYPES, USER_BLOCK_TYPES } from '../../hub/anthropic.js';

type Obj = Record<string, unknown>;

function isObj(v: unknown): v is Obj {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

function str(o: Obj, key: string, path: string, required = true): string | undefined {
  const v = o[key];
  if (v === undefined || v === null) {
    if (required) throw missing(path);
    return undefined;
  }
  if (typeof v !== 'string') throw wrongType(path, 'a string');
  return v;
}

function num(o: Obj, key: string, min: number, max: number, integer: boolean): number | undefined {
  const v = o[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number') throw wrongType(key, integer ? 'an integer' : 'a number');
  if (!Number.isFinite(v) || v < min || v > max || (integer && !Number.isInteger(v))) {
    throw badValue(key, `must be ${integer ? 'an integer' : 'a number'} from ${min} to ${max}`);
  }
  return v;
}

function imagePart(block: Obj, path: string): ContentPart {
  const source = block.source;
  if (source === undefined) throw missing(`${path}.source`);
  if (!isObj(source)) throw wrongType(`${path}.source`, 'an object');
  let url: string;
  if (source.type === 'base64') {
    const media = str(source, 'media_type', `${path}.source.media_type`)!;
    const data = str(source, 'data', `${path}.source.data`)!;
    url = `data:${media};base64,${data}`;
  } else if (source.type === 'url') {
    url = str(source, 'url', `${path}.source.url`)!;
  } else {
    throw unsupported(`${path}.source.type`, source.type, ['base64', 'url']);
  }
  if (!isValidImageUrl(url)) {
    throw new GatewayError('invalid_image_url', `Invalid image at '${path}.source': an https URL or base64 PNG, JPEG, GIF or WebP data.`, {
      param: `${path}.source`,
    });
  }
  return { type: 'image_url', image_url: { url } };
}

function textOfBlocks(blocks: unknown[], path: string, images: ContentPart[]): string {
  const texts: string[] = [];
  blocks.forEach((b, i) => {
    const p = `${path}[${i}]`;
    if (!isObj(b)) throw wrongType(p, 'an object');
    if (b.type === 'text') texts.push(str(b, 'text', `${p}.text`)!);
    else if (b.type === 'image') images.push(imagePart(b, p));
    else throw unsupported(`${p}.type`, b.type, ['text', 'image']);
  });
  return texts.join('\n');
}

interface Acc { messages: ChatMessage[]; images: number }

function userTurn(content: unknown[], path: string, acc: Acc): void {
  const parts: ContentPart[] = [];
  content.forEach((b, j) => {
    const p = `${path}[${j}]`;
    if (!isObj(b)) throw wrongType(p, 'an object');
    switch (b.type) {
      case 'text': parts.push({ type: 'text', text: str(b, 'text', `${p}.text`)! }); break;
      case 'image': parts.push(imagePart(b, p)); acc.images++; break;
      case 'tool_result': {
        const id = str(b, 'tool_use_id', `${p}.tool_use_id`)!;
        const images: ContentPart[] = [];
        const c = b.content;
        let text = '';
        if (typeof c === 'string') text = c;
        else if (Array.isArray(c)) text = textOfBlocks(c, `${p}.content`, images);
        else if (c !== undefined && c !== null) throw wrongType(`${p}.content`, 'a string or an array of blocks');
        if (b.is_error === true && !text.startsWith('Error')) text = `Error: ${text}`;
        // Tool results answer the assistant's calls, so they come first, as chat tool messages;
        // images a tool returned travel with the user's turn.
        acc.messages.push({ role: 'tool', tool_call_id: id, content: text });
        acc.images += images.length;
        parts.push(...images);
        break;
      }
      default: throw unsupported(`${p}.type`, b.type, USER_BLOCK_TYPES);
    }
  });
  if (parts.length > 0) acc.messages.push({ role: 'user', content: parts });
}

function assistantTurn(content: unknown[], path: string, acc: Acc): void {
  const texts: string[] = [];
  const calls: ToolCall[] = [];
  content.forEach((b, j) => {
    const p = `${path}[${j}]`;
    if (!isObj(b)) throw wrongType(p, 'an object');
    switch (b.type) {
      case 'text': texts.push(str(b, 'text', `${p}.text`)!); break;
      case 'tool_use': {
        const id = str(b, 'id', `${p}.id`)!;
        const name = str(b, 'name', `${p}.name`)!;
        if (b.input !== undefined && !isObj(b.input)) throw wrongType(`${p}.input`, 'an object');
        calls.push({ id, type: 'function', function: { name, arguments: JSON.stringify(b.input ?? {}) } });
        break;
      }
      case 'thinking': case 'redacted_thinking': break; // the upstream's own; not resent
      default: throw unsupported(`${p}.type`, b.type, ASSISTANT_BLOCK_TYPES);
    }
  });
  const m: ChatMessage = { role: 'assistant', content: texts.length > 0 ? texts.join('') : null };
  if (calls.length > 0) m.tool_calls = calls;
  acc.messages.push(m);
}

function system(v: unknown): string | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v === 'string') return v;
  if (!Array.isArray(v)) throw wrongType('system', 'a string or an array of text blocks');
  return v.map((b, i) => {
    if (!isObj(b)) throw wrongType(`system[${i}]`, 'an object');
    if (b.type !== 'text') throw unsupported(`system[${i}].type`, b.type, ['text']);
    return str(b, 'text', `system[${i}].text`)!;
  }).join('\n');
}

function tools(v: unknown): unknown[] | undefined {
  if (v === undefined || v === null) return undefined;
  if (!Array.isArray(v)) throw wrongType('tools', 'an array');
  return v.map((t, i) => {
    const p = `tools[${i}]`;
    if (!isObj(t)) throw wrongType(p, 'an object');
    if (t.type !== undefined && t.type !== null && t.type !== 'custom') throw unsupported(`${p}.type`, t.type, ['custom']);
    const name = str(t, 'name', `${p}.name`)!;
    const description = str(t, 'description', `${p}.description`, false);
    if (t.input_schema === undefined) throw missing(`${p}.input_schema`);
    if (!isObj(t.input_schema)) throw wrongType(`${p}.input_schema`, 'an object');
    const fn: Obj = { name, parameters: t.input_schema };
    if (description !== undefined) fn.description = description;
    return { type: 'function', function: fn };
  });
}

/** tool_choice -> chat's tool_choice and parallel_tool_calls. */
function toolChoice(v: unknown, out: Obj): void {
  if (v === undefined || v === null) return;
  if (!isObj(v)) throw wrongType('tool_choice', 'an object');
  switch (v.type) {
    case 'auto': out.tool_choice = 'auto'; break;
    case 'any': out.tool_choice = 'required'; break;
    case 'none': out.tool_choice = 'none'; break;
    case 'tool': out.tool_choice = { type: 'function', function: { name: str(v, 'name', 'tool_choice.name')! } }; break;
    default: throw unsupported('tool_choice.type', v.type, TOOL_CHOICE_TYPES);
  }
  if (v.disable_parallel_tool_use === true) out.parallel_tool_calls = false;
}

/** The client's Messages body, and the headers an upstream speaking Messages gets too. */
export interface NativeMessages { body: Obj; headers: Record<string, string> }

/**
 * Parses a Messages body. `countOnly`: POST /v1/messages/count_tokens, where max_tokens is not
 * asked for.
 */
export function parseMessages(body: unknown, countOnly = false): ChatRequest {
  if (!isObj(body)) throw wrongType('body', 'a JSON object');
  const model = str(body, 'model', 'model')!;
  if (model === '') throw badValue('model', 'must not be empty');
  if (!countOnly && (body.max_tokens === undefined || body.max_tokens === null)) throw missing('max_tokens');
  const maxTokens = num(body, 'max_tokens', 1, Number.MAX_SAFE_INTEGER, true);
  const stream = body.stream ?? false;
  if (typeof stream !== 'boolean') throw wrongType('stream', 'a boolean');

  const acc: Acc = { messages: [], images: 0 };
  const sys = system(body.system);
  if (sys !== undefined && sys !== '') acc.messages.push({ role: 'system', content: sys });
  if (body.messages === undefined || body.messages === null) throw missing('messages');
  if (!Array.isArray(body.messages)) throw wrongType('messages', 'an array');
  if (body.messages.length === 0) throw badValue('messages', 'must contain at least one message');
  body.messages.forEach((m, i) => {
    const p = `messages[${i}]`;
    if (!isObj(m)) throw wrongType(p, 'an object');
    if (m.role === undefined) throw missing(`${p}.role`);
    if (m.role !== 'user' && m.role !== 'assistant') throw unsupported(`${p}.role`, m.role, ['user', 'assistant']);
    const content = m.content;
    if (content === undefined || content === null) throw missing(`${p}.content`);
    if (typeof content === 'string') acc.messages.push({ role: m.role, content });
    else if (!Array.isArray(content)) throw wrongType(`${p}.content`, 'a string or an array of content blocks');
    else if (m.role === 'user') userTurn(content, `${p}.content`, acc);
    else assistantTurn(content, `${p}.content`, acc);
  });

  // The chat-shaped body whose known fields the providers forward.
  const out: Obj = { model, messages: acc.messages };
  if (maxTokens !== undefined) out.max_tokens = maxTokens;
  const t = num(body, 'temperature', 0, 1, false);
  if (t !== undefined) out.temperature = t;
  const p = num(body, 'top_p', 0, 1, false);
  if (p !== undefined) out.top_p = p;
  const k = num(body, 'top_k', 0, Number.MAX_SAFE_INTEGER, true);
  if (k !== undefined) out.top_k = k;
  const stops = body.stop_sequences;
  if (stops !== undefined && stops !== null) {
    if (!Array.isArray(stops)) throw wrongType('stop_sequences', 'an array of strings');
    stops.forEach((s, i) => { if (typeof s !== 'string') throw wrongType(`stop_sequences[${i}]`, 'a string'); });
    if (stops.length > 0) out.stop = stops;
  }
  const defs = tools(body.tools);
  if (defs !== undefined && defs.length > 0) out.tools = defs;
  toolChoice(body.tool_choice, out);
  const meta = body.metadata;
  if (meta !== undefined && meta !== null) {
    if (!isObj(meta)) throw wrongType('metadata', 'an object');
    const user = str(meta, 'user_id', 'metadata.user_id', false);
    if (user !== undefined) out.user = user;
  }
  if (stream) out.stream = true;
  return {
    model, messages: acc.messages, stream, includeUsage: true, maxOutputTokens: maxTokens, imageCount: acc.images, body: out,
  };
}
