/**
 * The Lua side of leased mode: one call gives back what an instance did not spend of its last
 * slice and takes a new one from the tenant's request bucket, the same GCRA key ADMIT_LUA uses,
 * so leased and exact admits share one bucket. A slice is taken from the bucket before any
 * request spends it, so the shared bucket itself is never overdrawn.
 *
 * KEYS: the tenant's request-bucket TAT (its hash tag routes the call on Redis Cluster).
 * ARGV: now ms, request interval ms, burst, tokens returned, tokens wanted.
 * Returns {granted, remaining, reset ms, wait ms}: remaining whole requests in the bucket after
 * the grant, ms until it is full, and ms until it could grant `wanted` again (0 when it could now).
 * Floats as strings because Redis truncates Lua numbers to integers.
 */
export const LEASE_LUA = `
local now, t, b = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local returned, wanted = tonumber(ARGV[4]), tonumber(ARGV[5])
local eps = 1e-6
local tat = math.max(tonumber(redis.call('GET', KEYS[1]) or '0'), now)
tat = math.max(tat - returned * t, now)
local avail = math.floor((now + b * t - tat) / t + eps)
local granted = math.max(0, math.min(wanted, avail))
tat = tat + granted * t
if tat > now then
  redis.call('SET', KEYS[1], string.format('%.17g', tat), 'PX', math.ceil(tat - now) + 1000)
else
  redis.call('DEL', KEYS[1])
end
local remaining = math.max(0, math.floor((now + b * t - tat) / t + eps))
local wait = math.max(0, tat + wanted * t - now - b * t)
return {granted, remaining, tostring(tat - now), tostring(wait)}
`;
