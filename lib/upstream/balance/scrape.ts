// Reads a model server's Prometheus metrics: how many requests wait in its queue, how many run,
// and how full its KV cache is, in the names vLLM, SGLang and llama.cpp use. Only the lines of those metrics
// are handed to the parser (a vLLM /metrics page is mostly histograms that routing ignores).

import parsePrometheusTextFormat from 'parse-prometheus-text-format';

/** Queue depth: requests accepted but not yet running (the first name present wins). */
const QUEUE = ['vllm:num_requests_waiting', 'sglang:num_queue_reqs', 'llamacpp:requests_deferred'];
/** Requests running (in the batch), in the same servers' names. */
const RUNNING = ['vllm:num_requests_running', 'sglang:num_running_reqs', 'llamacpp:requests_processing'];
/** KV-cache use as a fraction: vLLM V1, vLLM V0, SGLang, llama.cpp. */
const KV = ['vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc', 'sglang:token_usage', 'llamacpp:kv_cache_usage_ratio'];
const WANTED = new Set([...QUEUE, ...RUNNING, ...KV]);

export interface ServerLoad {
  queueDepth: number | null;
  running: number | null;
  kvCacheUsage: number | null;
}

/** The metric name a sample or TYPE/HELP line is about, if it is one we read. */
function wanted(line: string): boolean {
  const start = line.startsWith('# TYPE ') || line.startsWith('# HELP ') ? 7 : line.startsWith('#') ? -1 : 0;
  if (start < 0) return false;
  let end = start;
  while (end < line.length) {
    const c = line.charCodeAt(end);
    if (c === 0x7b /* { */ || c === 0x20 /* space */ || c === 0x09) break;
    end++;
  }
  return WANTED.has(line.slice(start, end));
}

/** Queue depth and requests running (each summed over label sets) and KV-cache use (the highest) from a metrics page. */
export function parseServerLoad(text: string): ServerLoad {
  const lines = text.split('\n').filter(wanted);
  const values = new Map<string, number[]>();
  if (lines.length > 0) {
    for (const family of parsePrometheusTextFormat(`${lines.join('\n')}\n`)) {
      const nums = family.metrics.map((m) => Number(m.value)).filter(Number.isFinite);
      if (nums.length > 0) values.set(family.name, nums);
    }
  }
  const count = (names: readonly string[]): number | null => {
    for (const name of names) {
      const v = values.get(name);
      if (v !== undefined) return Math.max(0, Math.round(v.reduce((a, b) => a + b, 0)));
    }
    return null;
  };
  const queueDepth = count(QUEUE);
  let kvCacheUsage: number | null = null;
  for (const name of KV) {
    const v = values.get(name);
    if (v !== undefined) { kvCacheUsage = Math.min(1, Math.max(0, ...v)); break; }
  }
  return { queueDepth, running: count(RUNNING), kvCacheUsage };
}
