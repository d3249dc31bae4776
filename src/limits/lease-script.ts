/**
 * The Lua side of leased mode: one call gives back what an instance did not spend of its last
 * slices and takes new ones, from the same keys ADMIT_LUA uses, so leased and exact admits share
 * one state: the request and message buckets (GCRA) and the month's message and byte counters.
 *
 * A bucket slice is taken before any request spends it, so a bucket is never overdrawn. A month
 * slice is added to the month's counter when granted and taken off when given back, so the
 * counter holds what was admitted plus what is held, and never exceeds the quota. The month slices
 * are granted whole or not at all, both or neither, and only while each quota keeps room for
 * (live instances + 1) more slices: near the end of a quota every instance admits exactly again,
 * holding no month units its own exact admits would count as used, and the slices still held
 * elsewhere go back within a lease.
 *
 * KEYS: request tat, message tat, month messages, month bytes (one tenant, one hash tag).
 * ARGV: now ms, live instances, month-key TTL ms (relative);
 *   request interval, burst, tokens returned, tokens wanted;
 *   message interval, burst, tokens returned, tokens wanted;
 *   month message quota (0 = none), units returned, units wanted;
 *   month byte quota (0 = none), units returned, units wanted.
 * Returns {requests granted, requests remaining, request reset ms, request wait ms,
 *   messages granted, message wait ms, month messages granted, month bytes granted}: remaining whole
 *   requests in the bucket after the grant, ms until it is full, and ms until each bucket could
 *   grant its `wanted` again (0 when it could now). Floats as strings because Redis truncates Lua
 *   numbers to integers.
 */
export const LEASE_LUA = `
local now, instances, monthTtl = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local eps = 1e-6

local function bucket(key, t, b, returned, wanted)
  local tat = math.max(tonumber(redis.call('GET', key) or '0'), now)
  tat = math.max(tat - returned * t, now)
  local avail = math.floor((now + b * t - tat) / t + eps)
  local granted = math.max(0, math.min(wanted, avail))
  tat = tat + granted * t
  if tat > now then
    redis.call('SET', key, string.format('%.17g', tat), 'PX', math.ceil(tat - now) + 1000)
  else
    redis.call('DEL', key)
  end
  local remaining = math.max(0, math.floor((now + b * t - tat) / t + eps))
  return granted, remaining, tat - now, math.max(0, tat + wanted * t - now - b * t)
end

-- A month counter less what is returned, and whether it has room for the slice and its reserve.
local function counterRoom(key, limit, returned, wanted)
  if returned == 0 and wanted == 0 then return 0, true end
  local used = math.max(0, tonumber(redis.call('GET', key) or '0') - returned)
  return used, limit == 0 or limit - used >= wanted * (instances + 1)
end

local function counterSet(key, returned, used, granted)
  if returned == 0 and granted == 0 then return end
  redis.call('SET', key, string.format('%.0f', used + granted), 'PX', monthTtl)
end

local rg, rr, rreset, rwait = bucket(KEYS[1], tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]))
local mg, mwait = 0, 0
local mReturned, mWanted = tonumber(ARGV[10]), tonumber(ARGV[11])
if mReturned > 0 or mWanted > 0 then
  local _r, _s
  mg, _r, _s, mwait = bucket(KEYS[2], tonumber(ARGV[8]), tonumber(ARGV[9]), mReturned, mWanted)
end
local qmReturned, qmWanted = tonumber(ARGV[13]), tonumber(ARGV[14])
local qbReturned, qbWanted = tonumber(ARGV[16]), tonumber(ARGV[17])
local qmUsed, qmRoom = counterRoom(KEYS[3], tonumber(ARGV[12]), qmReturned, qmWanted)
local qbUsed, qbRoom = counterRoom(KEYS[4], tonumber(ARGV[15]), qbReturned, qbWanted)
local qm, qb = 0, 0
if qmRoom and qbRoom then qm, qb = qmWanted, qbWanted end
counterSet(KEYS[3], qmReturned, qmUsed, qm)
counterSet(KEYS[4], qbReturned, qbUsed, qb)
return {rg, rr, tostring(rreset), tostring(rwait), mg, tostring(mwait), qm, qb}
`;
