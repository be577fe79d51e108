-- The documentation names only what exists. The catalog of variants and settings is
-- generated from the registry (`normlab --list`, `nl.catalog()`), never copied into a
-- document, so that a new variant or setting needs no edit there; what the README and the
-- guides in docs/ do name must be registered: every `<op>.<pass>.<strategy>`
-- a variant, every `<section>.<key>` a setting, every `<op>.<pass>` an op and pass.
-- docs/kernels.md, the record of what was measured, may name what was tried and removed.
-- Every experiment script is in the README, so that a new one cannot go unexplained.
local nl = require("normlab")

local PREFIXES = {cpu = true, bench = true, cuda = true, rmsnorm = true, layernorm = true,
  transpose = true,
  add_rmsnorm = true}
-- File names that start like a setting (`bench.c`, `cuda.c`) are not names to check.
local EXTENSIONS = {c = true, h = true, cu = true, cuh = true, lua = true, md = true, py = true,
  sh = true, so = true, json = true}

local function read(path)
  local f = assert(io.open(path, "r"))
  local text = f:read("*a")
  f:close()
  return text
end

local function documents()
  local list = {"README.md"}
  local p = io.popen("ls docs/*.md 2>/dev/null")
  for path in p:lines() do
    if path ~= "docs/kernels.md" then
      list[#list + 1] = path
    end
  end
  p:close()
  return list
end

local function known()
  local names = {}
  for _, v in ipairs(nl.variants()) do
    names[v.name] = true
    names[v.op .. "." .. v.pass] = true
  end
  for _, s in ipairs(nl.settings()) do
    names[s.key] = true
  end
  return names
end

-- The dotted names in a text that look like a variant, op.pass or setting (a sentence's
-- final dot is not part of a name).
local function names_in(text)
  local found = {}
  for name in text:gmatch("%f[%w_.]([%a_]+%.[%a_][%w_.]*)") do
    name = name:gsub("%.+$", "")
    local first = name:match("^[%a_]+")
    if PREFIXES[first] and not EXTENSIONS[name:match("[^.]+$")] then
      found[#found + 1] = name
    end
  end
  return found
end

describe("documentation", function()
  it("names only registered variants and settings", function()
    local names = known()
    for _, path in ipairs(documents()) do
      for _, name in ipairs(names_in(read(path))) do
        assert.is_true(names[name] == true, path .. " names `" .. name .. "`, which is not registered")
      end
    end
  end)

  it("the README names every experiment script", function()
    local readme = read("README.md")
    local p = io.popen("ls experiments/*.lua")
    local n = 0
    for path in p:lines() do
      n = n + 1
      assert.truthy(readme:find("`" .. path, 1, true), "README.md does not name " .. path)
    end
    p:close()
    assert.is_true(n > 0)
  end)

  it("finds the names it checks (the check is not vacuous)", function()
    local found = names_in("see `rmsnorm.bwd.persistent`, `cuda.pdl`, `core/cuda.c` and `bench.c`")
    assert.are.same({"rmsnorm.bwd.persistent", "cuda.pdl"}, found)
    local total = 0
    for _, path in ipairs(documents()) do
      total = total + #names_in(read(path))
    end
    assert.is_true(total > 0)
  end)
end)
