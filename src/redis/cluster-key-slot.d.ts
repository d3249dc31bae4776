/** Types for cluster-key-slot (ioredis's own slot function; the package ships none). */
declare module 'cluster-key-slot' {
  /** The Redis Cluster hash slot (0–16383) of a key; a `{tag}` in the key decides it. */
  function calculateSlot(key: string | Buffer): number;
  export = calculateSlot;
}
