/**
 * The Lua side of the limiter: one EVALSHA per admit checks and takes every dimension of one
 * tenant atomically (docs/limits.md). ADMIT_LUA mirrors limitVerdict() in verdict.ts step by step;
 * change both together. The time comes from the caller (ARGV[1]) so both stores share one
 * injected clock and behave alike; instances are assumed NTP-synchronised.
 */
import { createHash } from 'node:crypto';

/**
 * KEYS: request tat, message tat, parked ZSET, month messages, month bytes (one hash tag).
 * ARGV: now ms, request interval, request burst, messages, message interval, message burst,
 * parked ('1'|'0'), parked limit, slot id, slot ttl ms, month message quota, ingress bytes,
 * month byte quota, month-key TTL ms (relative, so Redis's own clock need not match ours).
 * Returns {refused mask, request wait ms, message wait ms, remaining, reset ms}; floats as
 * strings because Redis truncates Lua numbers to integers.
 */
export const ADMIT_LUA = `
local now = tonumber(ARGV[1])
local eps = 1e-6
local reqT, reqB = tonumber(ARGV[2]), tonumber(ARGV[3])
local msgCost, msgT, msgB = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local parked = ARGV[7] == '1'
local bytesCost = tonumber(ARGV[12])
local qmLimit, qbLimit = tonumber(ARGV[11]), tonumber(ARGV[13])

local function gcraWait(tat, cost, t, b)
  return math.max(tat, now) + math.min(cost, b) * t - now - b * t
end

local refused = 0
local reqTat = tonumber(redis.call('GET', KEYS[1]) or '0')
local reqWait = gcraWait(reqTat, 1, reqT, reqB)
if reqWait > eps then refused = refused + 1 end
local msgTat, msgWait = 0, 0
if msgCost > 0 then
  msgTat = tonumber(redis.call('GET', KEYS[2]) or '0')
  msgWait = gcraWait(msgTat, msgCost, msgT, msgB)
  if msgWait > eps then refused = refused + 2 end
end
if parked then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  if redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[8]) then refused = refused + 4 end
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
  return {refused, tostring(reqWait), tostring(msgWait), remaining, tostring(backlog)}
end

local newReqTat = math.max(reqTat, now) + reqT
redis.call('SET', KEYS[1], string.format('%.17g', newReqTat), 'PX', math.ceil(newReqTat - now) + 1000)
if msgCost > 0 then
  local newMsgTat = math.max(msgTat, now) + msgCost * msgT
  redis.call('SET', KEYS[2], string.format('%.17g', newMsgTat), 'PX', math.ceil(newMsgTat - now) + 1000)
  redis.call('INCRBY', KEYS[4], msgCost)
  redis.call('PEXPIRE', KEYS[4], ARGV[14])
end
if parked then
  local ttl = tonumber(ARGV[10])
  redis.call('ZADD', KEYS[3], now + ttl, ARGV[9])
  redis.call('PEXPIRE', KEYS[3], ttl)
end
if bytesCost > 0 then
  redis.call('INCRBY', KEYS[5], bytesCost)
  redis.call('PEXPIRE', KEYS[5], ARGV[14])
end
local remaining = math.max(0, math.floor((full - (newReqTat - now)) / reqT + eps))
return {0, '0', '0', remaining, tostring(newReqTat - now)}
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
