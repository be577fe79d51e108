-- normlab.tune: nl.tune{...}, the autotuner, and the persistent cache that `auto` consults.
--
-- nl.tune times every candidate (a variant under one combination of the settings values
-- given) with nl.bench, which checks each against `ref` first; a candidate whose check failed
-- (or that was skipped) can never win. Per shape bucket (op, pass, dtype, log2 M and log2 N
-- each rounded to a half) it records the winner with its settings, its margin over the
-- runner-up and every candidate's timing, in a JSON file per device.
--
-- `auto` is resolved here, in the Lua layer, before the core is called (dispatch()): the
-- entry of the nearest bucket of that op, pass and dtype (in log2 M and log2 N) names a
-- concrete variant and the settings to run it with, applied for that call only; without an
-- entry (or when the winner does not take the shape) the core's built-in thresholds resolve
-- `auto` as before. The core never reads the file: lua -> core -> kernels.
--
-- The file is valid for one key: device name, SM count (CPU: worker threads), compute
-- capability, driver and runtime versions (CUDA), normlab version and build id (a hash of
-- the kernels build, nl_build_id). A file whose key differs, or that cannot be read or
-- decoded, is ignored with one warning per file and process; tuning rewrites it.
local core = require("normlab.binding")
local buffer = require("normlab.buffer")
local settings = require("normlab.settings")
local util = require("normlab.util")

local M = {}

M.FORMAT = "normlab-tune/2"

local override        -- nil: NORMLAB_TUNE_CACHE or the default place; false: off; a path
local memo = {}       -- file -> {state =, data =, reason =}, as last read
local warned = {}     -- file -> true once a warning was given

-- Replaceable, so that specs can watch the warnings.
function M.warn(msg)
  io.stderr:write("normlab: warning: ", msg, "\n")
end

local function warn_once(file, msg)
  if not warned[file] then
    warned[file] = true
    M.warn(msg)
  end
end

---- where ----

local function file_name(dev)
  local name = (dev.info.name or ""):gsub("[^%w%-]+", "_"):gsub("^_+", ""):gsub("_+$", "")
  return dev.kind .. "-" .. (name ~= "" and name or "unknown") .. ".json"
end

-- The cache file of dev, or nil when caching is off. NORMLAB_TUNE_CACHE (or nl.tune_cache's
-- path) is a file when it ends in .json, else a directory holding one file per device;
-- "off" turns the cache off. Default: $XDG_CACHE_HOME/normlab/, else ~/.cache/normlab/.
function M.location(dev)
  if override == false then
    return nil
  end
  local base = override or os.getenv("NORMLAB_TUNE_CACHE")
  if base == "off" then
    return nil
  end
  if base == nil or base == "" then
    local xdg, home = os.getenv("XDG_CACHE_HOME"), os.getenv("HOME")
    if xdg ~= nil and xdg ~= "" then
      base = xdg .. "/normlab"
    elseif home ~= nil and home ~= "" then
      base = home .. "/.cache/normlab"
    else
      return nil
    end
  end
  if base:match("%.json$") then
    return base
  end
  return (base:gsub("/+$", "")) .. "/" .. file_name(dev)
end

---- the key ----

-- What a cache file is valid for, on dev now (the CPU's worker threads follow cpu.threads).
function M.key(dev)
  local i = core.device_info(dev.backend, dev.index)
  return {device = i.name, backend = dev.kind, sm_count = i.sm_count,
    cc = string.format("%d.%d", i.cc_major, i.cc_minor), driver = i.driver_version,
    runtime = i.runtime_version, version = core.version(), build = core.build_id()}
end

local KEY_FIELDS = {"device", "backend", "sm_count", "cc", "driver", "runtime", "version",
  "build"}

-- The first field in which two keys differ, or nil.
local function key_diff(a, b)
  for _, f in ipairs(KEY_FIELDS) do
    if a[f] ~= b[f] then
      return f
    end
  end
end

---- reading and writing ----

local function codec()
  return require("normlab.report").json_codec()
end

local function read_all(file)
  local f = io.open(file, "rb")
  if f == nil then
    return nil
  end
  local text = f:read("*a")
  f:close()
  return text
end

-- Whether an entry holds what dispatch reads.
local function valid_entry(e)
  return type(e) == "table" and type(e.op) == "string" and type(e.pass) == "string"
    and type(e.dtype) == "string" and type(e.mb) == "number" and type(e.nb) == "number"
    and type(e.winner) == "table" and type(e.winner.variant) == "string"
    and (e.winner.settings == nil or type(e.winner.settings) == "table")
end

-- {state = "loaded" | "missing" | "stale" | "corrupt", data =, reason =} for file and key.
local function decode(file, key)
  local text = read_all(file)
  if text == nil then
    return {state = "missing"}
  end
  local _, dec = codec()
  local ok, data = pcall(dec, text)
  if not ok or type(data) ~= "table" or data.format ~= M.FORMAT or type(data.key) ~= "table"
      or type(data.entries) ~= "table" then
    return {state = "corrupt", reason = not ok and tostring(data) or "not a " .. M.FORMAT .. " file"}
  end
  for name, e in pairs(data.entries) do
    if type(name) ~= "string" or not valid_entry(e) then
      return {state = "corrupt", reason = "entry " .. tostring(name) .. " is malformed"}
    end
  end
  local diff = key_diff(data.key, key)
  if diff then
    return {state = "stale", data = data, reason = string.format("%s is %s here, %s in the file",
      diff, tostring(key[diff]), tostring(data.key[diff]))}
  end
  return {state = "loaded", data = data}
end

-- The cache of dev as read (once per file and key until it changes), warning once about a
-- file that is ignored.
function M.load(dev)
  local file = M.location(dev)
  if file == nil then
    return {state = "off"}
  end
  local key = M.key(dev)
  local c = memo[file]
  if c == nil or key_diff(c.key, key) then
    c = decode(file, key)
    c.key, c.file = key, file
    memo[file] = c
    if c.state == "stale" then
      warn_once(file, string.format("tuning cache %s is for another device or build (%s); "
        .. "ignored, `auto` uses the built-in thresholds", file, c.reason))
    elseif c.state == "corrupt" then
      warn_once(file, string.format("tuning cache %s cannot be read (%s); ignored, `auto` uses "
        .. "the built-in thresholds", file, c.reason))
    end
  end
  return c
end

local function shell_quote(s)
  return "'" .. s:gsub("'", "'\\''") .. "'"
end

-- Writes data to file (through a temporary file and a rename, so that a reader never sees
-- half of it).
local function save(file, data)
  local dir = file:match("^(.*)/[^/]*$")
  if dir and dir ~= "" then
    os.execute("mkdir -p " .. shell_quote(dir))
  end
  local enc = codec()
  local tmp = file .. ".tmp"
  local f, err = io.open(tmp, "wb")
  if f == nil then
    util.failf("tune: cannot write the cache: %s", tostring(err))
  end
  f:write(enc(data), "\n")
  f:close()
  local ok, err2 = os.rename(tmp, file)
  if not ok then
    util.failf("tune: cannot write the cache %s: %s", file, tostring(err2))
  end
  memo[file] = nil
end

---- buckets ----

-- log2 x to the nearest half: half octaves keep apart the widths a power of two does not
-- divide (12288 from 16384, 96 from 128, 5120 from 4096), whose winners differ.
local function log2b(x)
  return math.floor(2 * math.log(x) / math.log(2) + 0.5) / 2
end

function M.bucket(op, pass, dtype, rows, cols)
  local mb, nb = log2b(rows), log2b(cols)
  return string.format("%s.%s.%s.m%g.n%g", op, pass, dtype, mb, nb), mb, nb
end

-- The entry of the nearest bucket (in log2 M and log2 N) for op, pass and dtype, and its
-- name; nil when the cache has none.
function M.lookup(dev, op, pass, dtype, rows, cols)
  local c = M.load(dev)
  if c.state ~= "loaded" then
    return nil
  end
  local _, mb, nb = M.bucket(op, pass, dtype, rows, cols)
  local best, best_name, best_d
  for name, e in pairs(c.data.entries) do
    if e.op == op and e.pass == pass and e.dtype == dtype then
      local d = (e.mb - mb) ^ 2 + (e.nb - nb) ^ 2
      if best == nil or d < best_d or (d == best_d and name < best_name) then
        best, best_name, best_d = e, name, d
      end
    end
  end
  return best, best_name
end

-- A settings table {key = value} as a sorted list of {key, value}.
local function settings_list(t)
  local list = {}
  for k, v in pairs(t or {}) do
    list[#list + 1] = {k, v}
  end
  table.sort(list, function(a, b) return a[1] < b[1] end)
  return list
end

-- How `auto` runs for variant name (a full registry name) on args (nl_norm_args fields):
-- {name = the variant to hand the core, settings = list of {key, value} to apply around the
-- call, dispatch = "tuned" | "default", bucket = the entry's bucket}. Names other than
-- <op>.<pass>.auto come back as they are, with no dispatch.
function M.dispatch(name, args)
  local op, pass, strategy = name:match("^([^.]+)%.([^.]+)%.([^.]+)$")
  if strategy ~= "auto" or args.x == nil or not core.is_buffer(args.x) then
    return {name = name}
  end
  local x = args.x
  local ok, dev = pcall(function() return x.device end)
  if not ok or dev == nil or M.location(dev) == nil then
    return {name = name, dispatch = "default"}
  end
  local shape = x.shape
  local e, bucket = M.lookup(dev, op, pass, x.dtype, #shape == 2 and shape[1] or 1,
    shape[#shape])
  if e ~= nil then
    local cand = op .. "." .. pass .. "." .. e.winner.variant
    local list = settings_list(e.winner.settings)
    local fits = pcall(settings.with, list, function()
      assert(core.supports(cand, args))
    end)
    if fits then
      return {name = cand, settings = list, dispatch = "tuned", bucket = bucket}
    end
  end
  return {name = name, dispatch = "default"}
end

---- nl.tune ----

local KEYS = {"op", "pass", "M", "N", "dtype", "variants", "settings", "budget_s", "device",
  "weight", "bias", "mode", "outputs", "graph", "batches", "reps", "warmup_ms", "batch_ms",
  "tolerance", "cache", "progress", "seed"}

local function list_of(v)
  if type(v) ~= "table" then
    return {v}
  end
  return v
end

-- The cartesian product of the settings axes, keys in sorted order: a list of {key = value}.
local function combinations(axes)
  local keys = {}
  for k, values in pairs(axes or {}) do
    if type(k) ~= "string" then
      util.failf("tune: option 'settings' maps setting keys to lists of values, got key %s",
        util.show(k))
    end
    settings.get(k)   -- an unknown key fails here, naming close ones
    if type(values) ~= "table" and type(values) ~= "number" or #list_of(values) == 0 then
      util.failf("tune: settings[%s] must be a number or a non-empty list of numbers", k)
    end
    keys[#keys + 1] = k
  end
  table.sort(keys)
  local combos = {{}}
  for _, k in ipairs(keys) do
    local grown = {}
    for _, c in ipairs(combos) do
      for _, v in ipairs(list_of(axes[k])) do
        if type(v) ~= "number" then
          util.failf("tune: settings[%s] must hold numbers, got %s", k, util.show(v))
        end
        local n = util.copy(c)
        n[k] = v
        grown[#grown + 1] = n
      end
    end
    combos = grown
  end
  return combos
end

local function label(c)
  local parts = {}
  for _, kv in ipairs(settings_list(c)) do
    parts[#parts + 1] = kv[1] .. "=" .. tostring(kv[2])
  end
  return #parts > 0 and table.concat(parts, ",") or "defaults"
end

local function now()
  return os.time()
end

-- nl.tune{op=, pass=?, M=, N=, dtype=, variants=?, settings=?, budget_s=?, ...} -> result
-- (docs/lua-api.md).
function M.tune(spec)
  if type(spec) ~= "table" then
    util.failf("tune: expected a table of options, got %s", type(spec))
  end
  local s = util.options("tune", spec, KEYS)
  if type(s.op) ~= "string" then
    util.fail("tune: option 'op' is required: rmsnorm, layernorm or add_rmsnorm (or <op>.<pass>)")
  end
  local op, pass = s.op:match("^([^.]+)%.([^.]+)$")
  op = op or s.op
  if pass ~= nil and s.pass ~= nil and s.pass ~= pass then
    util.failf("tune: op %s and pass %s disagree", util.show(s.op), util.show(s.pass))
  end
  pass = pass or s.pass or "fwd"
  local opname = op .. "." .. pass
  local dev = buffer.device(s.device)
  local variants = s.variants
  if variants == nil then
    variants = {}
    for _, v in ipairs(require("normlab.ops").variants{op = op, pass = pass, backend = dev.kind}) do
      if v.strategy ~= "ref" and v.strategy ~= "auto" then
        variants[#variants + 1] = v.strategy
      end
    end
  end
  variants = list_of(variants)
  for _, v in ipairs(variants) do
    local strategy = type(v) == "string" and v:match("([^.]+)$")
    if strategy == "auto" or strategy == "ref" then
      util.failf("tune: variant %s cannot be a candidate (candidates are concrete strategies "
        .. "other than the oracle)", util.show(v))
    end
  end
  if s.budget_s ~= nil and (type(s.budget_s) ~= "number" or not (s.budget_s > 0)) then
    util.failf("tune: option 'budget_s' must be a number > 0, got %s", util.show(s.budget_s))
  end
  if s.tolerance ~= nil and type(s.tolerance) ~= "function" then
    util.failf("tune: option 'tolerance' must be a function(dtype, output, M, variant) -> atol, rtol")
  end
  local combos = combinations(s.settings)
  local bench = require("normlab.bench")
  local Ms, Ns, dtypes = list_of(s.M), list_of(s.N), list_of(s.dtype or "bf16")
  local total = #Ms * #Ns * #dtypes * #combos
  local progress = s.progress
  if progress == nil or progress == true then
    progress = function(done, n, what)
      io.stderr:write(string.format("[tune %d/%d] %s\n", done, n, what))
    end
  end
  -- CUDA graphs by default on a GPU, as the sweeps time: launched one by one, cells of a few
  -- microseconds time the launch, and the tuner picked noise (docs/kernels.md)
  local graph = s.graph
  if graph == nil then
    graph = dev.kind == "cuda"
  end
  local deadline = s.budget_s and now() + s.budget_s
  local file = s.cache ~= false and M.location(dev) or nil
  local data
  if file ~= nil then
    local c = M.load(dev)
    data = c.state == "loaded" and c.data or nil
  end
  data = data or {entries = {}}
  data.format, data.key = M.FORMAT, M.key(dev)
  local result = {entries = {}, file = file, key = data.key, complete = true}
  local done = 0
  for _, dt in ipairs(dtypes) do
    for _, rows in ipairs(Ms) do
      for _, cols in ipairs(Ns) do
        local cands = {}
        for _, combo in ipairs(combos) do
          if deadline and now() >= deadline then
            result.complete = false
            break
          end
          done = done + 1
          if progress then
            progress(done, total, string.format("%s M=%d N=%d %s %s", opname, rows, cols, dt,
              label(combo)))
          end
          local r = settings.with(settings_list(combo), bench, {op = opname, variants = variants,
            M = rows, N = cols, dtype = dt, device = dev, weight = s.weight, bias = s.bias,
            mode = s.mode, outputs = s.outputs, graph = graph, batches = s.batches,
            reps = s.reps, warmup_ms = s.warmup_ms, batch_ms = s.batch_ms, seed = s.seed,
            tolerance = s.tolerance, check = true, progress = false})
          for _, row in ipairs(r.rows) do
            cands[#cands + 1] = {variant = row.variant:match("([^.]+)$"), settings = combo,
              status = row.status, ms = row.ms, gbps = row.gbps, reason = row.reason}
          end
        end
        local ok = {}
        for _, c in ipairs(cands) do
          if c.status == "ok" then
            ok[#ok + 1] = c
          end
        end
        table.sort(ok, function(a, b) return a.ms < b.ms end)
        local name, mb, nb = M.bucket(op, pass, dt, rows, cols)
        local e = {op = op, pass = pass, dtype = dt, M = rows, N = cols, mb = mb, nb = nb,
          bucket = name, candidates = cands, date = os.date("!%Y-%m-%dT%H:%M:%SZ")}
        if ok[1] then
          e.winner = {variant = ok[1].variant, settings = ok[1].settings}
          e.ms = ok[1].ms
          if ok[2] then
            e.runner_up = {variant = ok[2].variant, settings = ok[2].settings, ms = ok[2].ms}
            e.margin = ok[2].ms / ok[1].ms - 1
          end
          data.entries[name] = e
        end
        result.entries[#result.entries + 1] = e
      end
    end
  end
  if file ~= nil then
    save(file, data)
  end
  return result
end

---- nl.tune_cache ----

-- nl.tune_cache([path]) -> {file, state, entries, reason}: the cache `auto` consults on the
-- default device. path: a file (*.json) or a directory to use from now on, false to turn
-- the cache off, true for the default again (NORMLAB_TUNE_CACHE, else XDG).
local function choose(who, path)
  if path == true then
    override = nil
  elseif path == false then
    override = false
  elseif type(path) == "string" and path ~= "" then
    override = path
  else
    util.failf("%s: expected a path, true or false, got %s", who, util.show(path))
  end
  memo = {}
end

function M.cache(path)
  if path ~= nil then
    choose("tune_cache", path)
  end
  local c = M.load(buffer.device())
  local n = 0
  for _ in pairs(c.data and c.data.entries or {}) do
    n = n + 1
  end
  return {file = c.file, state = c.state, entries = c.state == "loaded" and n or 0,
    reason = c.reason}
end

-- fn(...) with the cache `path` in force (as nl.tune_cache takes it: a path, false for off,
-- true for the environment's), the previous choice back after it whether fn fails or not;
-- fn's results. experiments/crossover.lua runs `auto` without and with the cache so.
function M.with_cache(path, fn, ...)
  local saved = override
  choose("with_cache", path)
  local function pack(...)
    return {n = select("#", ...), ...}
  end
  local res = pack(pcall(fn, ...))
  override, memo = saved, {}
  if not res[1] then
    error(res[2], 0)
  end
  return (table.unpack or unpack)(res, 2, res.n)
end

-- One line for `normlab --list`.
function M.describe()
  local c = M.cache()
  if c.state == "off" then
    return "tuning cache: off (auto uses the built-in thresholds)"
  end
  return string.format("tuning cache: %s (%s%s)", c.file, c.state, c.state == "loaded"
    and string.format(", %d bucket%s", c.entries, c.entries == 1 and "" or "s")
    or (c.reason and ": " .. c.reason or ""))
end

-- Forgets what was read and warned about (specs).
function M.forget()
  memo, warned = {}, {}
end

return M
