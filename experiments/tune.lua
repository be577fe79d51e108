-- tune.lua: the autotuner. For each shape (M x N x dtype) of one op and pass, times every
-- candidate (each variant under each combination of the --set values) with nl.bench, each
-- checked against the fp64 reference first (a failed or skipped candidate never wins), and
-- records per shape bucket (op, pass, dtype, log2 M and log2 N rounded to a half) the winner
-- with its settings, its margin over the runner-up and every candidate's timing in the device's
-- tuning cache, which `auto` consults from then on (nearest bucket; the built-in thresholds
-- where the cache has nothing).
--
--   normlab experiments/tune.lua --op rmsnorm --pass fwd --M 1024,4096,32768 \
--       --N 1024..16384 --dtypes bf16,fp16,fp32 --set rmsnorm.fwd.items=1,2,4 --budget 600
-- --op is rmsnorm (the default), layernorm or add_rmsnorm, --pass fwd (default) or bwd, or
-- --op <op>.<pass>. --variants defaults to every strategy of the op on the device but ref and
-- auto. Each --set key=v1,v2,... adds a settings axis (the cartesian product is tried with
-- every variant). --budget S stops starting new candidates after S seconds (what was timed is
-- kept). On a GPU every batch runs as a CUDA graph whether or not --graph is given (nl.tune's
-- default: launched one by one, cells of a few microseconds time the launch). The cache is
-- $NORMLAB_TUNE_CACHE (a .json file, a directory, or "off"), else
-- $XDG_CACHE_HOME/normlab/ or ~/.cache/normlab/, one file per device, keyed by device,
-- SM count (CPU: threads), compute capability, driver and runtime, normlab version and build
-- id; --cache PATH overrides it for this run, --dry-run writes nothing. The table printed
-- has a line per bucket: the winner, its time and margin, the runner-up.
local nl = require("normlab")
local cli = require("normlab.cli")

local p = cli.parser("Tune `auto`: time every candidate per shape bucket, keep the winners.",
  {M = "4096", N = "1024..16384", dtypes = "bf16", weight = "x"})
cli.op_options(p, {pass = "fwd", choose = true})
cli.set_option(p)
p:option("--budget", "Seconds after which no new candidate starts."):convert(tonumber)
p:option("--cache", "The cache file (*.json) or directory for this run.")
p:flag("--dry-run", "Time and print, but write no cache.")
local args = cli.parse(p, nil, {devices = false})

-- nl.tune takes the axes as a map, key -> values
local axes = {}
for _, axis in ipairs(cli.set_axes(args.set, nl.get)) do
  axes[axis.key] = axis.values
end
if args.budget ~= nil and not (args.budget > 0) then
  error(cli.usage_error("--budget: expected seconds > 0"))
end
if args.cache then
  nl.tune_cache(args.cache)
end

local o = cli.bench_opts(args, {})
if args.check == false then
  error(cli.usage_error("--no-check: tuning checks every candidate; it cannot be turned off"))
end
if args.shard then
  error(cli.usage_error("--shard: tune.lua writes its winners to the cache, not a sweep's JSON; "
    .. "it cannot be sharded"))
end
local r = nl.tune{op = o.op, M = o.M, N = o.N, dtype = o.dtype, variants = o.variants,
  settings = axes, budget_s = args.budget, device = o.device, weight = o.weight, bias = o.bias,
  mode = o.mode, outputs = o.outputs, graph = o.graph, batches = o.batches, seed = o.seed,
  cache = not args.dry_run}

local function label(s)
  local parts = {}
  for k, v in pairs(s or {}) do
    parts[#parts + 1] = k .. "=" .. tostring(v)
  end
  table.sort(parts)
  return #parts > 0 and " [" .. table.concat(parts, ",") .. "]" or ""
end

print(string.format("%-32s  %-40s  %10s  %8s  %s", "BUCKET", "WINNER", "MS", "MARGIN",
  "RUNNER-UP"))
for _, e in ipairs(r.entries) do
  local ok, failed = 0, 0
  for _, c in ipairs(e.candidates) do
    if c.status == "ok" then ok = ok + 1 elseif c.status == "fail" then failed = failed + 1 end
  end
  if e.winner then
    print(string.format("%-32s  %-40s  %10.4f  %7.1f%%  %s", e.bucket,
      e.winner.variant .. label(e.winner.settings), e.ms, 100 * (e.margin or 0),
      e.runner_up and (e.runner_up.variant .. label(e.runner_up.settings)) or "-"))
  else
    print(string.format("%-32s  %-40s", e.bucket, "(no candidate passed: not recorded)"))
  end
  if failed > 0 then
    print(string.format("%-32s  %d candidate(s) failed their check, %d ok", "", failed, ok))
  end
end
if not r.complete then
  io.stderr:write("tune: the budget ran out; the buckets above hold what was timed\n")
end
io.stderr:write(r.file and ("tune: cache " .. r.file .. "\n") or "tune: no cache written\n")
