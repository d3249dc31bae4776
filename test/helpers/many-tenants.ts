/** Tenant tables of any size for tests of many tenants (test helper). */

/** The id of the i-th generated tenant: zero-padded, so ids sort as their numbers do. */
export function manyTenantId(i: number): string {
  return `t${String(i).padStart(6, '0')}`;
}

/**
 * `n` tenants (and the test config's `acme`, made to share their brokers) on `brokers`, each with its host `<id>.localhost`, on plan `test`; every tenth is
 * suspended and every third on plan `pro` when `plans` names it (for filters).
 */
export function manyTenants(n: number, brokers: string[], opts: { proPlan?: string } = {}): Record<string, unknown> {
  const tenants: Record<string, unknown> = { acme: { tenancyAwareBrokers: true } };
  for (let i = 0; i < n; i++) {
    const id = manyTenantId(i);
    tenants[id] = {
      plan: opts.proPlan !== undefined && i % 3 === 0 ? opts.proPlan : 'test',
      status: i % 10 === 9 ? 'suspended' : 'active',
      hosts: [`${id}.localhost`],
      brokers,
      // All share the test's broker double, which keeps tenants apart by x-queen-tenant.
      tenancyAwareBrokers: true,
    };
  }
  return tenants;
}
