-- normlab.settings: nl.settings(), nl.set(key, value), nl.get(key): the context's runtime
-- dispatch and harness settings, whose keys, ranges and docs come from the core.
local core = require("normlab.binding")
local util = require("normlab.util")

local M = {}

-- Integer settings come back as integers under Lua 5.4 (1024, not 1024.0).
local function value_of(v, integer)
  return integer and math.tointeger and math.tointeger(v) or v
end

-- nl.settings([device]): every setting with its value and default on device (default: the
-- default device), whose GPU model may change the defaults (origin names the model). Each is
-- the binding's nl_setting_desc with def as `default`, integer as a boolean and the numbers
-- (its f64 fields) of an integer setting as integers.
function M.list(device)
  local list = {}
  local raw = device ~= nil and core.settings(device.backend, device.index) or core.settings()
  for i, s in ipairs(raw) do
    local e = util.copy(s)
    e.integer = s.integer ~= 0
    e.user = s.user ~= 0
    for _, f in ipairs(core.structs.nl_setting_desc) do
      if f.kind == "f64" then
        e[f.name] = value_of(s[f.name], e.integer)
      end
    end
    e.default, e.def = e.def, nil
    list[i] = e
  end
  return list
end

-- The defaults that differ by GPU model (the binding's nl_model_default: model, key, value,
-- in the core's order): launches on a GPU whose name contains the model take them, unless
-- nl.set gave the setting a value.
function M.model_defaults()
  local list, ints = {}, {}
  for _, s in ipairs(M.list()) do
    ints[s.key] = s.integer
  end
  for i, m in ipairs(core.model_defaults()) do
    list[i] = util.copy(m)
    list[i].value = value_of(m.value, ints[m.key])
  end
  return list
end

local function distance(a, b)
  local prev = {}
  for j = 0, #b do
    prev[j] = j
  end
  for i = 1, #a do
    local cur = {[0] = i}
    for j = 1, #b do
      local cost = a:sub(i, i) == b:sub(j, j) and 0 or 1
      cur[j] = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
    end
    prev = cur
  end
  return prev[#b]
end

-- The setting described by key, or an error that names the closest keys.
local function setting(who, key)
  if type(key) ~= "string" then
    util.failf("%s: setting key must be a string, got %s", who, type(key))
  end
  local near = {}
  for _, s in ipairs(M.list()) do
    if s.key == key then
      return s
    end
    local d = distance(key, s.key)
    local last = key:match("[^.]+$")
    if d <= math.max(2, math.floor(#key / 3)) or last == s.key:match("[^.]+$") then
      near[#near + 1] = {key = s.key, d = d}
    end
  end
  table.sort(near, function(p, q)
    return p.d < q.d or (p.d == q.d and p.key < q.key)
  end)
  local names = {}
  for i = 1, math.min(3, #near) do
    names[i] = "'" .. near[i].key .. "'"
  end
  util.failf("%s: unknown setting %s (%s)", who, util.show(key), #names > 0
    and ("did you mean " .. table.concat(names, " or ") .. "?") or "nl.settings() lists them")
end

-- nl.set(key, value): booleans are 1 and 0; the core checks the range and integrality.
function M.set(key, value)
  setting("set", key)
  if type(value) == "boolean" then
    value = value and 1 or 0
  end
  if type(value) ~= "number" then
    util.failf("set: value of '%s' must be a number or a boolean, got %s", key, type(value))
  end
  core.set(key, value)
end

-- nl.reset(key) / nl.reset(): the setting (every setting) back to "not set", so that launches
-- take the default of the GPU they run on again.
function M.reset(key)
  if key == nil then
    core.reset(nil)
  else
    core.reset(setting("reset", key).key)
  end
end

-- The state of settings keys (a list), to hand to M.restore: each key's value and whether
-- nl.set gave it.
function M.save(keys)
  local saved = {}
  local by_key = {}
  for _, s in ipairs(M.list()) do
    by_key[s.key] = s
  end
  for i, k in ipairs(keys) do
    local s = by_key[k] or setting("save", k)
    saved[i] = {key = k, value = s.value, user = s.user}
  end
  return saved
end

-- Puts back what M.save saw: a value nl.set gave is set again, any other is reset, so that
-- a GPU model's default survives a scoped change.
function M.restore(saved)
  for i = #saved, 1, -1 do
    local s = saved[i]
    if s.user then
      core.set(s.key, s.value)
    else
      core.reset(s.key)
    end
  end
end

-- fn(...) with settings (a list of {key, value}) in force, restored after it whether it fails
-- or not; fn's results.
function M.with(list, fn, ...)
  if list == nil or #list == 0 then
    return fn(...)
  end
  local keys = {}
  for i, kv in ipairs(list) do
    keys[i] = kv[1]
  end
  local saved = M.save(keys)
  local function pack(...)
    return {n = select("#", ...), ...}
  end
  local res = pack(pcall(function(...)
    for _, kv in ipairs(list) do
      M.set(kv[1], kv[2])
    end
    return fn(...)
  end, ...))
  M.restore(saved)
  if not res[1] then
    error(res[2], 0)
  end
  return (table.unpack or unpack)(res, 2, res.n)
end

function M.get(key)
  local integer = setting("get", key).integer
  return value_of(core.get(key), integer)
end

return M
