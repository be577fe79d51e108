-- normlab.sweep: what identifies a sweep of nl.bench, its ordered cells and their shards.
--
--   sweep.cells(dtypes, Ms, Ns)      the ordered cell list: {dtype =, M =, N =} for each dtype,
--                                    then each M, then each N (the order nl.bench runs them)
--   sweep.in_shard(k, shard)         whether cell k (1-based) belongs to shard {I, N}: round
--                                    robin, cell k to shard (k - 1) % N + 1, so that every
--                                    shard gets the sizes of the whole range
--   sweep.shard_cells(count, shard)  the indices of a shard's cells, ascending
--   sweep.check_shard(who, v)        {I, N} with 1 <= I <= N from a table, or an error
--   sweep.parse_shard(s)             "2/4" -> {2, 4}, or nil and a message
--   sweep.hash(t)                    16 hex digits of a canonical text of a table (sorted keys,
--                                    integers without ".0", other numbers to 12 digits, so that
--                                    a JSON round trip keeps it)
--   sweep.canon(v)                   that canonical text
--   sweep.IDENTITY                   the fields of meta.sweep that make two shards one sweep
--
-- meta.sweep (set by nl.bench, kept by r:label and report.merge, docs/lua-api.md) holds the
-- sweep's identity: op ("<op>.<pass>"), variants (as the columns read), dtypes, M, N, device
-- ({kind =, model =}: shards may run on different devices of one model), weight, bias, cast,
-- offset, eps, reduce, check, stats, mode, outputs, graph, batches, reps, warmup_ms, batch_ms,
-- seed, version, and for fp8 outputs out_dtype, scaling, transpose and rowwise; cells (the count) and hash (sweep.hash of the identity fields; the settings,
-- kept in meta.settings, are compared on their own). meta.shard = {index =, count =, cells =}
-- says which part of it one run holds. Pure Lua, 5.1-compatible, no C library needed.
local sweep = {}

local format, concat, sort = string.format, table.concat, table.sort
local floor, huge = math.floor, math.huge

sweep.IDENTITY = {"op", "variants", "dtypes", "M", "N", "device", "weight", "bias", "cast", "offset",
  "eps", "reduce", "check", "stats", "mode", "outputs", "graph", "batches", "reps", "warmup_ms",
  "batch_ms", "seed", "version", "out_dtype", "scaling", "transpose", "rowwise", "cells"}

function sweep.cells(dtypes, Ms, Ns)
  local out = {}
  for _, dt in ipairs(dtypes) do
    for _, M in ipairs(Ms) do
      for _, N in ipairs(Ns) do
        out[#out + 1] = {dtype = dt, M = M, N = N}
      end
    end
  end
  return out
end

function sweep.in_shard(k, shard)
  return shard == nil or (k - 1) % shard[2] + 1 == shard[1]
end

function sweep.shard_cells(count, shard)
  local out = {}
  for k = 1, count do
    if sweep.in_shard(k, shard) then out[#out + 1] = k end
  end
  return out
end

local function positive_int(x)
  return type(x) == "number" and x >= 1 and x == floor(x) and x < huge
end

-- Returns {I, N} (a fresh table) or raises through fail(message).
function sweep.check_shard(who, v, fail)
  if v == nil then return nil end
  if type(v) ~= "table" or not positive_int(v[1]) or not positive_int(v[2]) or v[1] > v[2]
      or #v ~= 2 then
    local shown = type(v) == "table" and format("{%s, %s}", tostring(v[1]), tostring(v[2]))
      or tostring(v)
    fail(format("%s: option 'shard' must be {I, N} with 1 <= I <= N (integers), got %s", who,
      shown))
  end
  return {v[1], v[2]}
end

function sweep.parse_shard(s, what)
  what = what or "--shard"
  local i, n = tostring(s):match("^%s*(%d+)%s*/%s*(%d+)%s*$")
  i, n = tonumber(i), tonumber(n)
  if not i or n < 1 or i < 1 or i > n then
    return nil, format("%s: expected I/N with 1 <= I <= N (shard I of N, e.g. 2/4), got '%s'",
      what, tostring(s))
  end
  return {i, n}
end

-- Canonical text ---------------------------------------------------------------------------

local function canon(v)
  local t = type(v)
  if t == "number" then
    if v ~= v then return "nan" end
    if v == huge then return "inf" end
    if v == -huge then return "-inf" end
    if v == floor(v) and math.abs(v) < 2 ^ 53 then return format("%d", v) end
    return format("%.12g", v)
  elseif t == "string" then
    return format("%q", v)
  elseif t == "table" then
    local n = #v
    local keys, parts = {}, {}
    for k in pairs(v) do
      if not (type(k) == "number" and k >= 1 and k <= n and k == floor(k)) then
        keys[#keys + 1] = k
      end
    end
    sort(keys, function(a, b) return tostring(a) < tostring(b) end)
    for i = 1, n do parts[#parts + 1] = canon(v[i]) end
    for _, k in ipairs(keys) do parts[#parts + 1] = tostring(k) .. "=" .. canon(v[k]) end
    return "{" .. concat(parts, ",") .. "}"
  elseif v == nil then
    return "nil"
  end
  return tostring(v)
end
sweep.canon = canon

-- Two polynomial hashes modulo primes below 2^32, in doubles (no bit operations in 5.1):
-- every intermediate stays below 2^53, so Lua 5.4 and LuaJIT agree.
function sweep.hash(v)
  local s = canon(v)
  local h1, h2 = 2166136261 % 4294967291, 5381
  for i = 1, #s do
    local b = s:byte(i)
    h1 = (h1 * 257 + b) % 4294967291
    h2 = (h2 * 263 + b) % 4294967279
  end
  return format("%08x%08x", h1, h2)
end

-- The identity fields of a meta.sweep, as a fresh table.
function sweep.identity(s)
  local t = {}
  for _, k in ipairs(sweep.IDENTITY) do t[k] = s[k] end
  return t
end

-- meta.sweep with its hash recomputed (a fresh table).
function sweep.rehash(s)
  local t = {}
  for k, v in pairs(s) do t[k] = v end
  t.hash = sweep.hash(sweep.identity(t))
  return t
end

return sweep
