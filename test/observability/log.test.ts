import { describe, expect, it } from 'vitest';
import { resolveLogFormat } from '../../src/observability/log.js';

describe('log.format', () => {
  it('auto is pretty on a terminal and JSON otherwise; an explicit format wins', () => {
    expect(resolveLogFormat('auto', true)).toBe('pretty');
    expect(resolveLogFormat('auto', false)).toBe('json');
    expect(resolveLogFormat('json', true)).toBe('json');
    expect(resolveLogFormat('pretty', false)).toBe('pretty');
  });
});
