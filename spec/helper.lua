-- Shared by the specs; loaded by busted before them (.busted: helper), and by specs through
-- require("spec.helper") for its functions.
--
--   assert.allclose(a, ref [, opts])   a close to ref by nl.compare; opts: atol, rtol (default
--       nl.tolerance(dtype, output, M)), dtype (the op's activation dtype, default a's),
--       output ("y", "dx", "dw", ...; default "y"), M (rows summed into dw/db), seed (printed
--       on failure with the Cmp numbers, so a failure can be replayed).
--   helper.grid{M = {...}, N = {...}, dtype = {...}}  the cartesian product as a list of
--       {M =, N =, dtype =} tables, in a fixed order.
--   helper.ODD                        sizes that catch tail handling (1, 7, 37, ...).
--   helper.cuda                       the first CUDA device, or nil. Specs tag GPU tests
--                                     "#cuda" and register them with
--                                     `local it_cuda = helper.cuda and it or pending`, so that
--                                     they show as pending on a machine without a GPU.
--   helper.flat(buf)                  the values of a buffer as one flat list.
--   local keep, release = helper.keeper(after_each)   buffers passed to keep(...) (which
--                                     returns them) are freed after each test of the calling
--                                     file (busted's hooks live in the spec's environment, so
--                                     the spec hands its after_each over), or by release().
--   helper.raises(msg, fn, ...)       fn(...) raises exactly msg, reported at the user's line:
--                                     the spec's when fn is a closure written there, this
--                                     file's pcall when fn is a library function, never a line
--                                     inside the library.
--   helper.with_settings({key = value, ...}, fn)   fn() with those settings, restored after
--                                     it whether it fails or not; a failure is re-raised
--                                     prefixed with the settings ("with cpu.threads = 3: ...").
--   helper.EXE                        the normlab executable: $NORMLAB_EXE, default
--                                     $NORMLAB_BUILD/normlab (build/normlab), as .busted finds
--                                     the library (specs run from the repository root).
--   helper.run(args [, {stdin =, env =, exe =}])  the executable (or exe, another program)
--                                     with shell-quoted arguments, stdin from the text given
--                                     (default empty), env a "NAME=value" prefix: exit
--                                     status, stdout, stderr.
--   helper.run_script(path, argv [, settings])  a script run in this process (so under this
--                                     binding), argv its arg table, stdout captured, stderr
--                                     dropped, with settings in force: ok, stdout, error.
--   helper.quote(s), helper.read_file(path) ("" when absent), helper.write_file(path, text)
--   helper.untimed(rows)              bench rows without the fields a second run measures anew.
--   helper.table_shape(text)          a printed table's column names (cols), its lines' keys
--                                     (M N dtype), how many cells skip and FAIL, and whether
--                                     it has a geometric mean: what two runs of one sweep
--                                     print alike (the numbers are timings).
local assert = require("luassert")
local say = require("say")
local nl = require("normlab")
local nl_settings = require("normlab.settings")

local helper = {}

-- No spec consults the user's tuning cache (~/.cache/normlab): `auto` takes the built-in
-- thresholds unless a spec points nl.tune_cache at a file of its own.
nl.tune_cache(false)

helper.ODD = {1, 7, 37, 111, 199, 1023, 1025, 4097}

for _, d in ipairs(nl.devices()) do
  if d.kind == "cuda" then
    helper.cuda = d
    break
  end
end

function helper.keeper(after_each)
  local pool = {}
  local function keep(...)
    for i = 1, select("#", ...) do
      local b = select(i, ...)
      if b ~= nil then
        pool[#pool + 1] = b
      end
    end
    return ...
  end
  local function release()
    for _, b in ipairs(pool) do
      b:free()
    end
    pool = {}
  end
  after_each(release)
  return keep, release
end

function helper.with_settings(settings, fn)
  local keys = {}
  for k in pairs(settings) do
    keys[#keys + 1] = k
  end
  -- restored as normlab.settings.with does: a setting the user had not set goes back to "not
  -- set", keeping the GPU model's default
  local saved = nl_settings.save(keys)
  local ok, err = pcall(function()
    for _, k in ipairs(keys) do
      nl.set(k, settings[k])
    end
    fn()
  end)
  nl_settings.restore(saved)
  if not ok then
    table.sort(keys)
    for i, k in ipairs(keys) do
      keys[i] = k .. " = " .. tostring(settings[k])
    end
    error("with " .. table.concat(keys, ", ") .. ": " .. tostring(err), 0)
  end
end

function helper.flat(b)
  return b:read(0, #b)
end

function helper.raises(msg, fn, ...)
  local ok, err = pcall(fn, ...)
  assert.is_false(ok, "expected an error: " .. msg)
  local file, text = tostring(err):match("^(.-):%d+: (.*)$")
  assert.are.equal(msg, text)
  if file ~= debug.getinfo(1, "S").short_src then
    assert.are.equal(debug.getinfo(2, "S").short_src, file)
  end
end

-- Keys in sorted order so that the product is the same on every run and interpreter.
function helper.grid(axes)
  local keys = {}
  for k in pairs(axes) do
    keys[#keys + 1] = k
  end
  table.sort(keys)
  local cells = {{}}
  for _, k in ipairs(keys) do
    local values = type(axes[k]) == "table" and axes[k] or {axes[k]}
    local next_cells = {}
    for _, cell in ipairs(cells) do
      for _, v in ipairs(values) do
        local c = {}
        for ck, cv in pairs(cell) do
          c[ck] = cv
        end
        c[k] = v
        next_cells[#next_cells + 1] = c
      end
    end
    cells = next_cells
  end
  return cells
end

local function allclose(state, arguments)
  local a, ref, opts = arguments[1], arguments[2], arguments[3] or {}
  local atol, rtol = opts.atol, opts.rtol
  if atol == nil or rtol == nil then
    local rows = a.ndim == 2 and a.shape[1] or 1
    local ta, tr = nl.tolerance(opts.dtype or a.dtype, opts.output or "y", opts.M or rows)
    atol, rtol = atol or ta, rtol or tr
  end
  local cmp = nl.compare(a, ref, {atol = atol, rtol = rtol})
  -- Replace the arguments by one preformatted line: luassert prints them in its message.
  arguments.n = 1
  arguments[1] = string.format("%s %s (seed %s): %s", opts.output or "y", opts.dtype or a.dtype,
    tostring(opts.seed or a.seed), tostring(cmp))
  arguments[2], arguments[3] = nil, nil
  arguments.nofmt = {true}
  return cmp.ok
end

say:set("assertion.allclose.positive", "Expected buffers to be close:\n%s")
say:set("assertion.allclose.negative", "Expected buffers to differ:\n%s")
assert:register("assertion", "allclose", allclose, "assertion.allclose.positive",
  "assertion.allclose.negative")

helper.EXE = os.getenv("NORMLAB_EXE") or
  ((os.getenv("NORMLAB_BUILD") or "") ~= "" and os.getenv("NORMLAB_BUILD") or "build") .. "/normlab"

function helper.quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

function helper.read_file(path)
  local f = io.open(path, "r")
  if not f then return "" end
  local s = f:read("*a")
  f:close()
  return s
end

function helper.write_file(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

-- The status comes through the shell because io.popen's close reports none under LuaJIT.
function helper.run(args, opts)
  opts = opts or {}
  local q = helper.quote
  if not opts.exe then
    local f = io.open(helper.EXE, "r")
    if not f then
      error(helper.EXE .. " not found: build first (cmake --build build) or set NORMLAB_EXE", 2)
    end
    f:close()
  end
  local quoted = {}
  for i, a in ipairs(args) do quoted[i] = q(a) end
  local errf, inf = os.tmpname(), os.tmpname()
  helper.write_file(inf, opts.stdin or "")
  local p = io.popen((opts.env and (opts.env .. " ") or "") .. q(opts.exe or helper.EXE) .. " " ..
    table.concat(quoted, " ") .. " <" .. q(inf) .. " 2>" .. q(errf) .. "; echo \"__rc=$?\"")
  local out = p:read("*a")
  p:close()
  local err = helper.read_file(errf)
  os.remove(errf)
  os.remove(inf)
  local rc = tonumber(out:match("__rc=(%d+)%s*$"))
  return rc, (out:gsub("__rc=%d+%s*$", "")), err
end

function helper.run_script(path, argv, settings)
  local unpack_ = table.unpack or unpack
  argv[0] = path
  local chunk = assert(loadfile(path))
  local out_path = os.tmpname()
  local out = assert(io.open(out_path, "w"))
  local saved_arg, saved_out, saved_err = rawget(_G, "arg"), io.stdout, io.stderr
  _G.arg, io.stdout, io.stderr = argv, out, assert(io.open("/dev/null", "w"))
  local ok, err = pcall(helper.with_settings, settings or {}, function() chunk(unpack_(argv)) end)
  io.stderr:close()
  _G.arg, io.stdout, io.stderr = saved_arg, saved_out, saved_err
  out:close()
  local text = helper.read_file(out_path)
  os.remove(out_path)
  return ok, text, err
end

local TIMING = {ms = true, min_ms = true, max_ms = true, gbps = true, extra_gbps = true, pct = true}

function helper.untimed(rows)
  local out = {}
  for i, row in ipairs(rows) do
    local t = {}
    for k, v in pairs(row) do
      if not TIMING[k] then t[k] = v end
    end
    out[i] = t
  end
  return out
end

function helper.table_shape(text)
  local head = text:match("\n(%s*M%s+N%s+dtype[^\n]*)\n")
  local cols = {}
  for c in (head or ""):gmatch("%S+") do cols[#cols + 1] = c end
  local keys = {}
  for line in text:gmatch("\n%s*(%d+%s+%d+%s+%w+)%s") do keys[#keys + 1] = line end
  return {cols = cols, keys = keys, skip = select(2, text:gsub("skip", "")),
    fail = select(2, text:gsub("FAIL", "")), geo = text:find("geometric mean", 1, true) ~= nil}
end

return helper
