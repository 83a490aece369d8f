/** What a test watches: a logger that keeps its lines, a condition awaited. */

import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from '../src/index.js';

/** A logger that keeps its lines. */
export function recorder(): Logger & { lines: string[] } {
  const lines: string[] = [];
  return {
    lines,
    info: (message) => lines.push(`INFO ${message}`),
    warn: (message) => lines.push(`WARN ${message}`),
    error: (message) => lines.push(`ERROR ${message}`),
  };
}

/** Waits until `holds`, checking every 10 ms; throws naming `what` after `timeoutMs`. */
export async function until(what: string, holds: () => boolean | Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await holds())) {
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting until ${what}`);
    }
    await sleep(10);
  }
}
