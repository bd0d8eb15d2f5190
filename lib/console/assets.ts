// The console's static files: the page (built here, the same for everyone: no data in it) and
// the bundle esbuild wrote under dist/console/ at build time (scripts/build-console.mjs). Read
// once, at the first request for them, and kept with their gzip; never fetched from elsewhere.

import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { gzip } from 'node:zlib';

const gz = promisify(gzip);

export interface Asset { type: string; body: Buffer; gzip: Buffer; etag: string }

/** dist/console/ of the package this module belongs to (source or build). */
export function assetDir(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 6; i++) {
    if (existsSync(join(dir, 'package.json'))) return join(dir, 'dist', 'console');
    dir = dirname(dir);
  }
  return join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'console');
}

export const ASSET_FILES: Record<string, string> = {
  'console.js': 'text/javascript; charset=utf-8',
  'console.css': 'text/css; charset=utf-8',
};

export const PAGE = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Tollgate console</title>
<link rel="stylesheet" href="/console/assets/console.css">
<script type="module" src="/console/assets/console.js"></script>
</head>
<body>
<div id="app"><p>Loading the console…</p></div>
<noscript><p>The Tollgate console needs JavaScript.</p></noscript>
</body>
</html>
`;

async function asset(type: string, body: Buffer): Promise<Asset> {
  const { createHash } = await import('node:crypto');
  return { type, body, gzip: await gz(body), etag: `"${createHash('sha256').update(body).digest('base64url').slice(0, 22)}"` };
}

export class Assets {
  #loaded: Promise<Map<string, Asset>> | undefined;

  get(name: string): Promise<Asset | undefined> {
    this.#loaded ??= this.#load();
    this.#loaded.catch(() => { this.#loaded = undefined; });
    return this.#loaded.then((m) => m.get(name));
  }

  async #load(): Promise<Map<string, Asset>> {
    const dir = assetDir();
    const map = new Map<string, Asset>();
    map.set('index.html', await asset('text/html; charset=utf-8', Buffer.from(PAGE)));
    for (const [file, type] of Object.entries(ASSET_FILES)) {
      try {
        map.set(file, await asset(type, await readFile(join(dir, file))));
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      }
    }
    return map;
  }
}
