-- normlab.check: the checks of values on their way into the binding, written once for both
-- bindings. The bindings trust what they get, except what only they can tell: that a value is
-- one of their buffers and still alive. So every value a user hands over passes through here
-- (or through a stricter check of the module that takes it) before the binding sees it.
--
-- Tables that become structs of normlab.h (nl_norm_args, nl_bench_opts) are checked against
-- the binding's `structs`, which the build generates from the header: a field added there is
-- accepted here, and reaches the core, without an edit.
local core = require("normlab.binding")
local util = require("normlab.util")

local M = {}

-- A number as itself, anything else as its type name: "got 1.5", "got string".
local function shown(v)
  return type(v) == "number" and tostring(v) or type(v)
end

function M.number(v, what)
  if type(v) ~= "number" then
    util.failf("argument '%s' must be a number, got %s", what, type(v))
  end
  return v
end

function M.string(v, what)
  if type(v) ~= "string" then
    util.failf("argument '%s' must be a string, got %s", what, type(v))
  end
  return v
end

-- [low, high) and C type of the integer kinds of cmake/gen_structs.cmake. 64-bit values stop
-- where Lua 5.4's integers do, since the C module reads them as lua_Integer.
local RANGE = {
  i32 = {-2 ^ 31, 2 ^ 31, "int32_t"}, u32 = {0, 2 ^ 32, "uint32_t"},
  i64 = {-2 ^ 63, 2 ^ 63, "int64_t"}, u64 = {0, 2 ^ 63, "uint64_t"},
}

-- An integer of kind (default i64): the C module would truncate anything else one way and
-- LuaJIT's conversions another.
function M.integer(v, what, kind)
  local r = RANGE[kind or "i64"]
  if type(v) ~= "number" or v ~= math.floor(v) or v < -2 ^ 63 or v >= 2 ^ 63 then
    util.failf("argument '%s' must be an integer, got %s", what, shown(v))
  end
  if v < r[1] or v >= r[2] then
    util.failf("argument '%s' must fit %s, got %s", what, r[3], shown(v))
  end
  return v
end

-- name -> kind, per struct
local kinds = {}
for name, fields in pairs(core.structs) do
  kinds[name] = {}
  for _, f in ipairs(fields) do
    kinds[name][f.name] = f.kind
  end
end

local function field_names(struct)
  local names = {}
  for i, f in ipairs(core.structs[struct]) do
    names[i] = f.name
  end
  return table.concat(names, ", ")
end

-- The table t (named `what` in messages) that the binding turns into the struct `struct`:
-- string keys that name its fields (a typo must not silently become a missing buffer),
-- numbers of the field's kind. Buffers are the binding's to check.
function M.struct(what, struct, t)
  for k, v in pairs(t) do
    if type(k) ~= "string" then
      util.failf("%s: keys must be strings, got %s", what, type(k))
    end
    local kind = kinds[struct][k]
    if kind == nil then
      util.failf("%s: unknown field '%s' (expected: %s)", what, k, field_names(struct))
    elseif kind == "f64" then
      M.number(v, k)
    elseif RANGE[kind] then
      M.integer(v, k, kind)
    elseif kind ~= "buffer" then
      util.failf("%s: field '%s' (%s) cannot be given from Lua", what, k, kind)
    end
  end
  return t
end

return M
