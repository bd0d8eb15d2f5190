// The output limit the upstream is told is the one the hold was sized for (CONTRACT section 10),
// in every field the upstream may read. A client's `max_completion_tokens` (and a Responses
// request's `max_output_tokens`, which becomes it) is sent as `max_tokens` too: llama.cpp before
// 2026-02, llama-cpp-python, TGI and other servers read only `max_tokens`, and without it they
// generate to the context's end while the hold covered the client's figure. OpenAI's own API is
// the exception: its reasoning models refuse `max_tokens`, and it reads
// `max_completion_tokens`, so there it is sent alone (unless the client sent both).

/** Whether a base URL is OpenAI's own API (api.openai.com, Azure OpenAI). */
export function isOpenAiHosted(baseUrls: readonly string[]): boolean {
  return baseUrls.length > 0 && baseUrls.every((u) => {
    try {
      const host = new URL(u).hostname.toLowerCase();
      return host === 'api.openai.com' || host.endsWith('.openai.azure.com');
    } catch {
      return false;
    }
  });
}

/** Sets the upstream body's output-limit fields to `limit`, the figure held. */
export function tellLimit(out: Record<string, unknown>, src: Record<string, unknown>, limit: number, openAiHosted: boolean): void {
  const completion = src.max_completion_tokens !== undefined && src.max_completion_tokens !== null;
  const plain = src.max_tokens !== undefined && src.max_tokens !== null;
  if (completion) out.max_completion_tokens = limit;
  if (!completion || plain || !openAiHosted) out.max_tokens = limit;
}
