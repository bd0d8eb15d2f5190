// The model catalog: slugs clients send, what each plan may use, and the answers of
// GET /v1/models, serialized once per config rather than per request.

import type { Config, ModelConfig, PlanConfig } from '../config/types.js';
import { retryAfterHeaders } from '../errors.js';
import { GatewayError, clip } from '../errors.js';
import { nearest } from './suggest.js';
import type { KeyPolicy } from '../auth/controls.js';

/** Model lists per plan and key allowlist, kept this many at most. */
const KEY_LISTS_KEPT = 1000;

export interface PublicModel {
  id: string;
  object: 'model';
  created: number;
  owned_by: string;
  type: ModelConfig['type'];
  context_window: number;
  max_output_tokens: number;
  supports_vision: boolean;
}

export class Catalog {
  readonly #models = new Map<string, ModelConfig>();
  readonly #public = new Map<string, string>();
  readonly #listJson: { free: string; paid: string };
  readonly #usable: { free: string[]; paid: string[] };
  readonly #auto: readonly string[];
  readonly #paidList: PublicModel[];
  readonly #freeList: PublicModel[];
  /** GET /v1/models answers for keys with a models allowlist, by plan kind and patterns. */
  readonly #keyLists = new Map<string, string>();

  /** The YAML's models, then discovered ones whose slug the YAML does not use. */
  constructor(config: Config, createdAt: number, discovered: readonly ModelConfig[]) {
    const free: PublicModel[] = [];
    const paid: PublicModel[] = [];
    for (const m of [...config.models, ...discovered]) {
      if (this.#models.has(m.id)) continue;
      this.#models.set(m.id, m);
      const pub: PublicModel = {
        id: m.id,
        object: 'model',
        created: m.created ?? createdAt,
        owned_by: config.service.name,
        type: m.type,
        context_window: m.context_window,
        max_output_tokens: m.max_output_tokens,
        supports_vision: m.supports_vision,
      };
      this.#public.set(m.id, JSON.stringify(pub));
      paid.push(pub);
      if (!m.paid_only) free.push(pub);
    }
    this.#listJson = {
      free: JSON.stringify({ object: 'list', data: free }),
      paid: JSON.stringify({ object: 'list', data: paid }),
    };
    this.#usable = { free: free.map((m) => m.id), paid: paid.map((m) => m.id) };
    this.#paidList = paid;
    this.#freeList = free;
    this.#auto = config.routing.auto;
  }

  get size(): number {
    return this.#models.size;
  }

  /** The models `auto` may choose from, in order. */
  get autoModels(): ModelConfig[] {
    const out: ModelConfig[] = [];
    for (const id of this.#auto) {
      const m = this.#models.get(id);
      if (m !== undefined) out.push(m);
    }
    return out;
  }

  get(slug: string): ModelConfig | undefined {
    return this.#models.get(slug);
  }

  /** The JSON of GET /v1/models/{id}, or undefined. */
  publicJson(slug: string): string | undefined {
    return this.#public.get(slug);
  }

  /** The JSON of GET /v1/models for a plan: only what the plan and the key (if any) both allow. */
  listJson(plan: PlanConfig, key?: KeyPolicy): string {
    const models = key?.models ?? null;
    if (models === null) return plan.paid ? this.#listJson.paid : this.#listJson.free;
    const memo = `${plan.paid ? 'p' : 'f'}\u0000${key!.patterns!.join('\u0000')}`;
    let json = this.#keyLists.get(memo);
    if (json === undefined) {
      json = JSON.stringify({ object: 'list', data: (plan.paid ? this.#paidList : this.#freeList).filter((m) => models(m.id)) });
      if (this.#keyLists.size >= KEY_LISTS_KEPT) this.#keyLists.clear();
      this.#keyLists.set(memo, json);
    }
    return json;
  }

  /** Slugs the plan may use, and the key too when one is given. */
  usableBy(plan: PlanConfig, key?: KeyPolicy): readonly string[] {
    const all = plan.paid ? this.#usable.paid : this.#usable.free;
    const models = key?.models ?? null;
    return models === null ? all : all.filter(models);
  }

  /**
   * The model a request is served by: the slug itself, or for `auto` the first candidate that
   * the plan allows, that takes the request's images, and that `fits` (context window and
   * health; it names what is wrong, or returns null). Throws model_not_found /
   * model_requires_paid_plan with suggestions the plan may use.
   */
  resolve(
    slug: string, plan: PlanConfig, needsVision: boolean, fits: (m: ModelConfig) => 'context' | 'unhealthy' | null = () => null, key?: KeyPolicy,
  ): ModelConfig {
    if (slug === 'auto') return this.#resolveAuto(plan, needsVision, fits, key);
    const model = this.#models.get(slug);
    if (model === undefined) {
      throw new GatewayError('model_not_found', `The model '${clip(slug)}' does not exist.`, {
        param: 'model',
        extras: { suggested_models: nearest(slug, this.usableBy(plan, key), 3) },
      });
    }
    // The key's allowlist before the plan: it is the narrower of the two.
    if (key?.models != null && !key.models(slug)) throw this.#notAllowed(slug, plan, key);
    if (model.paid_only && !plan.paid) {
      throw new GatewayError('model_requires_paid_plan', `The model '${clip(slug)}' requires a paid plan.`, {
        param: 'model',
        extras: { suggested_models: nearest(slug, this.usableBy(plan, key), 3) },
      });
    }
    return model;
  }

  /** 403 model_not_allowed, suggesting the key's allowed models that the plan may use (nearest first). */
  #notAllowed(slug: string, plan: PlanConfig, key: KeyPolicy): GatewayError {
    const usable = this.usableBy(plan, key);
    return new GatewayError('model_not_allowed', `This API key may not use the model '${clip(slug)}'.`, {
      param: 'model',
      extras: { suggested_models: nearest(slug, usable, usable.length) },
    });
  }

  #resolveAuto(plan: PlanConfig, needsVision: boolean, fits: (m: ModelConfig) => 'context' | 'unhealthy' | null, key?: KeyPolicy): ModelConfig {
    const seen = { paid: false, vision: false, context: false, unhealthy: false };
    let candidates = 0;
    let keyRefused = 0;
    for (const id of this.#auto) {
      const m = this.#models.get(id);
      if (m === undefined) continue;
      candidates++;
      if (key?.models != null && !key.models(id)) { keyRefused++; continue; }
      if (m.paid_only && !plan.paid) { seen.paid = true; continue; }
      if (needsVision && !m.supports_vision) { seen.vision = true; continue; }
      const problem = fits(m);
      if (problem !== null) { seen[problem] = true; continue; }
      return m;
    }
    if (candidates === 0) {
      throw new GatewayError('model_not_found', "The model 'auto' is not configured on this gateway.", {
        param: 'model',
        extras: { suggested_models: this.usableBy(plan).slice(0, 3) },
      });
    }
    if (keyRefused === candidates && key !== undefined) throw this.#notAllowed('auto', plan, key);
    if (seen.unhealthy) {
      throw new GatewayError('model_unavailable', "No model that 'auto' may choose is available right now.", {
        param: 'model', headers: retryAfterHeaders(5000),
      });
    }
    if (seen.context) {
      throw new GatewayError('context_length_exceeded', "The request does not fit the context window of any model 'auto' may choose.", { param: 'messages' });
    }
    if (seen.vision) {
      throw new GatewayError('model_does_not_support_images', "No model that 'auto' may choose for your plan accepts images.", { param: 'messages' });
    }
    throw new GatewayError('model_requires_paid_plan', "Every model that 'auto' may choose requires a paid plan.", {
      param: 'model',
      extras: { suggested_models: this.usableBy(plan, key).slice(0, 3) },
    });
  }
}
