// Circuit breaking per upstream target (a provider and the model name it is asked for).
// N consecutive failures open the circuit for a cooldown; then one probe request may pass:
// its success closes the circuit, its failure opens it again. State lives at the gateway, so
// a config reload does not forget which upstreams are down.

import type { Gauge } from 'prom-client';

export interface CircuitOptions {
  failures: number;
  cooldownMs: number;
}

export type Admission = { ok: true; probe: boolean } | { ok: false; retryMs: number };

/** What one call to a target showed about its health. */
export type Outcome = 'success' | 'failure' | 'neutral';

export class Circuit {
  #failures = 0;
  #openUntil = 0;
  #probing = false;
  readonly #options: CircuitOptions;
  readonly #onChange: (healthy: boolean) => void;

  constructor(options: CircuitOptions, onChange: (healthy: boolean) => void) {
    this.#options = options;
    this.#onChange = onChange;
  }

  /** True unless the circuit is open (a half-open circuit is worth trying). */
  get healthy(): boolean {
    return this.#openUntil === 0 || (Date.now() >= this.#openUntil && !this.#probing);
  }

  /** While open: when the next probe may pass (ms since the epoch); 0 while closed. */
  get openUntil(): number {
    return this.#openUntil;
  }

  admit(now = Date.now()): Admission {
    if (this.#openUntil === 0) return { ok: true, probe: false };
    if (now < this.#openUntil) return { ok: false, retryMs: this.#openUntil - now };
    if (this.#probing) return { ok: false, retryMs: 1000 };
    this.#probing = true;
    return { ok: true, probe: true };
  }

  /** Records how an admitted call went. */
  settle(admission: Admission, outcome: Outcome): void {
    if (!admission.ok) return;
    if (admission.probe) this.#probing = false;
    if (outcome === 'success') {
      const wasOpen = this.#openUntil !== 0;
      this.#failures = 0;
      this.#openUntil = 0;
      if (wasOpen) this.#onChange(true);
    } else if (outcome === 'failure') {
      this.#failures++;
      if (admission.probe || this.#failures >= this.#options.failures) {
        const wasClosed = this.#openUntil === 0;
        this.#openUntil = Date.now() + this.#options.cooldownMs;
        if (wasClosed) this.#onChange(false);
      }
    }
  }
}

/** Every target's circuit, kept across reloads; exported as tollgate_upstream_healthy. */
export class Health {
  readonly #circuits = new Map<string, Circuit>();
  readonly #gauge: Gauge<'provider' | 'upstream_model'>;

  readonly #log: ((healthy: boolean, labels: { provider: string; upstream_model: string }) => void) | undefined;

  /** `log`: told when a circuit opens or closes, so the operator sees why requests fail over. */
  constructor(gauge: Gauge<'provider' | 'upstream_model'>, log?: (healthy: boolean, labels: { provider: string; upstream_model: string }) => void) {
    this.#gauge = gauge;
    this.#log = log;
  }

  /** A provider's circuits (one per upstream model asked for so far), for GET /admin/upstreams. */
  circuits(provider: string): Array<{ upstream_model: string; open: boolean; open_until: string | null }> {
    const out: Array<{ upstream_model: string; open: boolean; open_until: string | null }> = [];
    for (const [key, c] of this.#circuits) {
      const [p, model] = key.split('\u0000') as [string, string];
      if (p !== provider) continue;
      const until = c.openUntil;
      out.push({ upstream_model: model, open: !c.healthy, open_until: until === 0 ? null : new Date(until).toISOString() });
    }
    return out;
  }

  circuit(provider: string, upstreamModel: string, options: CircuitOptions): Circuit {
    const key = `${provider}\u0000${upstreamModel}`;
    let c = this.#circuits.get(key);
    if (c === undefined) {
      const labels = { provider, upstream_model: upstreamModel };
      this.#gauge.set(labels, 1);
      c = new Circuit(options, (healthy) => {
        this.#gauge.set(labels, healthy ? 1 : 0);
        this.#log?.(healthy, labels);
      });
      this.#circuits.set(key, c);
    }
    return c;
  }
}
