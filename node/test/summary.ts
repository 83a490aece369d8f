/**
 * A node:test reporter that ends the run with one line in pytest's form,
 * `57 passed, 0 failed (node, keys layout)`: the line CI's closing count
 * (.ci/run) sums with cargo's and pytest's.
 */

import type { TestEvent } from 'node:test/reporters';
import { layout } from './servers.js';

export default async function* summary(source: AsyncIterable<TestEvent>): AsyncGenerator<string> {
  let passed = 0;
  let failed = 0;
  const started = Date.now();
  for await (const event of source) {
    // Suites pass or fail with their tests: count the tests only.
    if (event.type === 'test:pass' && event.data.details.type !== 'suite') {
      passed += event.data.skip === undefined ? 1 : 0;
    } else if (event.type === 'test:fail' && event.data.details.type !== 'suite') {
      failed += 1;
    }
  }
  const seconds = ((Date.now() - started) / 1000).toFixed(1);
  yield `${passed} passed, ${failed} failed in ${seconds}s (node, ${layout()} layout)\n`;
}
