// Whether an OpenAI-compatible server is llama.cpp's, known before the first request is sent
// (issue #40). llama.cpp cancels a generation when its client leaves only for streamed requests,
// and names a matched stop string only when asked to be verbose: a request sent before the
// gateway knew ran to max_tokens unmetered once its client left, and reported no stop sequence.
// So the provider asks GET /props as it starts (after a reload too), a request that finds that
// question still open waits for it a bounded time, and what was learned is kept per server
// (its replicas' URLs) for the whole process: a reload (SIGHUP) starts knowing what the last
// config knew, and asks again to confirm it.

/** What each server is, by its replicas' URLs; outlives a reload, which builds new providers. */
const learned = new Map<string, boolean>();
/** The question open about each server: providers on the same server (or a reload's) share it. */
const asking = new Map<string, Promise<boolean | undefined>>();

/** How long a request waits for a probe still in flight before it is sent as if unknown. */
export const PROBE_WAIT_MS = 2000;
/** A probe that could not tell (no answer, 5xx while the model loads) is tried again no sooner than this. */
const RETRY_MS = 1000;

/** What a probe found: true (llama.cpp), false (another server), undefined (it could not tell). */
export type Probe = (signal: AbortSignal) => Promise<boolean | undefined>;

export class ServerKind {
  readonly #key: string;
  readonly #probe: Probe;
  readonly #timeoutMs: number;
  readonly #controller = new AbortController();
  #value: boolean | undefined;
  #inFlight: Promise<void> | undefined;
  #triedAt = -Infinity;
  /** When the open question was asked. */
  #askedAt = -Infinity;

  constructor(key: string, probe: Probe, timeoutMs: number) {
    this.#key = key;
    this.#probe = probe;
    this.#timeoutMs = timeoutMs;
    this.#value = learned.get(key);
  }

  /** true: llama.cpp's server; false: another; undefined: not known yet. */
  get llamaCpp(): boolean | undefined {
    return this.#value;
  }

  /** What a probe, discovery or an answer told; kept for the next config's provider too. */
  set(llamaCpp: boolean): void {
    this.#value = llamaCpp;
    learned.set(this.#key, llamaCpp);
  }

  /** What an answer suggests (llama.cpp's `timings` in it, or not), taken only while nothing better is known. */
  suggest(llamaCpp: boolean): void {
    if (this.#value === undefined) this.set(llamaCpp);
  }

  /**
   * Asks the server (one question at a time; after one that could not tell, again only once
   * RETRY_MS passed). Never rejects. Called at start, and by a request that finds the kind unknown.
   */
  ask(): Promise<void> {
    if (this.#inFlight !== undefined) return this.#inFlight;
    if (this.#controller.signal.aborted || performance.now() - this.#triedAt < RETRY_MS) return Promise.resolve();
    this.#triedAt = performance.now();
    this.#askedAt = this.#triedAt;
    let question = asking.get(this.#key);
    if (question === undefined) {
      const signal = AbortSignal.any([this.#controller.signal, AbortSignal.timeout(this.#timeoutMs)]);
      const asked: Promise<boolean | undefined> = this.#probe(signal).catch(() => undefined).finally(() => {
        if (asking.get(this.#key) === asked) asking.delete(this.#key);
      });
      asking.set(this.#key, asked);
      question = asked;
    }
    this.#inFlight = question.then((v) => {
      if (v !== undefined) this.set(v);
    }).finally(() => {
      this.#inFlight = undefined;
      this.#triedAt = performance.now();
    });
    return this.#inFlight;
  }

  /**
   * Resolves once the kind is known, or the question could not tell, or `signal` aborted, or
   * `maxMs` passed since the question was asked (so a server whose /props never answers delays
   * only the requests of the question's first moments), whichever comes first; asks the server
   * when no question is open.
   */
  known(signal: AbortSignal, maxMs = PROBE_WAIT_MS): Promise<void> {
    if (this.#value !== undefined || signal.aborted) return Promise.resolve();
    const asked = this.ask();
    const left = maxMs - (performance.now() - this.#askedAt);
    if (this.#inFlight === undefined || left <= 0) return Promise.resolve();
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        signal.removeEventListener('abort', done);
        resolve();
      };
      const timer = Number.isFinite(left) ? setTimeout(done, left) : undefined;
      signal.addEventListener('abort', done, { once: true });
      void asked.then(done);
    });
  }

  /** Ends a question in flight (the provider closes). */
  close(): void {
    this.#controller.abort();
  }
}
