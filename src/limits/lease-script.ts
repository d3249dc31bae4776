/**
 * The Lua side of leased mode: one call gives back what an instance did not spend of its last
 * slices and takes new ones, from the same keys ADMIT_LUA uses, so leased and exact admits share
 * one state: the request and message buckets (GCRA) and the month's message and byte counters.
 *
 * A bucket slice is taken before any request spends it, so a bucket is never overdrawn. A month
 * slice is added to the month's counter when granted and taken off when released, so the counter
 * holds what was admitted plus what is held; it stays within the quota except in the cases listed
 * below (units spent but not reported when a holding is released). The month slices are
 * granted whole or not at all, both or neither, and only while each quota keeps room for
 * (live instances + 1) more slices: near the end of a quota every instance admits exactly again,
 * holding no month units its own exact admits would count as used, and the slices still held
 * elsewhere go back within a lease.
 *
 * Month holdings are idempotent, so a call that failed loses nothing. Redis keeps, per tenant and
 * month, one record per instance (a HASH field): the sequence number of its last call, that
 * call's Redis time, the month units it had spent by then (cumulative, as it reported them), the
 * units it holds (granted, not reported spent, not released), the units another instance
 * reclaimed from it, and, from the holder's own settings, the Redis times after which its holding
 * may be reclaimed and its record forgotten, and its margin. A call reports absolute spent
 * totals, not what it gives back, so:
 * - a call whose sequence number is not above the record's (an older call run after a newer one,
 *   e.g. one a Cluster client sent again on a redirection, or the same call run twice) is stale and
 *   changes nothing at all, buckets included (a replay would otherwise return the same bucket
 *   tokens twice);
 * - otherwise the units spent since the record are taken off its holding, and whatever is still
 *   held is released: the unspent part of the last slice, and any slice granted by a call whose
 *   reply the instance never saw. Then the new slices are granted and held;
 * - an instance that stopped calling (killed, or cut off from Redis) stops spending at the end of
 *   its lease; a live one reports within its sweep period after that. Any call releases what it
 *   holds once Redis's clock is past its reclaim time (its last call + its lease + its margin)
 *   and Redis has been answering lease calls of the tenant, without a pause longer than the
 *   caller's gap (ARGV), for the holder's margin: after an outage every holder gets its margin to
 *   report before anything of its is reclaimed. What it spent of that holding since its last call
 *   is not known and is released too: over-admission by at most what a killed instance spent of
 *   its last month slice. An instance cut off while others reach Redis, for longer than its
 *   margin, has what it spent counted again when it reports (from what was reclaimed), so the
 *   counter can end above the quota by up to one slice per such instance.
 * - A record past its forget time is deleted, what it holds released, so the HASH stays small; an
 *   instance that reports after that has its reclaimed units forgotten (not counted again).
 * The reserved field '~up' (not a valid instance id) holds the Redis time of the last applied
 * call and the time since which calls came without such a pause. Ages are measured on Redis's
 * clock (TIME), so instance clocks need not agree. Writing after TIME needs effects replication
 * (Redis 5 or later; the default since then).
 *
 * KEYS: request tat, message tat, month messages, month bytes, month holdings (one tenant, one
 *   hash tag).
 * ARGV: now ms, live instances, month-key TTL ms (relative);
 *   request interval, burst, tokens returned, tokens wanted;
 *   message interval, burst, tokens returned, tokens wanted;
 *   month message quota (0 = none), messages spent this month by this instance, units wanted;
 *   month byte quota (0 = none), bytes spent this month by this instance, units wanted;
 *   instance id, sequence number, lease ms, reclaim margin ms, forget after ms (this caller's own,
 *   stored in its record), gap ms (a longer pause in calls may have been an outage).
 * Returns {requests granted, requests remaining, request reset ms, request wait ms,
 *   messages granted, message wait ms, month messages granted, month bytes granted, applied}:
 *   remaining whole requests in the bucket after the grant, ms until it is full, ms until each
 *   bucket could grant its `wanted` again (0 when it could now), and 0 for a stale call (all
 *   zeros then). Floats as strings because Redis truncates Lua numbers to integers.
 */
export const LEASE_LUA = `
local now, instances, monthTtl = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local me, seq = ARGV[18], tonumber(ARGV[19])
local margin = tonumber(ARGV[21])
local reclaimAfter, forgetAfter, gap = tonumber(ARGV[20]) + margin, tonumber(ARGV[22]), tonumber(ARGV[23])
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

-- A holdings record: {seq, Redis time ms of its last call, messages spent, bytes spent, messages
-- held, bytes held, messages reclaimed, bytes reclaimed, reclaim at, forget at, margin}; dimension
-- d (1 messages, 2 bytes) at 2+d, 4+d, 6+d. The last three are the holder's own (its Redis time
-- plus its lease and margin, plus its forget age; its margin), so a caller with other settings
-- cannot cut a live lease short.
local function parse(s)
  local r = {}
  for x in string.gmatch(s, '[^ ]+') do r[#r + 1] = tonumber(x) end
  return r
end
local function pack(r)
  return string.format('%.0f %.0f %.0f %.0f %.0f %.0f %.0f %.0f %.0f %.0f %.0f', r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11])
end

local time = redis.call('TIME')
local clock = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
-- The reserved field: {Redis time of the last call by any instance, up since}. A pause in calls
-- longer than the caller's gap (ARGV) may have been an outage in which holders could not report:
-- "up since" restarts, and a holding is reclaimed only once Redis has answered for the holder's
-- own margin since then, so a live holder has had its sweep's chance to report first.
local UP = '~up'
local mine = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
local reclaimed, forgotten, others = {}, {}, {0, 0}
local up = {clock, clock}
local all = redis.call('HGETALL', KEYS[5])
for i = 1, #all, 2 do
  if all[i] == UP then up = parse(all[i + 1]) end
end
local upSince = up[2]
if clock - up[1] > gap then upSince = clock end
for i = 1, #all, 2 do
  if all[i] ~= UP then
    local r = parse(all[i + 1])
    if all[i] == me then
      mine = r
    elseif clock > r[10] then
      others[1], others[2] = others[1] + r[5], others[2] + r[6]
      forgotten[#forgotten + 1] = all[i]
    elseif clock > r[9] and clock - upSince >= r[11] and (r[5] > 0 or r[6] > 0) then
      -- Its lease ended a margin ago, and it could have reported since: nothing it holds can be spent any more.
      others[1], others[2] = others[1] + r[5], others[2] + r[6]
      r[7], r[8], r[5], r[6] = r[7] + r[5], r[8] + r[6], 0, 0
      reclaimed[#reclaimed + 1] = {all[i], pack(r)}
    end
  end
end
if seq <= mine[1] then return {0, 0, '0', '0', 0, '0', 0, 0, 0} end
-- Others' records first, one command each (no unpack of a large table): a failure here leaves the counters untouched.
for _, w in ipairs(reclaimed) do redis.call('HSET', KEYS[5], w[1], w[2]) end
for _, f in ipairs(forgotten) do redis.call('HDEL', KEYS[5], f) end

-- What dimension d's counter changes by before the grant: spent units leave the holding, the
-- rest of it and what others held are released, and units spent after a reclaim count again.
local function settle(d)
  local spent = tonumber(ARGV[10 + 3 * d])
  local delta = math.max(0, spent - mine[2 + d])
  local fromHeld = math.min(delta, mine[4 + d])
  local recounted = math.min(delta - fromHeld, mine[6 + d])
  local change = recounted - (mine[4 + d] - fromHeld) - others[d]
  mine[2 + d], mine[4 + d], mine[6 + d] = spent, 0, 0
  return change
end

-- A month counter after that change, and whether it has room for the slice and its reserve.
local function counterRoom(key, limit, change, wanted)
  if change == 0 and wanted == 0 then return 0, true end
  local used = math.max(0, tonumber(redis.call('GET', key) or '0') + change)
  return used, limit == 0 or limit - used >= wanted * (instances + 1)
end

local function counterSet(key, change, used, granted)
  if change == 0 and granted == 0 then return end
  redis.call('SET', key, string.format('%.0f', used + granted), 'PX', monthTtl)
end

local rg, rr, rreset, rwait = bucket(KEYS[1], tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]))
local mg, mwait = 0, 0
local mReturned, mWanted = tonumber(ARGV[10]), tonumber(ARGV[11])
if mReturned > 0 or mWanted > 0 then
  local _r, _s
  mg, _r, _s, mwait = bucket(KEYS[2], tonumber(ARGV[8]), tonumber(ARGV[9]), mReturned, mWanted)
end
local qmChange, qbChange = settle(1), settle(2)
local qmWanted, qbWanted = tonumber(ARGV[14]), tonumber(ARGV[17])
local qmUsed, qmRoom = counterRoom(KEYS[3], tonumber(ARGV[12]), qmChange, qmWanted)
local qbUsed, qbRoom = counterRoom(KEYS[4], tonumber(ARGV[15]), qbChange, qbWanted)
local qm, qb = 0, 0
if qmRoom and qbRoom then qm, qb = qmWanted, qbWanted end
counterSet(KEYS[3], qmChange, qmUsed, qm)
counterSet(KEYS[4], qbChange, qbUsed, qb)
mine[1], mine[2], mine[5], mine[6] = seq, clock, qm, qb
mine[9], mine[10], mine[11] = clock + reclaimAfter, clock + forgetAfter, margin
redis.call('HSET', KEYS[5], me, pack(mine), UP, string.format('%.0f %.0f', clock, upSince))
redis.call('PEXPIRE', KEYS[5], monthTtl)
return {rg, rr, tostring(rreset), tostring(rwait), mg, tostring(mwait), qm, qb, 1}
`;
