-- plan_dump.lua: what every CUDA variant plans (run info: the variant auto resolved to, grid,
-- block, cluster, waves, workspace, and the kernel where the build reports it) over a grid of
-- shapes, dtypes, weights, ops, reductions and settings, one line per launch, so that two
-- builds' planners can be compared line by line after a change to the planning code:
--
--   build-a/normlab tools/plan_dump.lua > a.txt; build-b/normlab tools/plan_dump.lua > b.txt
--   diff a.txt b.txt            (or --no-kernel when one build does not report kernels)
--
-- Every launch runs on random data; nothing is checked here (the specs check results).
local nl = require("normlab")
local no_kernel = arg and arg[1] == "--no-kernel"
local dev = nl.device("cuda")

local MS = {1, 7, 37, 199, 4099, 32768}
local NS = {1, 7, 64, 111, 512, 1023, 1025, 2048, 4096, 8191, 16384, 40000, 65536}
local MAX_ELEMS = 2 ^ 26
-- Each line of settings is applied on its own, on top of the defaults.
local SETTINGS = {
  {},
  {["rmsnorm.fwd.items"] = 0}, {["rmsnorm.fwd.items"] = 1}, {["rmsnorm.fwd.items"] = 8},
  {["rmsnorm.fwd.stages"] = 2, ["rmsnorm.fwd.block"] = 256},
  {["rmsnorm.fwd.early_weight_max_n"] = 0, ["rmsnorm.fwd.reload_min_n"] = 1, ["rmsnorm.fwd.reload_min_m"] = 1},
  {["rmsnorm.fwd.ctas_per_sm"] = 2, ["rmsnorm.fwd.loop_ctas_per_sm"] = 3},
  {["rmsnorm.fwd.skew_items"] = 1, ["rmsnorm.fwd.skew_wide_n"] = 0},
  {["rmsnorm.bwd.items"] = 1}, {["rmsnorm.bwd.items"] = 8}, {["layernorm.bwd.items"] = 4},
  {["rmsnorm.bwd.whole_warps"] = 0}, {["add_rmsnorm.bwd.whole_warps"] = 1},
  {["rmsnorm.bwd.cluster"] = 2}, {["rmsnorm.bwd.cluster"] = 8},
  {["rmsnorm.bwd.share_n"] = 512, ["rmsnorm.bwd.fp32_share_n"] = 512, ["rmsnorm.bwd.share_max"] = 8,
   ["rmsnorm.bwd.block"] = 128},
  {["rmsnorm.bwd.share_n"] = 0, ["rmsnorm.bwd.fp32_share_n"] = 0},
  {["rmsnorm.bwd.fused_reduce"] = 1},
  {["rmsnorm.bwd.grid_sms"] = 100, ["rmsnorm.bwd.stages"] = 4, ["rmsnorm.bwd.ctas_per_sm"] = 1},
  {["rmsnorm.bwd.split_min_n"] = 0, ["rmsnorm.bwd.loop_ctas_per_sm"] = 0},
  {["rmsnorm.bwd.split_min_n"] = 4096},
  {["rmsnorm.fwd.blockrow_block"] = 32, ["rmsnorm.bwd.blockrow_block"] = 1024},
}

local function strategies(op, pass)
  local list = {}
  for _, v in ipairs(nl.variants{op = op, pass = pass, backend = "cuda"}) do
    list[#list + 1] = v.strategy
  end
  return list
end

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do
    keys[#keys + 1] = k
  end
  table.sort(keys)
  return keys
end

local function settings_label(s)
  local parts = {}
  for _, k in ipairs(sorted_keys(s)) do
    parts[#parts + 1] = k:gsub("^rmsnorm%.", "") .. "=" .. s[k]
  end
  return #parts > 0 and table.concat(parts, ",") or "defaults"
end

local function emit(label, info)
  io.write(string.format("%s -> %s grid=%d block=%d cluster=%d waves=%.3f ws=%d%s\n", label, info.variant,
    info.grid, info.block, info.cluster, info.waves, info.workspace_bytes,
    (no_kernel or not info.kernel) and "" or (" " .. info.kernel)))
end

local function try(label, name, args)
  if not nl.supports(name, args) then
    io.write(label, " -> skip\n")
    return
  end
  emit(label, nl.run(name, args))
end

-- Settings are restored to the device's defaults after each line of SETTINGS.
local defaults = {}
for _, s in ipairs(nl.settings(dev)) do
  defaults[s.key] = s.default
end

local lines = 0
for _, M in ipairs(MS) do
  for _, N in ipairs(NS) do
    if M * N <= MAX_ELEMS then
      for _, dt in ipairs({"bf16", "fp32"}) do
        local x = dev:randn({M, N}, dt, {seed = 1})
        local r = dev:randn({M, N}, dt, {seed = 2})
        local dy = dev:randn({M, N}, dt, {seed = 3})
        local y, h, dx = dev:empty({M, N}, dt), dev:empty({M, N}, dt), dev:empty({M, N}, dt)
        local rstd = dev:empty({M}, "fp32")
        for _, wdt in ipairs(dt == "bf16" and {"bf16", "fp32"} or {"fp32"}) do
          local w = dev:randn({N}, wdt, {seed = 4, mean = 1, std = 0.1})
          local dw = dev:empty({N}, wdt)
          for _, s in ipairs(SETTINGS) do
            for k, v in pairs(s) do
              nl.set(k, v)
            end
            for _, op in ipairs({"rmsnorm", "add_rmsnorm"}) do
              local add = op == "add_rmsnorm"
              local base = string.format("%s M=%d N=%d %s w=%s [%s]", op, M, N, dt, wdt,
                settings_label(s))
              for _, st in ipairs(strategies(op, "fwd")) do
                try(base .. " fwd." .. st, op .. ".fwd." .. st, {x = x, w = w, y = y, rstd = rstd,
                  residual = add and r or nil, residual_out = add and h or nil, eps = 1e-6})
                lines = lines + 1
              end
              for _, st in ipairs(strategies(op, "bwd")) do
                for _, red in ipairs({"default", "atomic"}) do
                  try(base .. " bwd." .. st .. " " .. red, op .. ".bwd." .. st, {dy = dy, x = x, w = w,
                    rstd = rstd, dx = dx, dw = dw, dres = add and r or nil, reduce = red})
                  lines = lines + 1
                end
              end
            end
            for k in pairs(s) do
              nl.set(k, defaults[k])
            end
          end
          w:free(); dw:free()
        end
        for _, b in ipairs({x, r, dy, y, h, dx, rstd}) do
          b:free()
        end
      end
    end
  end
end
io.stderr:write(string.format("plan_dump: %d launches\n", lines))
