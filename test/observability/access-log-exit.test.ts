/** Access lines of the turn in progress are written when the process exits in that turn (a second signal, a fatal error). */
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { expect, it } from 'vitest';

const ROOT = resolve(import.meta.dirname, '../..');

it('a process that exits in the same turn as three requests finished still has their three lines on stdout', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'qe-access-exit-'));
  try {
    const script = join(dir, 'exit.ts');
    await writeFile(
      script,
      `import { createLogger } from ${JSON.stringify(join(ROOT, 'src/observability/log.ts'))};
import { accessLogWriter } from ${JSON.stringify(join(ROOT, 'src/observability/access-log.ts'))};
const write = accessLogWriter(createLogger('info'));
for (const reqId of ['a', 'b', 'c'])
  write({ reqId, tenant: 'acme', sub: null, route: 'push', method: 'POST', status: 201, code: null, bytesIn: 1, bytesOut: 2, ms: 1, broker: null, proto: '1.1', trace: null, client: '127.0.0.1', host: 'acme.localhost', path: '/api/v1/push', queryLength: 0, upstreamStatus: 201 });
process.exit(0);
`,
    );
    const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx', script], { cwd: ROOT });
    const ids = stdout
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => (JSON.parse(l) as { reqId: string }).reqId);
    expect(ids).toEqual(['a', 'b', 'c']);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
