// What CONTRACT section 4 says a chat request body must get, computed from the body alone:
// the set of acceptable outcomes. An outcome is "ok" or "code:param". `definite` are errors
// the contract requires (any one of them, when several apply); `optional` are readings the
// contract leaves open (e.g. null where a value is optional); `semantic` are the outcomes of
// a valid body (model, plan, images, context, credits).

import { depthOf, hasPollutingKey } from './arbitraries.js';

export interface Outcomes { definite: Set<string>; optional: Set<string>; semantic: Set<string> }

const ROLES = new Set(['system', 'developer', 'user', 'assistant', 'tool']);
const DETAIL = new Set(['auto', 'low', 'high']);
const MIN_SAFE = Number.MIN_SAFE_INTEGER;
const MAX_SAFE = Number.MAX_SAFE_INTEGER;

const isObject = (v: unknown): v is Record<string, any> => v !== null && typeof v === 'object' && !Array.isArray(v);
const absent = (v: unknown) => v === undefined || v === null;

/** https: with a host, or a well-formed base64 data URL of png, jpeg, gif or webp. */
export function contractImageUrl(url: string): boolean {
  if (url.startsWith('https://')) {
    try { return new URL(url).hostname !== ''; } catch { return false; }
  }
  const m = /^data:image\/(?:png|jpeg|gif|webp);base64,([A-Za-z0-9+/]+={0,2})$/.exec(url);
  return m !== null && m[1]!.length % 4 === 0;
}

export interface ModelShape { id: string; paid_only: boolean; vision: boolean; max_images: number; context_window: number; max_output_tokens: number }
export interface Catalog { models: ModelShape[]; auto: string[] }

export function outcomes(text: string, paidPlan: boolean, catalog: Catalog, lowWallet: boolean): Outcomes {
  const definite = new Set<string>();
  const optional = new Set<string>();
  const semantic = new Set<string>();
  let body: unknown;
  try {
    if (text === '') throw new Error('empty');
    body = JSON.parse(text);
  } catch {
    definite.add('invalid_json');
    return { definite, optional, semantic };
  }
  if (depthOf(body) > 64 || hasPollutingKey(body)) {
    definite.add('invalid_json');
    return { definite, optional, semantic };
  }
  if (!isObject(body)) {
    definite.add('invalid_type:(body)');
    return { definite, optional, semantic };
  }
  const err = (tag: string) => definite.add(tag);

  if (body.model === undefined) err('missing_required_parameter:model');
  else if (typeof body.model !== 'string') err('invalid_type:model');
  else if (body.model === '') err('invalid_value:model');

  let images = 0;
  const messages = body.messages;
  if (messages === undefined) err('missing_required_parameter:messages');
  else if (messages === null) { err('invalid_type:messages'); optional.add('missing_required_parameter:messages'); }
  else if (!Array.isArray(messages)) err('invalid_type:messages');
  else if (messages.length === 0) err('invalid_value:messages');
  else messages.forEach((m, i) => { images += message(m, `messages[${i}]`, err, optional); });

  const int = (key: string, min: number, max = MAX_SAFE) => {
    const v = body[key];
    if (absent(v)) return;
    if (typeof v !== 'number') err(`invalid_type:${key}`);
    else if (!Number.isInteger(v) || v < min || v > max) err(`invalid_value:${key}`);
  };
  const num = (key: string, min: number, max: number) => {
    const v = body[key];
    if (absent(v)) return;
    if (typeof v !== 'number') err(`invalid_type:${key}`);
    else if (!Number.isFinite(v) || v < min || v > max) err(`invalid_value:${key}`);
  };
  const typed = (key: string, test: (v: unknown) => boolean) => {
    if (!absent(body[key]) && !test(body[key])) err(`invalid_type:${key}`);
  };
  int('max_tokens', 1);
  int('max_completion_tokens', 1);
  int('n', 1, 1);
  int('seed', MIN_SAFE);
  int('top_logprobs', 0); // its upper limit is the upstream's to enforce (CONTRACT section 10)
  num('temperature', 0, 2);
  num('top_p', 0, 1);
  num('presence_penalty', -2, 2);
  num('frequency_penalty', -2, 2);
  for (const k of ['logprobs', 'parallel_tool_calls', 'stream']) typed(k, (v) => typeof v === 'boolean');
  typed('tools', Array.isArray);
  typed('tool_choice', (v) => typeof v === 'string' || isObject(v));
  typed('response_format', isObject);
  typed('logit_bias', isObject);
  typed('user', (v) => typeof v === 'string');
  const stop = body.stop;
  if (Array.isArray(stop)) stop.forEach((s, i) => { if (typeof s !== 'string') err(`invalid_type:stop[${i}]`); });
  else typed('stop', (v) => typeof v === 'string');
  const so = body.stream_options;
  if (!absent(so)) {
    if (!isObject(so)) err('invalid_type:stream_options');
    else if (!absent(so.include_usage) && typeof so.include_usage !== 'boolean') err('invalid_type:stream_options.include_usage');
  }

  if (definite.size === 0 && typeof body.model === 'string' && Array.isArray(messages)) {
    semanticOutcomes(body, messages, images, paidPlan, catalog, lowWallet, semantic);
  }
  return { definite, optional, semantic };
}

function message(m: unknown, path: string, err: (t: string) => void, optional: Set<string>): number {
  if (!isObject(m)) { err(`invalid_type:${path}`); return 0; }
  const role = m.role;
  if (role === undefined) err(`missing_required_parameter:${path}.role`);
  else if (typeof role !== 'string') err(`invalid_type:${path}.role`);
  else if (!ROLES.has(role)) err(`unsupported_value:${path}.role`);
  const known = typeof role === 'string' && ROLES.has(role) ? role : undefined;
  let images = 0;
  const content = m.content;
  if (absent(content)) {
    const calls = Array.isArray(m.tool_calls) && m.tool_calls.length > 0;
    if (known !== 'assistant' || (content === undefined && !calls)) {
      if (known !== undefined) err(`missing_required_parameter:${path}.content`);
      if (content === null) optional.add(`invalid_type:${path}.content`);
    }
  } else if (Array.isArray(content)) {
    content.forEach((part, j) => { images += contentPart(part, `${path}.content[${j}]`, known, err); });
  } else if (typeof content !== 'string') {
    err(`invalid_type:${path}.content`);
  }
  if (m.name !== undefined && typeof m.name !== 'string') {
    if (m.name === null) optional.add(`invalid_type:${path}.name`);
    else err(`invalid_type:${path}.name`);
  }
  // tool_calls is a field of the chat format whatever the role: a malformed one is refused.
  if (!absent(m.tool_calls)) toolCalls(m.tool_calls, `${path}.tool_calls`, err);
  if (known === 'tool') {
    if (m.tool_call_id === undefined) err(`missing_required_parameter:${path}.tool_call_id`);
    else if (typeof m.tool_call_id !== 'string') err(`invalid_type:${path}.tool_call_id`);
  } else if (m.tool_call_id !== undefined && typeof m.tool_call_id !== 'string') {
    optional.add(`invalid_type:${path}.tool_call_id`);
  }
  return images;
}

function contentPart(part: unknown, pp: string, role: string | undefined, err: (t: string) => void): number {
  if (!isObject(part)) { err(`invalid_type:${pp}`); return 0; }
  if (part.type === undefined) { err(`missing_required_parameter:${pp}.type`); return 0; }
  if (typeof part.type !== 'string') { err(`invalid_type:${pp}.type`); return 0; }
  if (part.type === 'text') {
    if (part.text === undefined) err(`missing_required_parameter:${pp}.text`);
    else if (typeof part.text !== 'string') err(`invalid_type:${pp}.text`);
    return 0;
  }
  if (part.type !== 'image_url') { if (role !== undefined) err(`unsupported_value:${pp}.type`); return 0; }
  // Only user messages carry images in the chat format; elsewhere the part type is refused.
  if (role !== undefined && role !== 'user') err(`unsupported_value:${pp}.type`);
  const img = part.image_url;
  if (img === undefined) { err(`missing_required_parameter:${pp}.image_url`); return 0; }
  if (!isObject(img)) { err(`invalid_type:${pp}.image_url`); return 0; }
  let ok = true;
  if (img.url === undefined) { err(`missing_required_parameter:${pp}.image_url.url`); ok = false; }
  else if (typeof img.url !== 'string') { err(`invalid_type:${pp}.image_url.url`); ok = false; }
  else if (!contractImageUrl(img.url)) { err(`invalid_image_url:${pp}.image_url.url`); ok = false; }
  if (img.detail !== undefined) {
    if (typeof img.detail !== 'string') err(`invalid_type:${pp}.image_url.detail`);
    else if (!DETAIL.has(img.detail)) err(`unsupported_value:${pp}.image_url.detail`);
  }
  return ok && role === 'user' ? 1 : 0;
}

function toolCalls(calls: unknown, path: string, err: (t: string) => void): void {
  if (!Array.isArray(calls)) { err(`invalid_type:${path}`); return; }
  calls.forEach((c, k) => {
    const cp = `${path}[${k}]`;
    if (!isObject(c)) { err(`invalid_type:${cp}`); return; }
    const field = (v: unknown, p: string, test: (v: unknown) => boolean, bad: string) => {
      if (v === undefined) err(`missing_required_parameter:${p}`);
      else if (!test(v)) err(`${bad}:${p}`);
    };
    field(c.id, `${cp}.id`, (v) => typeof v === 'string', 'invalid_type');
    if (c.type !== undefined && typeof c.type !== 'string') err(`invalid_type:${cp}.type`);
    else field(c.type, `${cp}.type`, (v) => v === 'function', 'unsupported_value');
    field(c.function, `${cp}.function`, isObject, 'invalid_type');
    if (isObject(c.function)) {
      field(c.function.name, `${cp}.function.name`, (v) => typeof v === 'string', 'invalid_type');
      field(c.function.arguments, `${cp}.function.arguments`, (v) => typeof v === 'string', 'invalid_type');
    }
  });
}

const utf8 = (s: unknown) => (typeof s === 'string' ? Buffer.byteLength(s) : 0);

/** Bounds of the prompt estimate: every token is at least one byte and at most one character run. */
function promptBounds(messages: any[], images: number): { lower: number; upper: number } {
  let upper = 3 + images * 85;
  for (const m of messages) {
    upper += 3 + utf8(m.name) + (m.name === undefined ? 0 : 1);
    if (typeof m.content === 'string') upper += utf8(m.content);
    else if (Array.isArray(m.content)) for (const p of m.content) upper += p.type === 'text' ? utf8(p.text) : 0;
    if (Array.isArray(m.tool_calls)) {
      for (const c of m.tool_calls) upper += 3 + utf8(c.function.name) + utf8(c.function.arguments);
    }
  }
  return { lower: 3 + 3 * messages.length + images * 85, upper };
}

function semanticOutcomes(body: Record<string, any>, messages: any[], images: number, paid: boolean, catalog: Catalog, lowWallet: boolean, out: Set<string>): void {
  const byId = new Map(catalog.models.map((m) => [m.id, m]));
  const requested = body.max_completion_tokens ?? body.max_tokens;
  const bounds = promptBounds(messages, images);
  const forModel = (m: ModelShape): void => {
    if (m.paid_only && !paid) { out.add('model_requires_paid_plan:model'); return; }
    if (images > 0 && !m.vision) { out.add('model_does_not_support_images:messages'); return; }
    if (images > m.max_images) { out.add('too_many_images:messages'); return; }
    const output = requested ?? m.max_output_tokens;
    if (bounds.lower + output > m.context_window) { out.add('context_length_exceeded:messages'); return; }
    if (bounds.upper + output > m.context_window) out.add('context_length_exceeded:messages');
    if (lowWallet) out.add('insufficient_credits');
    out.add('ok');
  };
  if (body.model === 'auto') {
    // The first candidate the plan, the images and the context window allow; its own checks
    // (max_images, credits) follow. Where the prompt estimate may or may not fit, both paths.
    const chosen = (m: ModelShape) => {
      if (images > m.max_images) { out.add('too_many_images:messages'); return; }
      if (lowWallet) out.add('insufficient_credits');
      out.add('ok');
    };
    const walk = (i: number, seen: { context: boolean; vision: boolean }): void => {
      if (i === catalog.auto.length) {
        out.add(seen.context ? 'context_length_exceeded:messages' : seen.vision ? 'model_does_not_support_images:messages' : 'model_requires_paid_plan:model');
        return;
      }
      const m = byId.get(catalog.auto[i]!)!;
      if (m.paid_only && !paid) { walk(i + 1, seen); return; }
      if (images > 0 && !m.vision) { walk(i + 1, { ...seen, vision: true }); return; }
      const output = requested ?? m.max_output_tokens;
      if (bounds.lower + output <= m.context_window) chosen(m);
      if (bounds.upper + output > m.context_window) walk(i + 1, { ...seen, context: true });
    };
    walk(0, { context: false, vision: false });
    return;
  }
  const m = byId.get(body.model);
  if (m === undefined) out.add('model_not_found:model');
  else forModel(m);
}

/** Does the answer's tag belong to the acceptable outcomes? */
export function acceptable(o: Outcomes, tag: string): boolean {
  const match = (set: Set<string>) => set.has(tag) || set.has(tag.split(':')[0]!);
  if (o.definite.size > 0) return match(o.definite) || match(o.optional);
  return match(o.optional) || match(o.semantic);
}
