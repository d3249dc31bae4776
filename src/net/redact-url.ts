/**
 * Hides the user info of URLs (`http://user:pass@host` → `http://***@host`), so credentials placed
 * in a broker or Redis URL (often from `${VAR}`) never leave the process: every log line, admin
 * answer, metric label and CLI report passes what it prints through this one function
 * (docs/security.md, "Secrets in URLs").
 */

// A scheme, then the authority up to its last `@` (WHATWG URL parsing takes the last one, so an
// unescaped `@` in a password belongs to the user info); `/ ? #`, white space and quotes end it.
const USER_INFO = /\b([a-z][a-z0-9+.-]*:\/\/)[^\s/?#"'<>\\]*@/gi;

/** `text` with the user info of every URL in it replaced by `***`; the text itself when it has none. */
export function redactUserInfo(text: string): string {
  // Most texts hold no user info: skip the regex unless both markers are there.
  if (!text.includes('@') || !text.includes('://')) return text;
  return text.replace(USER_INFO, '$1***@');
}
