// The model catalog: slugs clients send, what each plan may use, and the answers of
// GET /v1/models, serialized once per config rather than per request.

import type { Config, ModelConfig, PlanConfig } from '../config/types.js';
import { GatewayError } from '../errors.js';
import { nearest } from './suggest.js';

export interface PublicModel {
  id: string;
  object: 'model';
  created: number;
  owned_by: string;
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

  constructor(config: Config, createdAt: number) {
    const free: PublicModel[] = [];
    const paid: PublicModel[] = [];
    for (const m of config.models) {
      this.#models.set(m.id, m);
      const pub: PublicModel = {
        id: m.id,
        object: 'model',
        created: m.created ?? createdAt,
        owned_by: config.service.name,
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
    this.#auto = config.routing.auto;
  }

  get size(): number {
    return this.#models.size;
  }

  get(slug: string): ModelConfig | undefined {
    return this.#models.get(slug);
  }

  /** The JSON of GET /v1/models/{id}, or undefined. */
  publicJson(slug: string): string | undefined {
    return this.#public.get(slug);
  }

  /** The JSON of GET /v1/models for a plan. */
  listJson(plan: PlanConfig): string {
    return plan.paid ? this.#listJson.paid : this.#listJson.free;
  }

  usableBy(plan: PlanConfig): readonly string[] {
    return plan.paid ? this.#usable.paid : this.#usable.free;
  }

  /**
   * The model a request is served by: the slug itself, or for `auto` the first candidate the
   * plan allows that supports the request's images. Throws model_not_found /
   * model_requires_paid_plan with suggestions the plan may use.
   */
  resolve(slug: string, plan: PlanConfig, needsVision: boolean): ModelConfig {
    if (slug === 'auto') return this.#resolveAuto(plan, needsVision);
    const model = this.#models.get(slug);
    if (model === undefined) {
      throw new GatewayError('model_not_found', `The model '${slug}' does not exist.`, {
        param: 'model',
        extras: { suggested_models: nearest(slug, this.usableBy(plan), 3) },
      });
    }
    if (model.paid_only && !plan.paid) {
      throw new GatewayError('model_requires_paid_plan', `The model '${slug}' requires a paid plan.`, {
        param: 'model',
        extras: { suggested_models: nearest(slug, this.usableBy(plan), 3) },
      });
    }
    return model;
  }

  #resolveAuto(plan: PlanConfig, needsVision: boolean): ModelConfig {
    let sawPaidOnly = false;
    for (const id of this.#auto) {
      const m = this.#models.get(id);
      if (m === undefined) continue;
      if (m.paid_only && !plan.paid) { sawPaidOnly = true; continue; }
      if (needsVision && !m.supports_vision) continue;
      return m;
    }
    if (this.#auto.length === 0) {
      throw new GatewayError('model_not_found', "The model 'auto' is not configured on this gateway.", {
        param: 'model',
        extras: { suggested_models: this.usableBy(plan).slice(0, 3) },
      });
    }
    if (needsVision) {
      throw new GatewayError('model_does_not_support_images', "No model that 'auto' may choose for your plan accepts images.", { param: 'messages' });
    }
    if (sawPaidOnly) {
      throw new GatewayError('model_requires_paid_plan', "Every model that 'auto' may choose requires a paid plan.", {
        param: 'model',
        extras: { suggested_models: this.usableBy(plan).slice(0, 3) },
      });
    }
    throw new GatewayError('model_unavailable', "No model is available for 'auto' right now.", { param: 'model' });
  }
}
