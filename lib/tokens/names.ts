// The tokenizers a config may name: the encodings that ship with the gateway, `upstream`, or
// a tokenizer.json file. Here, beside the counting (./count.ts), so that the config's own check
// (../config/local.ts) can load a tokenizer with the counter's loader, importing down.

export type TokenizerName = 'o200k_base' | 'cl100k_base' | 'p50k_base' | 'r50k_base';
/** An encoding name, `upstream` (the model server's /tokenize), or the path of a tokenizer.json. */
export type TokenizerSpec = TokenizerName | 'upstream' | (string & {});
