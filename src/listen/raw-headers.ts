/**
 * Checks on the raw request head that both listeners need. Node keeps the first of repeated
 * Host and Authorization headers; a proxy must not guess which one a broker or an intermediary
 * would read (request smuggling, DNS-rebinding checks read one Host while another is served).
 */

/** 'authorization' or 'host' when the raw request repeats it; null otherwise. Allocation-free. */
export function duplicatedSingleton(raw: readonly string[]): 'authorization' | 'host' | null {
  let auth = 0;
  let host = 0;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!;
    if (name.length === 13 && name.toLowerCase() === 'authorization') {
      if (++auth > 1) return 'authorization';
    } else if (name.length === 4 && name.toLowerCase() === 'host') {
      if (++host > 1) return 'host';
    }
  }
  return null;
}
