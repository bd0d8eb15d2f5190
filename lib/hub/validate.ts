// Validates a chat completion request body. Each problem is a 400 whose `param` names the
// field path (`messages[1].content[0].type`). Unlisted fields are never rejected.

import { GatewayError } from '../errors.js';
import { isObject } from '../objects.js';
import { badValue, checkBoolean, checkInteger, checkIncludeUsage, checkNumber, checkStop, missing, unsupported, wrongType } from './params.js';
import type { ChatMessage, ChatRequest, Role } from './chat.js';

const ROLES: ReadonlySet<string> = new Set<Role>(['system', 'developer', 'user', 'assistant', 'tool']);
const IMAGE_DETAIL: ReadonlySet<string> = new Set(['auto', 'low', 'high']);

function checkOptional(body: Record<string, unknown>, key: string, test: (v: unknown) => boolean, expected: string): void {
  const v = body[key];
  if (v !== undefined && v !== null && !test(v)) throw wrongType(key, expected);
}

/** Image URLs: https:, or a well-formed base64 data URL of a common image type. */
const DATA_URL = /^data:image\/(?:png|jpeg|gif|webp);base64,/;
const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/;

export function isValidImageUrl(url: string): boolean {
  if (url.startsWith('https://')) {
    try {
      return new URL(url).hostname !== '';
    } catch {
      return false;
    }
  }
  const m = DATA_URL.exec(url);
  if (m === null) return false;
  const data = url.slice(m[0].length);
  return data.length > 0 && data.length % 4 === 0 && BASE64.test(data);
}

function validateContent(msg: Record<string, unknown>, path: string, role: string): number {
  const content = msg.content;
  if (content === undefined || content === null) {
    const hasToolCalls = Array.isArray(msg.tool_calls) && msg.tool_calls.length > 0;
    if (role === 'assistant' && (hasToolCalls || content === null)) return 0;
    throw missing(`${path}.content`);
  }
  if (typeof content === 'string') return 0;
  if (!Array.isArray(content)) throw wrongType(`${path}.content`, 'a string or an array of content parts');
  let images = 0;
  for (let j = 0; j < content.length; j++) {
    const part: unknown = content[j];
    const pp = `${path}.content[${j}]`;
    if (!isObject(part)) throw wrongType(pp, 'an object');
    if (part.type === undefined) throw missing(`${pp}.type`);
    if (typeof part.type !== 'string') throw wrongType(`${pp}.type`, 'a string');
    if (part.type === 'text') {
      if (part.text === undefined) throw missing(`${pp}.text`);
      if (typeof part.text !== 'string') throw wrongType(`${pp}.text`, 'a string');
    } else if (part.type === 'image_url') {
      if (role !== 'user') throw unsupported(`${pp}.type`, part.type, ['text']);
      const img = part.image_url;
      if (img === undefined) throw missing(`${pp}.image_url`);
      if (!isObject(img)) throw wrongType(`${pp}.image_url`, 'an object');
      if (img.url === undefined) throw missing(`${pp}.image_url.url`);
      if (typeof img.url !== 'string') throw wrongType(`${pp}.image_url.url`, 'a string');
      if (img.detail !== undefined) {
        if (typeof img.detail !== 'string') throw wrongType(`${pp}.image_url.detail`, 'a string');
        if (!IMAGE_DETAIL.has(img.detail)) throw unsupported(`${pp}.image_url.detail`, img.detail, IMAGE_DETAIL);
      }
      if (!isValidImageUrl(img.url)) {
        throw new GatewayError(
          'invalid_image_url',
          `Invalid image URL at '${pp}.image_url.url': use an https: URL or a base64 data:image/(png|jpeg|gif|webp) URL.`,
          { param: `${pp}.image_url.url` },
        );
      }
      images++;
    } else {
      throw unsupported(`${pp}.type`, part.type, role === 'user' ? ['text', 'image_url'] : ['text']);
    }
  }
  return images;
}

function validateToolCalls(msg: Record<string, unknown>, path: string): void {
  const calls = msg.tool_calls;
  if (calls === undefined || calls === null) return;
  if (!Array.isArray(calls)) throw wrongType(`${path}.tool_calls`, 'an array');
  for (let k = 0; k < calls.length; k++) {
    const c: unknown = calls[k];
    const cp = `${path}.tool_calls[${k}]`;
    if (!isObject(c)) throw wrongType(cp, 'an object');
    if (typeof c.id !== 'string') throw c.id === undefined ? missing(`${cp}.id`) : wrongType(`${cp}.id`, 'a string');
    if (c.type === undefined) throw missing(`${cp}.type`);
    if (typeof c.type !== 'string') throw wrongType(`${cp}.type`, 'a string');
    if (c.type !== 'function') throw unsupported(`${cp}.type`, c.type, ['function']);
    const fn = c.function;
    if (!isObject(fn)) throw fn === undefined ? missing(`${cp}.function`) : wrongType(`${cp}.function`, 'an object');
    if (typeof fn.name !== 'string') throw fn.name === undefined ? missing(`${cp}.function.name`) : wrongType(`${cp}.function.name`, 'a string');
    if (typeof fn.arguments !== 'string') {
      throw fn.arguments === undefined ? missing(`${cp}.function.arguments`) : wrongType(`${cp}.function.arguments`, 'a string');
    }
  }
}

function validateMessages(value: unknown): { messages: ChatMessage[]; images: number } {
  if (value === undefined) throw missing('messages');
  if (!Array.isArray(value)) throw wrongType('messages', 'an array');
  if (value.length === 0) throw badValue('messages', 'must contain at least one message');
  let images = 0;
  for (let i = 0; i < value.length; i++) {
    const msg: unknown = value[i];
    const path = `messages[${i}]`;
    if (!isObject(msg)) throw wrongType(path, 'an object');
    const role = msg.role;
    if (role === undefined) throw missing(`${path}.role`);
    if (typeof role !== 'string') throw wrongType(`${path}.role`, 'a string');
    if (!ROLES.has(role)) throw unsupported(`${path}.role`, role, ROLES);
    images += validateContent(msg, path, role);
    if (msg.name !== undefined && typeof msg.name !== 'string') throw wrongType(`${path}.name`, 'a string');
    // Any role's tool_calls reach the token estimate and the upstream: a malformed one is refused.
    validateToolCalls(msg, path);
    if (role === 'tool') {
      if (msg.tool_call_id === undefined) throw missing(`${path}.tool_call_id`);
      if (typeof msg.tool_call_id !== 'string') throw wrongType(`${path}.tool_call_id`, 'a string');
    }
  }
  return { messages: value as ChatMessage[], images };
}

/** Validates the body of POST /v1/chat/completions. */
export function validateChatRequest(body: unknown): ChatRequest {
  if (!isObject(body)) throw wrongType('(body)', 'a JSON object');
  if (body.model === undefined) throw missing('model');
  if (typeof body.model !== 'string') throw wrongType('model', 'a string');
  if (body.model === '') throw badValue('model', 'must not be empty');
  const { messages, images } = validateMessages(body.messages);

  const maxTokens = checkInteger(body, 'max_tokens', 1);
  const maxCompletion = checkInteger(body, 'max_completion_tokens', 1);
  checkNumber(body, 'temperature', 0, 2);
  checkNumber(body, 'top_p', 0, 1);
  checkNumber(body, 'presence_penalty', -2, 2);
  checkNumber(body, 'frequency_penalty', -2, 2);
  checkInteger(body, 'n', 1, 1);
  checkInteger(body, 'seed', Number.MIN_SAFE_INTEGER);
  // No OpenAI caps on top_logprobs or the number of stop sequences: model servers accept more,
  // and enforcing their own limits is theirs to do (CONTRACT section 10).
  checkInteger(body, 'top_logprobs', 0);
  checkBoolean(body, 'logprobs');
  checkBoolean(body, 'parallel_tool_calls');
  const stream = checkBoolean(body, 'stream') ?? false;

  checkStop(body);
  checkOptional(body, 'tools', Array.isArray, 'an array');
  checkOptional(body, 'tool_choice', (v) => typeof v === 'string' || isObject(v), 'a string or an object');
  checkOptional(body, 'response_format', isObject, 'an object');
  checkOptional(body, 'logit_bias', isObject, 'an object');
  checkOptional(body, 'user', (v) => typeof v === 'string', 'a string');

  const includeUsage = checkIncludeUsage(body);

  return {
    model: body.model,
    messages,
    stream,
    includeUsage: stream && includeUsage,
    maxOutputTokens: maxCompletion ?? maxTokens,
    imageCount: images,
    body,
  };
}
