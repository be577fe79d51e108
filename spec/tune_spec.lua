-- nl.reset, nl.tune and its cache, on the CPU under whichever binding runs the specs: the
-- cache round-trips, a key that differs or a file that cannot be decoded is ignored with one
-- warning, `auto` takes what the cache says (and says so), a candidate whose check failed
-- never wins. Tiny shapes and one short batch, so the file stays fast.
local nl = require("normlab")
local tune = require("normlab.tune")

local cpu = nl.device("cpu")
-- nl.tune, nl.bench and nl.tune_cache follow the default device: the CPU for these specs,
-- whatever the machine has (setup/teardown of each describe below).
local default = nl.device()
local function on_cpu()
  setup(function() nl.set_device(cpu) end)
  teardown(function() nl.set_device(default) end)
end
local FAST = {batches = 1, warmup_ms = 0.1, batch_ms = 0.1, progress = false}

local function opts(t)
  local o = {}
  for k, v in pairs(FAST) do o[k] = v end
  for k, v in pairs(t) do o[k] = v end
  return o
end

local dir = os.tmpname()
os.remove(dir)
local n = 0
-- A fresh cache file per test, so the once-per-file warnings stay per test.
local function fresh()
  n = n + 1
  return string.format("%s-%s-%d.json", dir, nl.binding, n)
end

local function read(file)
  local f = assert(io.open(file, "rb"))
  local s = f:read("*a")
  f:close()
  return s
end

local function write(file, text)
  local f = assert(io.open(file, "wb"))
  f:write(text)
  f:close()
end

local function json()
  return require("normlab.report").json_codec()
end

-- Warnings given while fn runs.
local function warnings(fn)
  local got, saved = {}, tune.warn
  tune.warn = function(msg) got[#got + 1] = msg end
  local ok, err = pcall(fn)
  tune.warn = saved
  assert(ok, err)
  return got
end

local function fwd_args(M, N)
  return {x = cpu:randn({M, N}, "fp32", {seed = 1}), y = cpu:empty({M, N}, "fp32"), eps = 1e-6}
end

describe("nl.reset", function()
  on_cpu()
  after_each(function() nl.reset() end)

  it("puts a setting back to its default and marks it not set", function()
    local def = nl.get("rmsnorm.fwd.items")
    nl.set("rmsnorm.fwd.items", def + 2)
    assert.are.equal(def + 2, nl.get("rmsnorm.fwd.items"))
    nl.reset("rmsnorm.fwd.items")
    assert.are.equal(def, nl.get("rmsnorm.fwd.items"))
    for _, s in ipairs(nl.settings()) do
      if s.key == "rmsnorm.fwd.items" then
        assert.is_false(s.user)
        assert.are.equal(s.default, s.value)
      end
    end
  end)

  it("with no key resets every setting", function()
    nl.set("cpu.threads", 1)
    nl.set("rmsnorm.bwd.block", 256)
    nl.reset()
    for _, s in ipairs(nl.settings()) do
      assert.is_false(s.user, s.key)
      assert.are.equal(s.default, s.value, s.key)
    end
  end)

  it("refuses an unknown key, naming close ones", function()
    assert.has_error(function() nl.reset("rmsnorm.fwd.itmes") end)
    local ok, err = pcall(nl.reset, "rmsnorm.fwd.itmes")
    assert.is_false(ok)
    assert.matches("did you mean 'rmsnorm.fwd.items'", err, 1, true)
  end)

  it("is what a scoped change restores: a setting nl.set gave stays set, the others reset",
    function()
      local settings = require("normlab.settings")
      nl.set("rmsnorm.bwd.block", 256)
      settings.with({{"rmsnorm.bwd.block", 128}, {"rmsnorm.fwd.items", 8}}, function()
        assert.are.equal(128, nl.get("rmsnorm.bwd.block"))
        assert.are.equal(8, nl.get("rmsnorm.fwd.items"))
      end)
      local user = {}
      for _, s in ipairs(nl.settings()) do user[s.key] = s.user end
      assert.are.equal(256, nl.get("rmsnorm.bwd.block"))
      assert.is_true(user["rmsnorm.bwd.block"])
      assert.is_false(user["rmsnorm.fwd.items"])
    end)
end)

describe("nl.tune", function()
  on_cpu()
  after_each(function()
    nl.tune_cache(false)
    tune.forget()
    nl.reset()
  end)

  it("times every candidate, records the winner and writes a cache that round-trips", function()
    local file = fresh()
    nl.tune_cache(file)
    local r = nl.tune(opts{op = "rmsnorm", pass = "fwd", M = 32, N = 64, dtype = "fp32",
      variants = {"row", "persistent"}, settings = {["rmsnorm.fwd.items"] = {1, 2}}})
    assert.are.equal(file, r.file)
    assert.are.equal(1, #r.entries)
    local e = r.entries[1]
    assert.are.equal("rmsnorm.fwd.fp32.m5.n6", e.bucket)
    assert.are.equal(4, #e.candidates)          -- 2 variants x 2 values
    for _, c in ipairs(e.candidates) do
      assert.are.equal("ok", c.status)
      assert.is_true(c.ms > 0)
    end
    assert.is_true(e.winner.variant == "row" or e.winner.variant == "persistent")
    assert.is_true(e.margin >= 0)
    assert.is_true(e.runner_up.ms >= e.ms)
    -- the file: format, key, the entry as recorded
    local _, dec = json()
    local data = dec(read(file))
    assert.are.equal(tune.FORMAT, data.format)
    assert.are.same(tune.key(cpu), data.key)
    assert.are.equal(nl.build_id, data.key.build)
    local saved = data.entries["rmsnorm.fwd.fp32.m5.n6"]
    assert.are.same(e.winner, saved.winner)
    assert.are.equal(4, #saved.candidates)
    -- read back by a fresh reader
    tune.forget()
    local c = nl.tune_cache()
    assert.are.equal("loaded", c.state)
    assert.are.equal(1, c.entries)
    -- tuning another shape keeps the first bucket
    nl.tune(opts{op = "rmsnorm.fwd", M = 512, N = 64, dtype = "fp32", variants = {"row"}})
    assert.are.equal(2, nl.tune_cache().entries)
  end)

  it("never picks a candidate whose check failed", function()
    nl.tune_cache(fresh())
    -- persistent is held to a zero tolerance, which its fp32 arithmetic cannot meet
    local function strict(dtype, output, M, variant)
      if variant:match("%.persistent$") then
        return 0, 0
      end
      return nl.tolerance(dtype, output, M)
    end
    local r = nl.tune(opts{op = "rmsnorm", M = 64, N = 256, dtype = "fp32",
      variants = {"persistent", "row"}, tolerance = strict})
    local e = r.entries[1]
    local status = {}
    for _, c in ipairs(e.candidates) do status[c.variant] = c.status end
    assert.are.equal("fail", status.persistent)
    assert.are.equal("ok", status.row)
    assert.are.equal("row", e.winner.variant)
    assert.is_nil(e.runner_up)
    -- every candidate failing: no winner, nothing recorded for the bucket
    local none = nl.tune(opts{op = "rmsnorm", M = 16, N = 256, dtype = "fp32",
      variants = {"persistent"}, tolerance = strict})
    assert.is_nil(none.entries[1].winner)
    assert.are.equal(1, nl.tune_cache().entries)
  end)

  it("keeps apart widths a power of two does not divide: buckets of half an octave", function()
    local function nb(cols) return select(3, tune.bucket("rmsnorm", "fwd", "bf16", 16, cols)) end
    assert.are.same({6.5, 7, 12, 12.5, 12.5, 13.5, 14}, {nb(96), nb(128), nb(4096), nb(5120),
      nb(6144), nb(12288), nb(16384)})
    assert.are.equal("rmsnorm.fwd.bf16.m4.n13.5", (tune.bucket("rmsnorm", "fwd", "bf16", 16, 12288)))
    assert.are.equal("rmsnorm.fwd.bf16.m12.n14", (tune.bucket("rmsnorm", "fwd", "bf16", 4096, 16384)))
  end)

  it("times with CUDA graphs by default on a GPU, never on the CPU", function()
    local seen = {}
    local real = package.loaded["normlab.bench"]
    package.loaded["normlab.bench"] = function(o)
      seen[#seen + 1] = {o.device.kind, o.graph}
      return {rows = {}}
    end
    local ok, err = pcall(function()
      nl.tune(opts{op = "rmsnorm", M = 8, N = 64, variants = {"row"}, cache = false})
      nl.tune(opts{op = "rmsnorm", M = 8, N = 64, variants = {"row"}, cache = false, graph = true})
      local has, gpu = pcall(nl.device, "cuda")
      if has and gpu then
        nl.tune(opts{op = "rmsnorm", M = 8, N = 64, variants = {"row"}, cache = false, device = gpu})
        nl.tune(opts{op = "rmsnorm", M = 8, N = 64, variants = {"row"}, cache = false, device = gpu,
          graph = false})
      end
    end)
    package.loaded["normlab.bench"] = real
    assert(ok, err)
    assert.are.same({"cpu", false}, seen[1])
    assert.are.same({"cpu", true}, seen[2]) -- as asked (nl.bench then refuses it on the CPU)
    if seen[3] then
      assert.are.same({"cuda", true}, seen[3])
      assert.are.same({"cuda", false}, seen[4])
    end
  end)

  it("refuses auto and ref as candidates and unknown settings", function()
    assert.has_error(function() nl.tune(opts{op = "rmsnorm", M = 8, N = 8, variants = {"auto"}}) end)
    assert.has_error(function() nl.tune(opts{op = "rmsnorm", M = 8, N = 8, variants = {"ref"}}) end)
    assert.has_error(function()
      nl.tune(opts{op = "rmsnorm", M = 8, N = 8, settings = {["rmsnorm.fwd.itmes"] = {1}}})
    end)
    assert.has_error(function() nl.tune(opts{op = "rmsnorm", M = 8, N = 8, budget = 1}) end)
  end)
end)

describe("auto with a tuning cache", function()
  on_cpu()
  after_each(function()
    nl.tune_cache(false)
    tune.forget()
    nl.reset()
  end)

  -- A cache for this CPU and build whose rmsnorm fwd fp32 bucket m6.n8 names variant with
  -- settings.
  local function cache_with(file, variant, settings, key)
    local enc = json()
    write(file, enc({format = tune.FORMAT, key = key or tune.key(cpu), entries = {
      ["rmsnorm.fwd.fp32.m6.n8"] = {op = "rmsnorm", pass = "fwd", dtype = "fp32", M = 64,
        N = 256, mb = 6, nb = 8, winner = {variant = variant, settings = settings}, ms = 1}}}))
    return file
  end

  it("picks what the cache says, from the nearest bucket, and says so", function()
    -- built-in thresholds: persistent from cpu.persistent_min_m (16) rows
    local a = fwd_args(64, 256)
    assert.are.equal("rmsnorm.fwd.persistent", nl.resolve("rmsnorm.fwd.auto", a))
    nl.tune_cache(cache_with(fresh(), "row", {}))
    local name, how, bucket = nl.resolve("rmsnorm.fwd.auto", a)
    assert.are.same({"rmsnorm.fwd.row", "tuned", "rmsnorm.fwd.fp32.m6.n8"}, {name, how, bucket})
    local info = nl.run("rmsnorm.fwd.auto", a)
    assert.are.equal("rmsnorm.fwd.row", info.variant)
    assert.are.equal("tuned", info.dispatch)
    assert.are.equal("rmsnorm.fwd.fp32.m6.n8", info.bucket)
    -- a shape two buckets away takes the nearest entry too
    local far = fwd_args(250, 1000)
    assert.are.same({"rmsnorm.fwd.row", "tuned", "rmsnorm.fwd.fp32.m6.n8"},
      {nl.resolve("rmsnorm.fwd.auto", far)})
    -- another dtype or pass has no entry: the built-in thresholds, and run info says so
    local bf = {x = cpu:randn({64, 256}, "bf16"), y = cpu:empty({64, 256}, "bf16"), eps = 1e-6}
    local i2 = nl.run("rmsnorm.fwd.auto", bf)
    assert.are.same({"rmsnorm.fwd.persistent", "default"}, {i2.variant, i2.dispatch})
    assert.is_nil(i2.bucket)
    -- a named variant is run as named
    assert.is_nil(nl.run("rmsnorm.fwd.persistent", a).dispatch)
    -- the op and nl.bench consult it too
    local y = nl.rmsnorm(a.x, nil, {variant = "auto"})
    assert.is_true(nl.compare(y, (nl.rmsnorm(a.x, nil, {variant = "ref"}))).ok)
    local r = nl.bench(opts{op = "rmsnorm", variants = {"auto"}, M = 64, N = 256, dtype = "fp32"})
    assert.are.same({"ok", "rmsnorm.fwd.row", "tuned", "rmsnorm.fwd.fp32.m6.n8"},
      {r.rows[1].status, r.rows[1].resolved, r.rows[1].dispatch, r.rows[1].bucket})
  end)

  it("applies the winner's settings for that call only", function()
    nl.tune_cache(cache_with(fresh(), "row", {["cpu.threads"] = 1}))
    local info = nl.run("rmsnorm.fwd.auto", fwd_args(64, 256))
    assert.are.equal(1, info.grid)                -- CPU: worker threads
    for _, s in ipairs(nl.settings()) do
      if s.key == "cpu.threads" then
        assert.is_false(s.user)
      end
    end
    nl.set("cpu.threads", 2)
    nl.run("rmsnorm.fwd.auto", fwd_args(64, 256))
    assert.are.equal(2, nl.get("cpu.threads"))
  end)

  it("ignores a cache made for another device or build, with one warning", function()
    for _, field in ipairs({"device", "build", "sm_count"}) do
      local key = tune.key(cpu)
      key[field] = field == "sm_count" and key.sm_count + 1 or "something else"
      local file = cache_with(fresh(), "row", {}, key)
      local got = warnings(function()
        nl.tune_cache(file)
        local a = fwd_args(64, 256)
        assert.are.same({"rmsnorm.fwd.persistent", "default"}, {nl.resolve("rmsnorm.fwd.auto", a)})
        nl.run("rmsnorm.fwd.auto", a)
        nl.resolve("rmsnorm.fwd.auto", a)
      end)
      assert.are.equal(1, #got, field)
      assert.matches("another device or build", got[1], 1, true)
      assert.matches(field, got[1], 1, true)
      assert.are.equal("stale", nl.tune_cache().state)
    end
  end)

  it("ignores a corrupt or truncated file, with one warning, never an error", function()
    local whole = json()({format = tune.FORMAT, key = tune.key(cpu), entries = {}})
    local texts = {"not json at all", whole:sub(1, math.floor(#whole / 2)), "{}", "[1, 2]",
      json()({format = tune.FORMAT, key = tune.key(cpu), entries = {b = {op = 1}}}), ""}
    for i, text in ipairs(texts) do
      local file = fresh()
      write(file, text)
      local got = warnings(function()
        nl.tune_cache(file)
        local a = fwd_args(64, 256)
        local info = nl.run("rmsnorm.fwd.auto", a)
        assert.are.same({"rmsnorm.fwd.persistent", "default"}, {info.variant, info.dispatch})
        nl.run("rmsnorm.fwd.auto", a)
      end)
      assert.are.equal(1, #got, "text " .. i)
      assert.matches("cannot be read", got[1], 1, true)
      assert.are.equal("corrupt", nl.tune_cache().state)
    end
  end)

  it("tuning over a stale file replaces it", function()
    local key = tune.key(cpu)
    key.build = "old"
    local file = cache_with(fresh(), "persistent", {}, key)
    warnings(function()
      nl.tune_cache(file)
      nl.tune(opts{op = "rmsnorm", M = 64, N = 256, dtype = "fp32", variants = {"row"}})
    end)
    local c = nl.tune_cache()
    assert.are.same({"loaded", 1}, {c.state, c.entries})
    assert.are.equal("rmsnorm.fwd.row", (nl.resolve("rmsnorm.fwd.auto", fwd_args(64, 256))))
  end)

  it("lives where NORMLAB_TUNE_CACHE or XDG says, one file per device", function()
    nl.tune_cache("/some/dir")
    local f = tune.location(cpu)
    assert.matches("^/some/dir/cpu%-.*%.json$", f)
    nl.tune_cache("/some/file.json")
    assert.are.equal("/some/file.json", tune.location(cpu))
    nl.tune_cache(false)
    assert.is_nil(tune.location(cpu))
    assert.are.equal("off", nl.tune_cache().state)
  end)
end)
