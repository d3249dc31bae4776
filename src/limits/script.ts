/**
 * The Lua side of the limiter: one EVALSHA checks and takes every dimension of one tenant
 * atomically, for each of that tenant's admits of one event-loop turn (docs/limits.md).
 * ADMIT_LUA mirrors limitVerdict() in verdict.ts step by step; change both together. The time
 * comes from the caller (each admit's first value) so both stores share one injected clock and
 * behave alike; instances are assumed NTP-synchronised.
 */
import { createHash } from 'node:crypto';

/** Values per admit in ADMIT_LUA's ARGV (after the leading count). */
export const ADMIT_ARGS = 14;

/**
 * KEYS: request tat, message tat, parked ZSET, month messages, month bytes (one tenant, one hash tag).
 * ARGV: n, then n blocks of 14 values, one per admit of that tenant, decided in order (each sees
 * what the ones before it took, exactly as n calls would): now ms, request interval, request
 * burst, messages, message interval, message burst, parked ('1'|'0'), parked limit, slot id, slot
 * ttl ms, month message quota, ingress bytes, month byte quota, month-key TTL ms (relative, so
 * Redis's own clock need not match ours).
 * Returns 5 values per admit, flat: refused mask, request wait ms, message wait ms, remaining,
 * reset ms; floats as strings because Redis truncates Lua numbers to integers.
 */
export const ADMIT_LUA = `
local eps = 1e-6

local function gcraWait(tat, now, cost, t, b)
  return math.max(tat, now) + math.min(cost, b) * t - now - b * t
end

local function admit(o)
  local now = tonumber(ARGV[o + 1])
  local reqT, reqB = tonumber(ARGV[o + 2]), tonumber(ARGV[o + 3])
  local msgCost, msgT, msgB = tonumber(ARGV[o + 4]), tonumber(ARGV[o + 5]), tonumber(ARGV[o + 6])
  local parked = ARGV[o + 7] == '1'
  local bytesCost = tonumber(ARGV[o + 12])
  local qmLimit, qbLimit = tonumber(ARGV[o + 11]), tonumber(ARGV[o + 13])

  local refused = 0
  local reqTat = tonumber(redis.call('GET', KEYS[1]) or '0')
  local reqWait = gcraWait(reqTat, now, 1, reqT, reqB)
  if reqWait > eps then refused = refused + 1 end
  local msgTat, msgWait = 0, 0
  if msgCost > 0 then
    msgTat = tonumber(redis.call('GET', KEYS[2]) or '0')
    msgWait = gcraWait(msgTat, now, msgCost, msgT, msgB)
    if msgWait > eps then refused = refused + 2 end
  end
  if parked then
    redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
    if redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[o + 8]) then refused = refused + 4 end
  end
  if msgCost > 0 and qmLimit > 0 and tonumber(redis.call('GET', KEYS[4]) or '0') + msgCost > qmLimit then
    refused = refused + 8
  end
  if bytesCost > 0 and qbLimit > 0 and tonumber(redis.call('GET', KEYS[5]) or '0') + bytesCost > qbLimit then
    refused = refused + 16
  end

  local full = reqB * reqT
  if refused ~= 0 then
    local backlog = math.max(reqTat, now) - now
    if bit.band(refused, 1) == 0 then reqWait = 0 end
    if bit.band(refused, 2) == 0 then msgWait = 0 end
    local remaining = math.max(0, math.floor((full - backlog) / reqT + eps))
    return refused, tostring(reqWait), tostring(msgWait), remaining, tostring(backlog)
  end

  local newReqTat = math.max(reqTat, now) + reqT
  redis.call('SET', KEYS[1], string.format('%.17g', newReqTat), 'PX', math.ceil(newReqTat - now) + 1000)
  if msgCost > 0 then
    local newMsgTat = math.max(msgTat, now) + msgCost * msgT
    redis.call('SET', KEYS[2], string.format('%.17g', newMsgTat), 'PX', math.ceil(newMsgTat - now) + 1000)
    redis.call('INCRBY', KEYS[4], msgCost)
    redis.call('PEXPIRE', KEYS[4], ARGV[o + 14])
  end
  if parked then
    local ttl = tonumber(ARGV[o + 10])
    redis.call('ZADD', KEYS[3], now + ttl, ARGV[o + 9])
    redis.call('PEXPIRE', KEYS[3], ttl)
  end
  if bytesCost > 0 then
    redis.call('INCRBY', KEYS[5], bytesCost)
    redis.call('PEXPIRE', KEYS[5], ARGV[o + 14])
  end
  local remaining = math.max(0, math.floor((full - (newReqTat - now)) / reqT + eps))
  return 0, '0', '0', remaining, tostring(newReqTat - now)
end

local out = {}
for i = 0, tonumber(ARGV[1]) - 1 do
  local a, b, c, d, e = admit(1 + i * ${ADMIT_ARGS})
  local k = i * 5
  out[k + 1], out[k + 2], out[k + 3], out[k + 4], out[k + 5] = a, b, c, d, e
end
return out
`;

/**
 * Instance heartbeat for failMode local. KEYS: instances ZSET. ARGV: now ms, instance id,
 * live window ms. Returns the number of instances seen within the window.
 */
export const HEARTBEAT_LUA = `
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', tonumber(ARGV[1]) - tonumber(ARGV[3]))
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]) * 2)
return redis.call('ZCARD', KEYS[1])
`;

/** SHA1 of a script, as EVALSHA names it. */
export function scriptSha(lua: string): string {
  return createHash('sha1').update(lua).digest('hex');
}
