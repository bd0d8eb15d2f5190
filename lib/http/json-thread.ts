// The worker side of parseJsonBodyOffThread (json.ts): decodes, parses and inspects one body
// at a time and answers with the value, or the invalid_json message. Nothing else runs here.

import { parentPort } from 'node:worker_threads';
import { GatewayError } from '../errors.js';
import { parseJsonBody, type JsonAnswer, type JsonJob } from './json.js';

parentPort?.on('message', (job: JsonJob) => {
  let answer: JsonAnswer;
  try {
    answer = { id: job.id, value: parseJsonBody(Buffer.from(job.bytes.buffer, job.bytes.byteOffset, job.bytes.byteLength)) };
  } catch (err) {
    answer = err instanceof GatewayError
      ? { id: job.id, invalid: err.message, code: err.code === 'request_too_large' ? 'request_too_large' : 'invalid_json' }
      : { id: job.id, failed: String(err) };
  }
  parentPort!.postMessage(answer);
});
