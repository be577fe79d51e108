-- normlab.devices: an experiment's --devices cuda:0,cuda:1 (or all): one worker process per
-- device, each the same interpreter running the same script and arguments with
-- --device <dev> --shard K/N --json <tmp> (and without --devices or the output files), one
-- progress line on stderr for all of them, then normlab.merge of their JSON printed and
-- written as the unsharded run would. A worker that dies (non-zero status or no JSON) loses
-- only its cells: merge's partial mode makes them failed rows whose reason is the worker's
-- status and the tail of its stderr.
-- With --compare-devices each worker runs the whole sweep (no --shard) and normlab.merge's
-- join puts their results side by side: a column per variant and device, each device's
-- GB/s and % of its own roofline; a worker that dies fails its column, the others print.
--
-- Processes: io.popen per worker through /bin/sh (POSIX; Lua 5.4 and LuaJIT alike); each
-- worker's stdout and stderr go to temporary files that the parent polls (a `sleep` between
-- polls). Ctrl-C: a terminal sends SIGINT to the whole foreground process group, workers
-- included; the parent (its interpreter turns SIGINT into an "interrupted!" error) also
-- sends SIGINT to each worker's pid with `kill -INT`, so a SIGINT sent to the parent alone
-- reaches them too, waits for them, and re-raises. A SIGTERM/SIGKILL of the parent is not
-- forwarded (Lua has no signal handlers): workers then run to their end.
-- Shared Lua, 5.1-compatible.

local M = {}

local format, concat = string.format, table.concat
local unpack = table.unpack or unpack

-- The environment variable that marks a worker (its value: K/N); a worker refuses --devices.
M.WORKER_ENV = "NORMLAB_DEVICES_WORKER"
-- Test hook: a worker whose shard index equals this variable exits 9 once started.
M.TEST_KILL_ENV = "NORMLAB_DEVICES_TEST_KILL"

local function q(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

local function read_file(path)
  local f = io.open(path, "r")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

-- "cuda:0,cuda:1" -> {"cuda:0", "cuda:1"}; "all" -> every CUDA device, else {"cpu"}.
-- count_cuda() gives the CUDA device count (default: from the binding). nil and a message
-- when bad.
function M.parse(s, count_cuda)
  if type(s) ~= "string" or not s:find("%S") then
    return nil, "--devices: expected a comma list of devices (cpu, cuda:N) or all"
  end
  if s:match("^%s*all%s*$") then
    local n = 0
    if count_cuda then
      n = count_cuda()
    else
      local ok, nl = pcall(require, "normlab")
      if ok then
        for _, d in ipairs(nl.devices()) do
          if d.kind == "cuda" then n = n + 1 end
        end
      end
    end
    local out = {}
    for i = 0, n - 1 do out[#out + 1] = "cuda:" .. i end
    if #out == 0 then out[1] = "cpu" end
    return out
  end
  local out = {}
  for item in (s .. ","):gmatch("([^,]*),") do
    item = item:match("^%s*(.-)%s*$")
    if item == "cuda" then item = "cuda:0" end
    if not (item == "cpu" or item:match("^cuda:%d+$")) then
      return nil, format("--devices: '%s' is not cpu, cuda or cuda:N (or give all)", item)
    end
    out[#out + 1] = item
  end
  return out
end

-- Options whose values the workers must not get (the parent writes the outputs), and flags.
local DROP = {["--devices"] = true, ["--json"] = true, ["--csv"] = true, ["--markdown"] = true,
  ["--svg"] = true}
local DROP_FLAGS = {["--compare-devices"] = true}

-- The worker's command line: the interpreter and its options (arg[-n..-1]), the script
-- (arg[0]), its arguments less DROP and DROP_FLAGS, then --device, --shard K/N (unless
-- whole: the worker runs every cell) and --json.
function M.worker_argv(a, device, k, n, json, whole)
  local lo = 0
  while a[lo - 1] ~= nil do lo = lo - 1 end
  local out = {}
  for i = lo, 0 do out[#out + 1] = a[i] end
  local i = 1
  while i <= #a do
    local x = a[i]
    local name = x:match("^(%-%-[%w_-]+)=") or x
    if DROP[name] then
      if name == x then i = i + 1 end -- "--json f": skip the value too
    elseif DROP_FLAGS[x] then
      -- dropped
    elseif x == "--" then
      for j = i, #a do out[#out + 1] = a[j] end
      break
    else
      out[#out + 1] = x
    end
    i = i + 1
  end
  out[#out + 1] = "--device"
  out[#out + 1] = device
  if not whole then
    out[#out + 1] = "--shard"
    out[#out + 1] = format("%d/%d", k, n)
  end
  out[#out + 1] = "--json"
  out[#out + 1] = json
  return out
end

-- Through io.popen, not os.execute: system() ignores SIGINT in the caller while it waits, so
-- a SIGINT sent to the parent alone would be lost during the sleep.
local function sleep(s)
  local p = io.popen("sleep " .. s)
  if p then
    p:read("*a")
    p:close()
  end
end

local function tail(text, n)
  text = (text or ""):gsub("\r", "\n")
  local lines = {}
  for line in text:gmatch("[^\n]+") do
    -- progress lines and traceback frames say nothing of why
    if not (line:match("^%[%d+/%d+%]") or line:match("^%s") or line == "stack traceback:") then
      lines[#lines + 1] = line
    end
  end
  local from = math.max(1, #lines - n + 1)
  return concat(lines, "\n", from, #lines)
end

-- The last "[done/total]" a worker's stderr shows: done, total (nil before the first).
local function progress_of(text)
  local d, t
  for a, b in (text or ""):gmatch("%[(%d+)/(%d+)%]") do d, t = tonumber(a), tonumber(b) end
  return d, t
end

-- Runs the workers and merges them: the merged Result (partial when a worker died), and the
-- list of lost workers ({device, shard, status, tail}). argv: the global arg. opts.progress
-- (default true) writes the combined progress line on stderr; opts.poll: seconds between
-- polls (default 0.1); opts.compare: each worker runs the whole sweep and the Result is
-- their join (a column group per worker, a lost one's cells failed).
function M.run(devices, argv, opts)
  opts = opts or {}
  local merge = require("normlab.merge")
  local n = #devices
  local base = os.tmpname()
  local workers = {}
  for k, dev in ipairs(devices) do
    local w = {device = dev, k = k, json = format("%s.w%d.json", base, k),
      out = format("%s.w%d.out", base, k), err = format("%s.w%d.err", base, k),
      rc = format("%s.w%d.rc", base, k), pid = format("%s.w%d.pid", base, k)}
    local cmd = {}
    for i, x in ipairs(M.worker_argv(argv, dev, k, n, w.json, opts.compare)) do cmd[i] = q(x) end
    -- the inner sh writes its pid, then becomes the worker (exec): that pid is the worker's
    local inner = "echo $$ >" .. q(w.pid) .. "; exec " .. concat(cmd, " ")
    local line = format("%s=%d/%d sh -c %s </dev/null >%s 2>%s; echo $? >%s", M.WORKER_ENV, k,
      n, q(inner), q(w.out), q(w.err), q(w.rc))
    w.proc = io.popen(line, "r")
    workers[k] = w
  end
  local function all_done()
    for _, w in ipairs(workers) do
      if not w.status then
        local s = read_file(w.rc)
        if s and s:find("%d") then
          w.status = tonumber(s:match("%d+"))
        else
          return false
        end
      end
    end
    return true
  end
  local width, last = 0, nil
  local function show()
    if opts.progress == false then return end
    local D, T, parts = 0, 0, {}
    for _, w in ipairs(workers) do
      local d, t = progress_of(read_file(w.err))
      D, T = D + (d or 0), T + (t or 0)
      parts[#parts + 1] = format("%s %s", w.device, w.status and (w.status == 0 and "done" or
        ("exit " .. w.status)) or (d and format("%d/%d", d, t) or "starting"))
    end
    local line = format("[%d/%d] %d workers: %s", D, T, n, concat(parts, ", "))
    if line == last then return end
    last = line
    io.stderr:write("\r", line, string.rep(" ", width - #line))
    io.stderr:flush()
    width = #line
  end
  local ok, err = pcall(function()
    while not all_done() do
      show()
      sleep(opts.poll or 0.1)
    end
  end)
  if not ok then
    -- interrupted (or any error): SIGINT to every worker still running, wait, re-raise
    for _, w in ipairs(workers) do
      local pid = read_file(w.pid)
      pid = pid and pid:match("%d+")
      if pid and not w.status then os.execute("kill -INT " .. pid .. " 2>/dev/null") end
    end
    for _, w in ipairs(workers) do pcall(function() w.proc:close() end) end
  end
  show()
  if opts.progress ~= false and width > 0 then io.stderr:write("\n") end
  for _, w in ipairs(workers) do
    if ok then w.proc:close() end
  end
  -- merge: the shards that came back, reasons[K] for the others; join: every worker in order
  local inputs, reasons, lost, runs = {}, {}, {}, {}
  for _, w in ipairs(workers) do
    local text = read_file(w.json)
    w.stderr = read_file(w.err) or ""
    if ok and w.status == 0 and text and text:find("%S") then
      inputs[#inputs + 1] = text
      runs[w.k] = text
    else
      local t = tail(w.stderr, 5)
      local why = format("worker %d/%d on %s %s%s", w.k, n, w.device,
        w.status and ("exited with status " .. w.status) or "did not finish",
        t ~= "" and (": " .. t:gsub("\n", " | ")) or "")
      reasons[w.k] = why
      runs[w.k] = {device = w.device, lost = why}
      lost[#lost + 1] = {device = w.device, shard = format("%d/%d", w.k, n), status = w.status,
        tail = t, reason = why}
    end
    for _, p in ipairs({w.json, w.out, w.err, w.rc, w.pid}) do os.remove(p) end
  end
  os.remove(base)
  if not ok then error(err, 0) end
  if #inputs == 0 then
    local msg = {"--devices: every worker failed"}
    for _, l in ipairs(lost) do msg[#msg + 1] = "  " .. l.reason end
    local cli = require("normlab.cli")
    error(cli.usage_error(concat(msg, "\n")))
  end
  if opts.compare then return merge.join(runs), lost end
  return merge.merge{partial = reasons, unpack(inputs)}, lost
end

-- The parent's whole run for cli.parse: workers, merge (join with --compare-devices),
-- cli.emit; the status to exit with (0, or 1 when a worker was lost).
function M.main(args, argv)
  local cli = require("normlab.cli")
  local list, why = M.parse(args.devices)
  if not list then error(cli.usage_error(why)) end
  local r, lost = M.run(list, argv, {compare = args.compare_devices})
  cli.emit(r, args, require("normlab.util").copy(r.meta.print or {}))
  for _, l in ipairs(lost) do
    io.stderr:write("lost: ", l.reason, "\n")
  end
  return #lost == 0 and 0 or 1
end

return M
