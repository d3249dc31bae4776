/** redactUserInfo: the user info of every URL in a text becomes `***`, nothing else changes. */
import { describe, expect, it } from 'vitest';
import { redactUserInfo } from '../../src/net/redact-url.js';

describe('redactUserInfo', () => {
  it.each([
    ['http://user:pass@10.0.0.5:6632/x', 'http://***@10.0.0.5:6632/x'],
    ['http://user@h', 'http://***@h'],
    // WHATWG URL parsing takes the last @ of the authority: an unescaped @ in a password is user info.
    ['http://u:p@ss@h:1', 'http://***@h:1'],
    ['broker "https://u:p%2F@h" and "redis://:pw@r:6379/0"', 'broker "https://***@h" and "redis://***@r:6379/0"'],
    ['{"url":"http://u:p@h"}', '{"url":"http://***@h"}'],
    // An @ after the authority (a path) or in no URL is left alone.
    ['http://h/a@b mail me@example.com', 'http://h/a@b mail me@example.com'],
    ['http://10.0.0.5:6632', 'http://10.0.0.5:6632'],
  ])('%s', (text, expected) => {
    expect(redactUserInfo(text)).toBe(expected);
  });
});
