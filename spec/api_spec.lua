-- The public API around the ops: library fields, devices, settings, the variant registry,
-- resolve/supports, nl.run's info, nl.compare's fields, tolerances, every CPU variant against
-- the fp64 reference, and nl.bench's rows and meta.
local nl = require("normlab")
local helper = require("spec.helper")
local settings = require("normlab.settings")

local cpu = nl.device("cpu")
local it_cuda = helper.cuda and it or pending

local keep = helper.keeper(after_each)

describe("the library", function()
  it("names its version, binding and CUDA support", function()
    assert.truthy(nl.version:match("^%d+%.%d+%.%d+"))
    assert.are.equal(type(rawget(_G, "jit")) == "table" and "ffi" or "c", nl.binding)
    assert.are.equal("boolean", type(nl.cuda_compiled))
  end)
end)

describe("devices", function()
  it("the CPU device has a name, kind, index and info", function()
    assert.are.equal("cpu", cpu.name)
    assert.are.equal("cpu", cpu.kind)
    assert.are.equal(0, cpu.index)
    assert.are.equal("string", type(cpu.info.name))
    assert.is_true(cpu.info.sm_count >= 1)
    assert.is_true(cpu.info.l2_bytes > 0)
  end)

  it("one object per device; the default one is listed", function()
    assert.are.equal(cpu, nl.device("cpu"))
    assert.are.equal(cpu, nl.devices()[1])
    local found = false
    for _, d in ipairs(nl.devices()) do
      found = found or d == nl.device()
    end
    assert.is_true(found)
    assert.are.equal(helper.cuda or cpu, nl.device("auto"))
  end)

  it("nl.set_device changes the default device, which buffers and settings follow", function()
    local before = nl.device()
    assert.are.equal(cpu, nl.set_device("cpu"))
    assert.are.equal(cpu, nl.device())
    assert.are.equal("cpu", nl.device():empty({2}).device.name)
    assert.has_error(function() nl.set_device("gpu:0") end)
    assert.are.equal(cpu, nl.device())
    assert.are.equal(before, nl.set_device(before))
    assert.are.equal(before, nl.device())
  end)

  it_cuda("#cuda CUDA devices describe themselves and measure a roofline", function()
    local d = helper.cuda
    assert.are.equal("cuda", d.kind)
    assert.are.equal("cuda:" .. d.index, d.name)
    assert.is_true(d.info.sm_count > 0 and d.info.l2_bytes > 0 and d.info.cc_major >= 7)
    assert.are.equal(d, nl.device("cuda"))
    local gbps = d:roofline()
    assert.is_true(gbps > 100)
    assert.are.equal(gbps, d:roofline())
  end)
end)

describe("settings", function()
  it("list key, value, default, range, integrality and doc", function()
    local list = nl.settings()
    assert.is_true(#list > 0)
    for _, s in ipairs(list) do
      assert.are.equal("string", type(s.key))
      assert.are.equal("string", type(s.doc))
      assert.is_true(s.min <= s.default and s.default <= s.max, s.key)
      assert.are.equal("boolean", type(s.integer))
      assert.are.equal(s.value, nl.get(s.key))
    end
  end)

  it("set and get round-trip, integers as integers, booleans as 1 and 0", function()
    -- restored as they were (nl.set(key, nl.get(key)) would leave the GPU model's value set
    -- by hand for the specs after this one)
    local key = "rmsnorm.fwd.blockrow_max_n"
    local saved = settings.save({key})
    nl.set(key, 512)
    assert.are.equal(512, nl.get(key))
    if math.type then
      assert.are.equal("integer", math.type(nl.get(key)))
    end
    settings.restore(saved)
    -- A 0/1 switch, whichever the core has.
    for _, st in ipairs(nl.settings()) do
      if st.integer and st.min == 0 and st.max == 1 then
        saved = settings.save({st.key})
        nl.set(st.key, true)
        assert.are.equal(1, nl.get(st.key))
        nl.set(st.key, false)
        assert.are.equal(0, nl.get(st.key))
        settings.restore(saved)
        break
      end
    end
  end)

  it("take the defaults of the device's GPU model, except those given with nl.set", function()
    local core = require("normlab.binding")
    local known, models = {}, nl.model_defaults()
    for _, s in ipairs(nl.settings()) do
      known[s.key] = s
    end
    assert.is_true(#models > 0)
    for _, m in ipairs(models) do
      assert.are.equal("string", type(m.model))
      assert.is_truthy(known[m.key], m.key)
      assert.is_true(known[m.key].min <= m.value and m.value <= known[m.key].max, m.key)
    end
    -- list: nl.settings() or nl.settings(dev); gpu: the device's name, nil for the CPU
    local function expect(list, gpu)
      for _, s in ipairs(list) do
        local want, origin = s.builtin, "normlab"
        for _, m in ipairs(models) do
          if m.key == s.key and gpu and gpu:find(m.model, 1, true) then
            want, origin = m.value, m.model
          end
        end
        assert.are.equal(want, s.default, s.key)
        assert.are.equal(origin, s.origin, s.key)
      end
    end
    local d = nl.device()
    local gpu = d.kind == "cuda" and d.info.name or nil
    expect(nl.settings(), gpu)
    expect(nl.settings(d), gpu)
    expect(nl.settings(cpu), nil)
    -- nl.set's value holds on every device; nl.settings() follows the default device.
    local key = models[1].key
    local saved = settings.save({key})
    nl.set(key, known[key].max)
    core.set_device(cpu.backend, cpu.index)
    expect(nl.settings(), nil)
    assert.are.equal(known[key].max, nl.get(key))
    core.set_device(d.backend, d.index)
    expect(nl.settings(), gpu)
    for _, s in ipairs(nl.settings(d)) do
      if s.key == key then
        assert.are.equal(known[key].max, s.value)
      end
    end
    settings.restore(saved)
  end)

  it("steer auto", function()
    local x, y = keep(cpu:randn({8, 16}), cpu:empty({8, 16}))
    local args = {x = x, y = y, eps = 1e-6}
    local saved = settings.save({"cpu.persistent_min_m"})
    nl.set("cpu.persistent_min_m", 4)
    assert.are.equal("rmsnorm.fwd.persistent", nl.resolve("rmsnorm.fwd.auto", args))
    nl.set("cpu.persistent_min_m", 9)
    assert.are.equal("rmsnorm.fwd.row", nl.resolve("rmsnorm.fwd.auto", args))
    -- a requested reduction steers the backward to the variant that has it
    local dy, w, rstd, dx, dw = keep(cpu:randn({8, 16}), cpu:full({16}, 1), cpu:full({8}, 1),
      cpu:empty({8, 16}), cpu:empty({16}))
    local bwd = {dy = dy, x = x, w = w, rstd = rstd, dx = dx, dw = dw}
    assert.are.equal("rmsnorm.bwd.row", nl.resolve("rmsnorm.bwd.auto", bwd))
    bwd.reduce = "partials"
    assert.are.equal("rmsnorm.bwd.persistent", nl.resolve("rmsnorm.bwd.auto", bwd))
    nl.set("cpu.persistent_min_m", 4)
    bwd.reduce = "temp"
    assert.are.equal("rmsnorm.bwd.row", nl.resolve("rmsnorm.bwd.auto", bwd))
    settings.restore(saved)
  end)
end)

describe("the registry", function()
  it("lists every variant with its fields", function()
    local list = nl.variants()
    assert.is_true(#list > 0)
    local reduces = {default = true, temp = true, partials = true, atomic = true}
    for _, v in ipairs(list) do
      assert.are.equal(v.op .. "." .. v.pass .. "." .. v.strategy, v.name)
      assert.truthy(v.backend == "cpu" or v.backend == "cuda")
      assert.truthy(reduces[v.default_reduce])
      for _, r in ipairs(v.reduces) do
        assert.truthy(reduces[r])
      end
      assert.are.equal("string", type(v.summary))
      assert.are.equal("string", type(v.limits))
    end
  end)

  it("filters by op, pass and backend", function()
    local list = nl.variants({op = "layernorm", pass = "bwd", backend = "cpu"})
    local names = {}
    for _, v in ipairs(list) do
      names[#names + 1] = v.name
    end
    assert.are.same({"layernorm.bwd.ref", "layernorm.bwd.row", "layernorm.bwd.persistent",
      "layernorm.bwd.auto"}, names)
    helper.raises("unknown option 'kind' for variants (expected: op, pass, backend)",
      nl.variants, {kind = "x"})
  end)

  it("supports answers true, or false with a reason, and raises on invalid args", function()
    local x, w, y = keep(cpu:randn({4, 8}), cpu:full({8}, 1), cpu:empty({4, 8}))
    assert.is_true(nl.supports("rmsnorm.fwd.row", {x = x, w = w, y = y, eps = 1e-6}))
    local x64, y64 = keep(cpu:randn({4, 8}, "fp64"), cpu:empty({4, 8}, "fp64"))
    local ok, why = nl.supports("rmsnorm.fwd.persistent", {x = x64, y = y64, eps = 1e-6})
    assert.is_false(ok)
    assert.truthy(why:find("fp64", 1, true))
    assert.are.equal("rmsnorm.fwd.ref",
      nl.resolve("rmsnorm.fwd.auto", {x = x64, y = y64, eps = 1e-6}))
    assert.has_error(function() nl.supports("rmsnorm.fwd.row", {x = x, y = w, eps = 1e-6}) end)
  end)
end)

describe("nl.run", function()
  it("reports what ran and the bytes of the byte model", function()
    local M, N = 6, 10
    local x, w, y, rstd = keep(cpu:randn({M, N}), cpu:full({N}, 1), cpu:empty({M, N}),
      cpu:empty({M}))
    local info = nl.run("rmsnorm.fwd.row", {x = x, w = w, y = y, rstd = rstd, eps = 1e-6,
      cast = "gemma"})
    assert.are.equal("rmsnorm.fwd.row", info.variant)
    assert.are.equal("cpu", info.backend)
    assert.are.equal("default", info.reduce)
    assert.is_true(info.deterministic)
    assert.are.equal(4 * (M * N + N + M * N + M), info.bytes)
    assert.are.equal(0, info.extra_bytes)
    assert.is_true(info.grid >= 1)
    assert.are.equal("number", type(info.block))
    assert.are.equal("number", type(info.workspace_bytes))
    assert.are.equal(0, info.waves) -- CUDA only
  end)

  it("reports the reduction and the scratch of a backward pass", function()
    local M, N = 8, 16
    local x, w, dy, rstd, dx, dw = keep(cpu:randn({M, N}), cpu:full({N}, 1), cpu:randn({M, N}),
      cpu:full({M}, 1), cpu:empty({M, N}), cpu:empty({N}))
    local info = nl.run("rmsnorm.bwd.row", {x = x, w = w, dy = dy, rstd = rstd, dx = dx, dw = dw,
      reduce = "temp"})
    assert.are.equal("temp", info.reduce)
    assert.are.equal(0, info.cluster)
    assert.is_true(info.workspace_bytes >= 4 * M * N)
    assert.are.equal(2 * info.workspace_bytes, info.extra_bytes)
    assert.are.equal("partials", nl.run("rmsnorm.bwd.persistent", {x = x, w = w, dy = dy,
      rstd = rstd, dx = dx, dw = dw}).reduce)
  end)
end)

describe("nl.compare", function()
  it("gives the error statistics with a 1-based worst index", function()
    local ref = keep(cpu:from_table({1, 2, 3, 4, 5}, "fp64"))
    local a = keep(cpu:from_table({1, 2, 3.5, 4, 5}))
    local c = nl.compare(a, ref, {atol = 0, rtol = 0.1})
    assert.are.equal(5, c.n)
    assert.are.equal(1, c.n_bad)
    assert.are.equal(0, c.n_nan)
    assert.are.equal(3, c.worst)
    assert.are.equal(0.5, c.max_abs)
    assert.are.equal(0.5 / 3, c.max_rel)
    assert.are.equal(3.5, c.a_worst)
    assert.are.equal(3, c.ref_worst)
    assert.is_true(c.ulp_max > 0 and c.ulp_p50 == 0)
    assert.is_true(c.rms_ref > 0)
    assert.is_false(c.ok)
    assert.truthy(tostring(c):match("^FAIL n=5 bad=1 nan=0 "))
  end)

  it("counts NaN mismatches and defaults to the dtype's tolerance", function()
    local ref = keep(cpu:from_table({1, 2, 3}, "fp64"))
    local a = keep(cpu:from_table({1, 0 / 0, 3}, "bf16"))
    local c = nl.compare(a, ref)
    assert.are.equal(1, c.n_nan)
    assert.are.equal(2, c.worst)
    local atol, rtol = nl.tolerance("bf16", "y")
    assert.are.equal(atol, c.atol)
    assert.are.equal(rtol, c.rtol)
    assert.is_true(nl.compare(ref, ref).ok)
  end)

  it("refuses different shapes", function()
    local a, b = keep(cpu:empty({2, 3}), cpu:empty({3, 2}))
    helper.raises("compare: shapes differ ([2, 3] against [3, 2])", nl.compare, a, b)
  end)

  it_cuda("#cuda compares a GPU buffer with a CPU reference", function()
    local ref = keep(cpu:randn({7, 37}, "fp64", {seed = 4}))
    local g = keep(ref:to(helper.cuda, "bf16"))
    local c = nl.compare(g, ref)
    assert.is_true(c.ok)
    assert.is_true(c.ulp_max <= 0.5)
  end)
end)

describe("nl.tolerance", function()
  it("is per dtype and output; dw and db grow with sqrt(M)", function()
    local a32, r32 = nl.tolerance("fp32", "y")
    local a16 = nl.tolerance("bf16", "y")
    assert.is_true(a32 < a16 and r32 > 0)
    local d1, dr1 = nl.tolerance("bf16", "dw", 1)
    local d4, dr4 = nl.tolerance("bf16", "dw", 4)
    assert.are.equal(2 * d1, d4)
    assert.are.equal(dr1, dr4)
    helper.raises("tolerance: unknown output 'z' "
      .. "(expected y, yt, residual_out, dx, rstd, mean, amax, scale, dw, db)",
      nl.tolerance, "fp32", "z")
  end)
end)

-- Every CPU strategy of every op and pass against the fp64 oracle, on shapes with tails.
describe("CPU variants against the fp64 reference", function()
  local ops = {
    rmsnorm = function(v, x, r, w, dy, o)
      local y, rstd = nl.rmsnorm(x, w, {variant = v, cast = o.cast})
      local dx, dw = nl.rmsnorm_bwd(dy, x, w, rstd, {variant = v, cast = o.cast})
      return {y = y, rstd = rstd, dx = dx, dw = dw}
    end,
    layernorm = function(v, x, r, w, dy)
      local y, mean, rstd = nl.layernorm(x, w, r, {variant = v})
      local dx, dw, db = nl.layernorm_bwd(dy, x, w, r, mean, rstd, {variant = v})
      return {y = y, mean = mean, rstd = rstd, dx = dx, dw = dw, db = db}
    end,
    add_rmsnorm = function(v, x, r, w, dy, o)
      local y, h, rstd = nl.add_rmsnorm(x, r, w, {variant = v, cast = o.cast})
      local dx, dw = nl.add_rmsnorm_bwd(dy, h, w, rstd, {variant = v, dres = dy, cast = o.cast})
      return {y = y, residual_out = h, rstd = rstd, dx = dx, dw = dw}
    end,
  }
  local grid = helper.grid({M = {1, 7, 37}, N = {1, 37, 199}, dtype = {"fp32", "bf16", "fp16"},
    cast = {"llama", "gemma"}})
  for _, op in ipairs({"rmsnorm", "layernorm", "add_rmsnorm"}) do
    for _, strategy in ipairs({"row", "persistent"}) do
      it(op .. " " .. strategy, function()
        for _, g in ipairs(grid) do
          local seed = 100 * g.M + g.N
          local x = keep(cpu:randn({g.M, g.N}, g.dtype, {seed = seed}))
          local r = keep(cpu:randn({g.N}, "fp32", {seed = seed + 1, std = 0.1}))
          if op == "add_rmsnorm" then
            r = keep(cpu:randn({g.M, g.N}, g.dtype, {seed = seed + 1}))
          end
          local w = keep(cpu:randn({g.N}, "fp32", {seed = seed + 2, mean = 1, std = 0.1}))
          local dy = keep(cpu:randn({g.M, g.N}, g.dtype, {seed = seed + 3}))
          local got = ops[op](strategy, x, r, w, dy, g)
          local want = ops[op]("ref", keep(x:to(cpu, "fp64")), keep(r:to(cpu, "fp64")),
            keep(w:to(cpu, "fp64")), keep(dy:to(cpu, "fp64")), g)
          for name, b in pairs(got) do
            keep(b, want[name])
            assert.allclose(b, want[name], {output = name, dtype = g.dtype, M = g.M, seed = seed})
          end
        end
      end)
    end
  end
end)

describe("nl.bench", function()
  it("sweeps a grid into ok rows with checks, and meta", function()
    local r = nl.bench({op = "rmsnorm.bwd", variants = {"row", "persistent", "auto"}, M = {7, 64},
      N = 37, dtype = {"fp32", "bf16"}, device = "cpu", batches = 2, reps = 2, warmup_ms = 1,
      progress = false, seed = 1})
    assert.are.equal(2 * 2 * 3, #r.rows)
    for _, row in ipairs(r.rows) do
      assert.are.equal("ok", row.status, tostring(row.reason))
      assert.are.equal("rmsnorm", row.op)
      assert.are.equal("bwd", row.pass)
      assert.are.equal(37, row.N)
      assert.truthy(row.resolved:match("^rmsnorm%.bwd%.%a+$"))
      assert.is_true(row.ms > 0 and row.min_ms <= row.ms and row.ms <= row.max_ms)
      assert.is_true(row.gbps > 0 and row.bytes > 0 and row.pct > 0)
      assert.is_true(row.check.dx.ok and row.check.dw.ok)
      assert.are.equal("boolean", type(row.deterministic))
      assert.are.equal("string", type(row.reduce))
    end
    local m = r.meta
    assert.are.equal("cpu", m.device)
    assert.is_true(m.roofline_gbps > 0)
    assert.are.equal("rotate", m.mode)
    assert.are.equal("rotate", m.outputs)
    assert.is_false(m.graph)
    assert.are.equal(nl.version, m.version)
    assert.are.equal(nl.binding, m.binding)
    assert.are.equal(nl.get("cpu.threads"), m.settings["cpu.threads"])
    assert.are.equal("string", type(m.date))
  end)

  it("shares the outputs across buffer sets when asked: only the inputs rotate", function()
    -- M x N fp32 activations: the forward reads x (and residual) and writes y (and
    -- residual_out) and rstd; the backward reads x, dy and rstd and writes dx and dW.
    local M, N = 64, 256
    local act, w, rstd = M * N * 4, N * 4, M * 4
    local cases = {
      {op = "rmsnorm", ins = act + w, outs = act + rstd},
      {op = "add_rmsnorm", ins = 2 * act + w, outs = 2 * act + rstd},
      {op = "rmsnorm.bwd", ins = 2 * act + w + rstd, outs = act + w},
    }
    for _, c in ipairs(cases) do
      local rows = {}
      for _, outputs in ipairs({"rotate", "shared"}) do
        local r = nl.bench({op = c.op, variants = {"row"}, M = M, N = N, dtype = "fp32",
          device = "cpu", outputs = outputs, batches = 2, reps = 2, warmup_ms = 1,
          progress = false})
        local row = r.rows[1]
        assert.are.equal("ok", row.status, tostring(row.reason))
        for f, chk in pairs(row.check) do
          assert.is_true(chk.ok, c.op .. " " .. f)
        end
        assert.are.equal(outputs, r.meta.outputs)
        rows[outputs] = row
      end
      local rot, sh = rows.rotate, rows.shared
      assert.are.equal(rot.sets * (c.ins + c.outs), rot.footprint_bytes, c.op)
      assert.are.equal(sh.sets * c.ins + c.outs, sh.footprint_bytes, c.op)
    end
  end)

  it("caps the buffer sets at bench.max_sets and names the cells short of the footprint", function()
    -- 16 x 64 fp32: 4 KB of x and of y a set. The target is rotate_factor x the LLC, so a
    -- factor sized to 9.5 sets' bytes needs 10 sets; a cap of 3 stops short, 64 does not.
    local M, N = 16, 64
    local per_set = 2 * M * N * 4 + N * 4 + M * 4
    local llc = nl.device("cpu").info.l2_bytes
    local function run(max_sets)
      nl.set("bench.rotate_factor", 9.5 * per_set / llc)
      nl.set("bench.max_sets", max_sets)
      local ok, r = pcall(nl.bench, {op = "rmsnorm", variants = {"row"}, M = M, N = N,
        dtype = "fp32", device = "cpu", batches = 1, reps = 1, warmup_ms = 1, progress = false})
      nl.reset("bench.rotate_factor")
      nl.reset("bench.max_sets")
      assert(ok, r)
      local row = r.rows[1]
      assert.are.equal("ok", row.status, tostring(row.reason))
      assert.are.equal(math.ceil(9.5 * per_set / llc * llc), row.target_bytes)
      return r, row
    end
    local r, row = run(3)
    assert.are.equal(3, row.sets)
    assert.are.equal(3 * per_set, row.footprint_bytes)
    local note = r:text():match("footprint short of[^\n]*")
    assert.truthy(note, r:text())
    assert.truthy(note:find("at 1 cell,", 1, true), note)
    assert.truthy(note:find("16x64 fp32 (0.0255 of 0.0809 MB)", 1, true), note)
    assert.truthy(r:markdown():find("footprint short of", 1, true))
    local csv = r:csv()
    assert.truthy(csv:match("^[^\n]*,cluster,waves,sets,footprint_bytes,target_bytes,"), csv)
    r, row = run(64)
    assert.are.equal(10, row.sets)
    assert.is_nil(r:text():find("footprint short of", 1, true))
    assert.are.equal(64, nl.get("bench.max_sets"))
  end)

  it("times an inference forward (stats = false): no rstd or mean written or counted", function()
    local M, N = 16, 64
    for _, c in ipairs({{op = "rmsnorm", stats = 1}, {op = "layernorm", stats = 2}}) do
      local bytes = {}
      for _, stats in ipairs({true, false}) do
        local r = nl.bench({op = c.op, variants = {"row"}, M = M, N = N, dtype = "fp32",
          device = "cpu", stats = stats, batches = 1, reps = 1, warmup_ms = 1, progress = false})
        local row = r.rows[1]
        assert.are.equal("ok", row.status, tostring(row.reason))
        assert.are.equal(not stats, row.check.rstd == nil, c.op)
        assert.is_true(row.check.y.ok, c.op)
        bytes[stats] = row.bytes
      end
      assert.are.equal(c.stats * M * 4, bytes[true] - bytes[false], c.op)
    end
  end)

  it("turns unsupported cells into skip rows and reports progress", function()
    local calls = {}
    local r = nl.bench({op = "layernorm", variants = {"row", "ref"}, M = 4, N = 8,
      dtype = {"fp64"}, device = "cpu", batches = 1, reps = 1, warmup_ms = 1,
      progress = function(done, total, label)
        calls[#calls + 1] = {done, total, label}
      end})
    assert.are.equal("skip", r.rows[1].status)
    assert.truthy(r.rows[1].reason:find("fp64", 1, true))
    assert.are.equal("ok", r.rows[2].status)
    assert.are.same({0, 2, "layernorm.fwd row M=4 N=8 fp64"}, calls[1])
    assert.are.same({2, 2, "done"}, calls[#calls])
    -- fp8 cannot even make the cell's rstd: the core's error becomes the skip reason.
    local r8 = nl.bench({op = "rmsnorm.bwd", variants = {"row", "persistent"}, M = 2, N = 4,
      dtype = "fp8e4m3", device = "cpu", progress = false})
    for _, row in ipairs(r8.rows) do
      assert.are.equal("skip", row.status)
      assert.truthy(row.reason:match("^rmsnorm%.fwd%.%a+: dtype fp8e4m3 is not supported"),
        row.reason)
    end
  end)

  it("checks its options", function()
    helper.raises("unknown option 'Ns' for bench (expected: op, variants, M, N, dtype, device, "
      .. "weight, bias, cast, offset, eps, reduce, check, mode, outputs, graph, batches, reps, "
      .. "warmup_ms, batch_ms, progress, seed, stats, tolerance, shard, out_dtype, scaling, "
      .. "transpose, rowwise)", nl.bench, {op = "rmsnorm", Ns = 1})
    helper.raises("bench: option 'stats' = false applies to forward passes only "
      .. "(rmsnorm.bwd reads them)", nl.bench, {op = "rmsnorm.bwd", M = 1, N = 1, stats = false})
    helper.raises("bench: option 'outputs' must be rotate or shared, got 'all'",
      nl.bench, {op = "rmsnorm", M = 1, N = 1, outputs = "all", device = "cpu"})
    helper.raises("bench: option 'cast' applies to rmsnorm and add_rmsnorm, not layernorm",
      nl.bench, {op = "layernorm.bwd", M = 1, N = 1, cast = "gemma", device = "cpu"})
    helper.raises("bench: option 'M' must hold positive integers, got {0}",
      nl.bench, {op = "rmsnorm.bwd", M = {0}, N = 1})
    helper.raises("bench: option 'bias' must be fp32, x or none, got 'fp16'",
      nl.bench, {op = "layernorm", M = 1, N = 1, bias = "fp16", device = "cpu"})
    helper.raises("bench: option 'bias' applies to layernorm, not add_rmsnorm",
      nl.bench, {op = "add_rmsnorm.bwd", M = 1, N = 1, bias = "x", device = "cpu"})
  end)

  it("gives layernorm a bias of the weight's kind unless 'bias' says otherwise", function()
    -- M x N bf16 activations; counted by the byte model: forward x read and y written, w and
    -- b read, mean and rstd written; backward dy and x read and dx written, w read, dw and db
    -- written (b is not read), mean and rstd read.
    local M, N = 16, 64
    local act, stats = M * N * 2, 2 * M * 4
    local SZ = {x = 2, fp32 = 4, none = 0}
    for _, c in ipairs({{}, {weight = "fp32"}, {weight = "x", bias = "fp32"},
        {weight = "x", bias = "none"}, {weight = "none"}, {weight = "none", bias = "x"}}) do
      local weight = c.weight or "fp32"
      local bias = c.bias or weight
      local wb, bb = N * SZ[weight], N * SZ[bias]
      for _, pass in ipairs({"fwd", "bwd"}) do
        local what = pass .. " weight " .. tostring(c.weight) .. " bias " .. tostring(c.bias)
        local r = nl.bench({op = "layernorm." .. pass, variants = {"row"}, M = M, N = N,
          dtype = "bf16", device = "cpu", weight = c.weight, bias = c.bias, batches = 1, reps = 1,
          warmup_ms = 1, progress = false})
        local row = r.rows[1]
        assert.are.equal("ok", row.status, tostring(row.reason))
        assert.are.equal(weight, r.meta.weight, what)
        assert.are.equal(bias, r.meta.bias, what)
        if pass == "fwd" then
          assert.are.equal(2 * act + wb + bb + stats, row.bytes, what)
        else
          assert.are.equal(3 * act + 2 * wb + bb + stats, row.bytes, what)
          assert.are.equal(weight ~= "none", row.check.dw ~= nil, what)
          assert.are.equal(bias ~= "none", row.check.db ~= nil, what)
        end
        for f, chk in pairs(row.check) do
          assert.is_true(chk.ok, what .. " " .. f)
        end
      end
    end
    -- the ops without a bias take none, and say so in meta
    local r = nl.bench({op = "rmsnorm", variants = {"row"}, M = 2, N = 8, device = "cpu",
      bias = "none", batches = 1, reps = 1, warmup_ms = 1, progress = false})
    assert.are.equal("ok", r.rows[1].status)
    assert.are.equal("none", r.meta.bias)
  end)

  it_cuda("#cuda benchmarks CUDA variants checked against the CPU reference", function()
    local r = nl.bench({op = "rmsnorm.bwd", M = {37, 1024}, N = {199, 1024}, dtype = {"bf16"},
      device = helper.cuda, batches = 2, warmup_ms = 5, batch_ms = 2, progress = false})
    for _, row in ipairs(r.rows) do
      assert.truthy(row.status == "ok" or row.status == "skip", row.variant .. ": "
        .. tostring(row.reason))
    end
  end)
end)
