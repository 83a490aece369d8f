/** Stopping a worker process the way a deploy expects: SIGTERM and SIGINT. */

import type { Worker } from './worker.js';

/**
 * Runs `worker` until it stops: the first SIGTERM or SIGINT closes it
 * (running jobs get its grace to finish), a second one closes it at once
 * (their items go back unrun). Resolves once it has stopped; when it
 * stopped on a permanent error (the module not loaded, no permission),
 * which its log already says in one line, `process.exitCode` is set to 1.
 */
export async function handleSignals(
  worker: Worker,
  signals: readonly NodeJS.Signals[] = ['SIGTERM', 'SIGINT'],
): Promise<void> {
  let seen = 0;
  const onSignal = (signal: NodeJS.Signals): void => {
    seen += 1;
    if (seen === 1) {
      worker.logger.info(
        `signal ${signal}: stopping (grace ${(worker.graceMs / 1000).toFixed(1)} s; a second signal stops at once)`,
      );
      void worker.close();
    } else {
      worker.logger.warn(`signal ${signal} again: stopping now, running jobs go back unrun`);
      void worker.close({ force: true });
    }
  };
  for (const signal of signals) {
    process.on(signal, onSignal);
  }
  try {
    await worker.run();
  } catch {
    process.exitCode = 1;
  } finally {
    for (const signal of signals) {
      process.off(signal, onSignal);
    }
  }
}
