-- normlab.util: what the library modules and the FFI binding share: errors that point at the
-- user's line, option-table checks, enum arguments, value formatting, table copies.
local M = {}

-- "@/path/to/lua/normlab/": chunks whose name starts with this are the library's own. Errors
-- skip their frames (and C frames) so that the position reported is the caller's line, not
-- a line inside init.lua. nil when this file was not loaded from a file.
M.prefix = debug.getinfo(1, "S").source:match("^(@.*[/\\])[^/\\]*$")

local function is_library(info)
  return M.prefix ~= nil and info.source:sub(1, #M.prefix) == M.prefix
end

-- "chunk:line: " of the first Lua frame outside the library, or "".
function M.where()
  local level = 2
  while true do
    local info = debug.getinfo(level, "Sl")
    if info == nil then
      return ""
    end
    if info.currentline > 0 and not is_library(info) then
      return info.short_src .. ":" .. info.currentline .. ": "
    end
    level = level + 1
  end
end

function M.fail(msg)
  error(M.where() .. msg, 0)
end

function M.failf(fmt, ...)
  M.fail(string.format(fmt, ...))
end

-- A short rendering of any value for messages: strings quoted, shapes as {4, 8}.
function M.show(v)
  if type(v) == "string" then
    return "'" .. v .. "'"
  end
  if type(v) == "table" then
    local parts = {}
    for i = 1, #v do
      parts[i] = M.show(v[i])
    end
    return "{" .. table.concat(parts, ", ") .. "}"
  end
  return tostring(v)
end

-- Whether the list holds x.
function M.member(list, x)
  for _, v in ipairs(list) do
    if v == x then return true end
  end
  return false
end

-- A shallow copy of t.
function M.copy(t)
  local c = {}
  for k, v in pairs(t) do
    c[k] = v
  end
  return c
end

-- Checks that every key of the options table `opts` (nil allowed) is in the list `allowed`,
-- so that a typo is an error instead of a silently ignored option. Returns opts or {}.
function M.options(who, opts, allowed)
  if opts == nil then
    return {}
  end
  if type(opts) ~= "table" then
    M.failf("%s: options must be a table, got %s", who, type(opts))
  end
  local known = {}
  for _, k in ipairs(allowed) do
    known[k] = true
  end
  for k in pairs(opts) do
    if not known[k] then
      M.failf("unknown option %s for %s (expected: %s)", M.show(k), who,
        table.concat(allowed, ", "))
    end
  end
  return opts
end

-- An enum built from pairs {lua name, C enumerator name} and the binding's constants table:
-- .names (ordered), .value[name], .name[value]. Values come from the header, never from here.
function M.enum(constants, pairs_list)
  local e = {names = {}, value = {}, name = {}}
  for i, p in ipairs(pairs_list) do
    local v = constants[p[2]]
    assert(v ~= nil, "normlab: the binding has no constant " .. p[2])
    e.names[i] = p[1]
    e.value[p[1]] = v
    e.name[v] = p[1]
  end
  return e
end

-- The value of option `key` given by name; `default` (a name) when v is nil.
function M.choice(who, key, v, enum, default)
  if v == nil then
    v = default
  end
  local value = enum.value[v]
  if value == nil then
    M.failf("%s: option '%s' must be one of %s, got %s", who, key, table.concat(enum.names, ", "),
      M.show(v))
  end
  return value
end

return M
