-- normlab.crossover: which strategy wins where, by how much, and how close `auto` comes. A
-- view of a Result of nl.bench over a grid of shapes (experiments/crossover.lua, or nl.merge
-- of its shards), one entry per cell (op, dtype, M, N):
--
--   winner     the fastest variant that ran and passed its check: a skipped or failed row
--              never wins, and neither does a dispatcher (a variant whose strategy is
--              `auto`, or a labelled copy such as auto@tuned), which only picks one of the
--              others
--   runner_up  the second fastest of those; margin = winner GB/s / runner-up GB/s - 1
--   dispatch   for each dispatcher: the concrete variant it resolved to (run info) and its
--              ratio to the winner, its GB/s / the winner's (one byte model: the same bytes,
--              so time(winner) / time(auto))
--
--   local x = nl.crossover(r)      -- or crossover.new(r)
--   x.cells, x.summary             -- the entries above; per dispatcher the share of cells
--                                  -- within 1, 2 and 3% of the winner, the minimum ratio and
--                                  -- where; the wins per strategy
--   x.result, x.concrete, x.dispatchers, x.dtypes   -- r, its columns of each kind, its dtypes
--   x:print{file =}, x:text(), x:markdown{path =}, x:csv(path), x:json(path), x:svg(path)
--
-- The table has a line per cell; the SVG is a heat map per dtype, N across and M up (each
-- size its own column or row, in order: a log2 scale for power-of-two grids), coloured by
-- the winner, shaded and labelled by its margin, the cells where the first dispatcher
-- (`auto`) falls below 1 - CRITERION.within of the winner outlined. x:json is the Result's
-- JSON with meta.crossover = x.summary and meta.print = {crossover = true}, so that the
-- shards of a run merge (nl.merge, `normlab merge`) into this view again. The acceptance
-- criterion of `auto` (defaults, no tuning cache) is CRITERION: within 3% of the winner on
-- at least 95% of the cells, and never below 0.9x of it.
-- Pure Lua, 5.1-compatible.
local report = require("normlab.report")

local M = {}

local format, concat = string.format, table.concat
local floor = math.floor
local fmt = report.fmt
local int, num, percent, xml, strategy, finite = fmt.int, fmt.num, fmt.percent, fmt.xml,
  fmt.strategy, fmt.finite

M.CRITERION = {within = 0.03, share = 0.95, floor = 0.9}
-- The distances from the winner that the summary counts cells within.
M.WITHIN = {0.03, 0.02, 0.01}

local Crossover = {}
Crossover.__index = Crossover

-- Whether a column is a dispatcher: its strategy (before any "@label") is auto.
local function is_dispatcher(variant)
  return strategy(tostring(variant):match("^[^@]*")) == "auto"
end
M.is_dispatcher = is_dispatcher

local function ran(row)
  return row ~= nil and row.status == "ok" and finite(row.gbps)
end

local function ratio_text(r)
  return format("%.2fx", r)
end

-- 0.03 -> "3%"
local function limit_text(x)
  return format("%g%%", 100 * x)
end

local function cell_name(c)
  return format("%sx%s %s", int(c.M), int(c.N), c.dtype)
end

-- The entry of one line of the Result's table.
local function analyze(line, variants, dispatchers)
  local c = {op = line.op, M = line.M, N = line.N, dtype = line.dtype, dispatch = {},
    skipped = {}, failed = {}}
  local ranked = {}
  for j, v in ipairs(variants) do
    local row = line.cells[v]
    if row and row.status == "skip" then
      c.skipped[#c.skipped + 1] = row
    elseif row and row.status ~= "ok" then
      c.failed[#c.failed + 1] = row
    end
    if not is_dispatcher(v) and ran(row) then ranked[#ranked + 1] = {row = row, order = j} end
  end
  -- fastest first; equal rates in column order
  table.sort(ranked, function(a, b)
    if a.row.gbps ~= b.row.gbps then return a.row.gbps > b.row.gbps end
    return a.order < b.order
  end)
  c.winner = ranked[1] and ranked[1].row
  c.runner_up = ranked[2] and ranked[2].row
  if c.runner_up and c.runner_up.gbps > 0 then c.margin = c.winner.gbps / c.runner_up.gbps - 1 end
  for _, d in ipairs(dispatchers) do
    local row = line.cells[d]
    local e = {variant = d, row = row, pick = row and row.resolved and strategy(row.resolved)}
    if ran(row) and c.winner and c.winner.gbps > 0 then e.ratio = row.gbps / c.winner.gbps end
    c.dispatch[#c.dispatch + 1] = e
  end
  return c
end

-- Per dispatcher: the cells within each M.WITHIN of the winner, the lowest ratio and where,
-- the cells it did not run on, and whether CRITERION holds.
local function summarize(cells, concrete, dispatchers)
  local s = {cells = #cells, decided = 0, wins = {}, dispatchers = {}, criterion = M.CRITERION}
  local wins = {}
  for _, c in ipairs(cells) do
    if c.winner then
      s.decided = s.decided + 1
      local v = tostring(c.winner.variant)
      wins[v] = (wins[v] or 0) + 1
    end
  end
  local order = {}
  for j, v in ipairs(concrete) do
    order[v] = j
    if wins[v] then s.wins[#s.wins + 1] = {variant = v, cells = wins[v]} end
  end
  -- most wins first; equal counts in column order
  table.sort(s.wins, function(a, b)
    if a.cells ~= b.cells then return a.cells > b.cells end
    return order[a.variant] < order[b.variant]
  end)
  for k, d in ipairs(dispatchers) do
    local e = {variant = d, ran = 0, missing = 0, below = 0, within = {}}
    local counts = {}
    for i = 1, #M.WITHIN do counts[i] = 0 end
    for _, c in ipairs(cells) do
      local x = c.dispatch[k]
      if c.winner and x.ratio then
        e.ran = e.ran + 1
        for i, w in ipairs(M.WITHIN) do
          if x.ratio >= 1 - w then counts[i] = counts[i] + 1 end
        end
        if x.ratio < 1 - M.CRITERION.within then e.below = e.below + 1 end
        if not e.min or x.ratio < e.min.ratio then
          e.min = {ratio = x.ratio, M = c.M, N = c.N, dtype = c.dtype, pick = x.pick,
            winner = strategy(c.winner.variant)}
        end
      elseif c.winner then
        e.missing = e.missing + 1
      end
    end
    for i, w in ipairs(M.WITHIN) do
      e.within[i] = {limit = w, cells = counts[i],
        share = s.decided > 0 and counts[i] / s.decided or nil}
    end
    e.met = s.decided > 0 and e.missing == 0
      and (e.ran - e.below) / s.decided >= M.CRITERION.share and e.min.ratio >= M.CRITERION.floor
    s.dispatchers[k] = e
  end
  return s
end

-- A Crossover of a Result (a report.Result, e.g. nl.bench's or nl.merge's).
function M.new(r)
  if getmetatable(r) ~= report.Result then
    error("crossover: expected a Result (nl.bench, nl.merge or report.from_json), got " ..
      type(r), 2)
  end
  local lines, variants, nops = report.layout(r)
  local concrete, dispatchers = {}, {}
  for _, v in ipairs(variants) do
    if is_dispatcher(v) then dispatchers[#dispatchers + 1] = v else concrete[#concrete + 1] = v end
  end
  local cells = {}
  for i, line in ipairs(lines) do cells[i] = analyze(line, variants, dispatchers) end
  local dtypes, seen = {}, {}
  for _, c in ipairs(cells) do
    if not seen[c.dtype] then
      seen[c.dtype] = true
      dtypes[#dtypes + 1] = c.dtype
    end
  end
  return setmetatable({result = r, cells = cells, concrete = concrete, dispatchers = dispatchers,
    dtypes = dtypes, nops = nops, summary = summarize(cells, concrete, dispatchers)}, Crossover)
end

---- text ----

-- "rmsnorm.fwd bf16 crossover"
local function what(self)
  local op = self.nops == 1 and self.cells[1] and self.cells[1].op or "normlab bench"
  return format("%s %s crossover", op, concat(self.dtypes, ", "))
end

local function legend(self)
  local s = "winner: the fastest variant that passed its check (auto never wins); margin: "
    .. "winner / runner-up - 1"
  if #self.dispatchers > 0 then
    s = s .. format("; auto/best: auto's GB/s / the winner's, * below %.2fx",
      1 - M.CRITERION.within)
  end
  return s
end

-- The column names, and which read left-aligned (names; numbers are right-aligned).
local function head(self)
  local h, names = {}, {}
  local function col(name, is_name)
    h[#h + 1] = name
    names[#h] = is_name
  end
  if self.nops > 1 then col("op", true) end
  col("M")
  col("N")
  col("dtype", true)
  col("winner", true)
  col("GB/s")
  col("roofline")
  col("runner-up", true)
  col("margin")
  for _, d in ipairs(self.dispatchers) do
    col(d, true)
    col(d .. "/best")
  end
  return h, function(i) return names[i] == true end
end

local function pct_of(self, row)
  if finite(row.pct) then return row.pct end
  local roof = self.result.meta and self.result.meta.roofline_gbps
  if finite(roof) and roof > 0 then return 100 * row.gbps / roof end
end

local function body(self)
  local out = {}
  for _, c in ipairs(self.cells) do
    local w = c.winner
    local pct = w and pct_of(self, w)
    local line = {int(c.M), int(c.N), c.dtype, w and tostring(w.variant) or "-",
      w and num(w.gbps) or "-", pct and percent(pct) or "-",
      c.runner_up and tostring(c.runner_up.variant) or "-",
      c.margin and percent(100 * c.margin) or "-"}
    if self.nops > 1 then table.insert(line, 1, c.op) end
    for _, x in ipairs(c.dispatch) do
      local st = x.row and x.row.status
      line[#line + 1] = x.pick or (st == "skip" and "skip") or "-"
      if x.ratio then
        line[#line + 1] = ratio_text(x.ratio) .. (x.ratio < 1 - M.CRITERION.within and " *" or "")
      else
        line[#line + 1] = (st == "skip" and "skip") or (st and st ~= "ok" and "FAIL") or "-"
      end
    end
    out[#out + 1] = line
  end
  return out
end

-- The summary lines: each dispatcher's closeness to the winner and the criterion, the wins.
local function summary_lines(self)
  local s, out = self.summary, {}
  for _, e in ipairs(s.dispatchers) do
    if s.decided == 0 then
      out[#out + 1] = format("%s: no cell has a winner", e.variant)
    else
      local parts = {}
      for i, w in ipairs(e.within) do
        parts[i] = format("within %s%s on %d%s (%.1f%%)", limit_text(w.limit),
          i == 1 and " of the best" or "", w.cells, i == 1 and format(" of %d cells", s.decided)
          or "", 100 * w.share)
      end
      local line = e.variant .. ": " .. concat(parts, ", ")
      if e.min then
        line = line .. format("; min %s at M=%s N=%s %s (%s %s, best %s)", ratio_text(e.min.ratio),
          int(e.min.M), int(e.min.N), e.min.dtype, e.variant, tostring(e.min.pick),
          tostring(e.min.winner))
      end
      if e.missing > 0 then
        line = line .. format("; did not run on %d cell%s", e.missing, e.missing == 1 and "" or "s")
      end
      out[#out + 1] = line
      out[#out + 1] = format("%s: criterion (within %s of the best on >= %s of the cells, never "
        .. "below %.2fx): %s", e.variant, limit_text(M.CRITERION.within),
        limit_text(M.CRITERION.share), M.CRITERION.floor, e.met and "met" or "NOT met")
    end
  end
  local wins = {}
  for i, w in ipairs(s.wins) do wins[i] = format("%s %d", w.variant, w.cells) end
  out[#out + 1] = format("wins: %s (of %d cells%s)", #wins > 0 and concat(wins, ", ") or "none",
    s.cells, s.decided < s.cells and format(", %d without a winner", s.cells - s.decided) or "")
  return out
end

-- Below the table: the skipped and failed rows, one line per variant and reason with the
-- cells it holds for, then the cells timed over less than the rotate footprint.
local function notes(self)
  local groups, order = {}, {}
  for _, c in ipairs(self.cells) do
    for _, list in ipairs({c.skipped, c.failed}) do
      for _, row in ipairs(list) do
        local skip = row.status == "skip"
        local text = skip and tostring(row.reason or "unsupported") or report.fail_text(row)
        local key = (skip and "skip " or "FAIL ") .. tostring(row.variant) .. "\0" .. text
        local g = groups[key]
        if not g then
          g = {label = (skip and "skip " or "FAIL ") .. tostring(row.variant), text = text,
            cells = {}}
          groups[key] = g
          order[#order + 1] = g
        end
        g.cells[#g.cells + 1] = cell_name(c)
      end
    end
  end
  local out = {}
  for _, g in ipairs(order) do
    local n = #g.cells
    local where = n == 1 and ("at " .. g.cells[1]) or format("at %d cells (%s%s)", n,
      concat(g.cells, ", ", 1, math.min(n, 4)), n > 4 and ", ..." or "")
    out[#out + 1] = format("%s %s: %s", g.label, where, g.text)
  end
  out[#out + 1] = report.footprint_note(report.layout(self.result))
  return out
end

local function check_opts(opts, allowed)
  if opts == nil then return {} end
  if type(opts) ~= "table" then
    error("crossover: options must be a table, got " .. type(opts), 3)
  end
  for k in pairs(opts) do
    if not allowed[k] then
      error(format("crossover: unknown option '%s' (expected: file, path)", tostring(k)), 3)
    end
  end
  return opts
end

function Crossover:text()
  local out = report.header(self.result, what(self))
  out[#out + 1] = legend(self)
  out[#out + 1] = ""
  if #self.cells == 0 then
    out[#out + 1] = "(no rows)"
    return concat(out, "\n") .. "\n"
  end
  local h, left = head(self)
  report.text_table(out, h, body(self), left)
  out[#out + 1] = ""
  for _, l in ipairs(summary_lines(self)) do out[#out + 1] = l end
  local n = notes(self)
  if #n > 0 then out[#out + 1] = "" end
  for _, l in ipairs(n) do out[#out + 1] = l end
  return concat(out, "\n") .. "\n"
end

function Crossover:print(opts)
  opts = check_opts(opts, {file = true})
  local text = self:text()
  local file = opts.file or io.stdout
  file:write(text)
  if file.flush then file:flush() end
  return text
end

function Crossover:markdown(opts)
  opts = check_opts(opts, {path = true})
  local out = report.markdown_header(report.header(self.result, what(self)))
  out[#out + 1] = legend(self)
  out[#out + 1] = ""
  local h, left = head(self)
  report.markdown_table(out, h, body(self), left)
  out[#out + 1] = ""
  for _, l in ipairs(summary_lines(self)) do out[#out + 1] = "- " .. fmt.markdown(l) end
  for _, l in ipairs(notes(self)) do out[#out + 1] = "- " .. fmt.markdown(l) end
  local text = concat(out, "\n") .. "\n"
  if opts.path then report.write_file(opts.path, text) end
  return text
end

---- CSV and JSON ----

-- One line per cell, full precision: op, dtype, M, N, the winner, its GB/s and % of the
-- roofline, the runner-up, its GB/s, the margin, then per dispatcher D: D (its pick),
-- D_status, D_dispatch ("default" or "tuned"), D_gbps, D_ratio; last the variants skipped
-- and failed (space-separated).
function Crossover:csv(path)
  local cols = {"op", "dtype", "M", "N", "winner", "gbps", "pct", "runner_up", "runner_up_gbps",
    "margin"}
  for _, d in ipairs(self.dispatchers) do
    for _, f in ipairs({"", "_status", "_dispatch", "_gbps", "_ratio"}) do
      cols[#cols + 1] = d .. f
    end
  end
  cols[#cols + 1] = "skipped"
  cols[#cols + 1] = "failed"
  local lines = {}
  for i, c in ipairs(cols) do cols[i] = fmt.csv(c) end
  lines[1] = concat(cols, ",")
  local function names(list)
    local t = {}
    for i, row in ipairs(list) do t[i] = tostring(row.variant) end
    return concat(t, " ")
  end
  for _, c in ipairs(self.cells) do
    local w, u = c.winner or {}, c.runner_up or {}
    local cells = {}
    -- fields one by one: an absent one (nil) is an empty field
    local function put(...)
      for i = 1, select("#", ...) do cells[#cells + 1] = fmt.csv((select(i, ...))) end
    end
    put(c.op, c.dtype, c.M, c.N, w.variant, w.gbps, c.winner and pct_of(self, w), u.variant,
      u.gbps, c.margin)
    for _, x in ipairs(c.dispatch) do
      local row = x.row or {}
      put(x.pick, row.status, row.dispatch, row.gbps, x.ratio)
    end
    put(names(c.skipped), names(c.failed))
    lines[#lines + 1] = concat(cells, ",")
  end
  local text = concat(lines, "\n") .. "\n"
  if path then report.write_file(path, text) end
  return text
end

-- The Result's JSON with meta.crossover (the summary) and meta.print = {crossover = true}.
function Crossover:json(path)
  local meta = {}
  for k, v in pairs(self.result.meta or {}) do meta[k] = v end
  meta.crossover = self.summary
  meta.print = {crossover = true}
  return report.new(self.result.rows, meta):json(path)
end

---- SVG ----

-- 64 -> "64", 1536 -> "1.5K", 65536 -> "64K"
local function short(n)
  if type(n) ~= "number" then return tostring(n) end
  if n >= 1024 and n % 512 == 0 then
    local k = n / 1024
    return (k == floor(k) and format("%d", k) or format("%.1f", k)) .. "K"
  end
  return int(n)
end

local SIZE, GAP = 34, 2

-- Panels (one per op and dtype): a square per (M, N), N across, M up.
function Crossover:svg(path)
  local meta = self.result.meta or {}
  local colour = {}
  for j, v in ipairs(self.concrete) do
    colour[v] = report.PALETTE[(j - 1) % #report.PALETTE + 1]
  end
  local panels, by_key = {}, {}
  for _, c in ipairs(self.cells) do
    local key = c.op .. " " .. c.dtype
    local p = by_key[key]
    if not p then
      p = {key = key, dtype = c.dtype, cells = {}, Ms = {}, Ns = {}, mi = {}, ni = {}}
      by_key[key] = p
      panels[#panels + 1] = p
    end
    p.cells[#p.cells + 1] = c
    if not p.mi[c.M] then p.mi[c.M] = true; p.Ms[#p.Ms + 1] = c.M end
    if not p.ni[c.N] then p.ni[c.N] = true; p.Ns[#p.Ns + 1] = c.N end
  end
  local ncols = 1
  for _, p in ipairs(panels) do
    table.sort(p.Ms)
    table.sort(p.Ns)
    for i, m in ipairs(p.Ms) do p.mi[m] = i end
    for i, n in ipairs(p.Ns) do p.ni[n] = i end
    if #p.Ns > ncols then ncols = #p.Ns end
  end
  local h = report.header(self.result, what(self))
  local sl = summary_lines(self)
  -- the title, the header's second line and the summary lines, then the panels
  local left, top = 64, 33 + 15 * #sl + 36
  local plotw = ncols * SIZE
  -- wide enough for the cells, the legend and the title lines (about 6 px a character)
  local longest = #h[1] * 7.5
  for i = 2, #h do longest = math.max(longest, #h[i] * 6) end
  for _, l in ipairs(sl) do longest = math.max(longest, #l * 6) end
  local width = floor(math.max(left + plotw + 24, 480, longest + 24))
  local out = {}
  local function add(...) out[#out + 1] = format(...) end
  local y0 = top
  local parts = {}
  local function put(...) parts[#parts + 1] = format(...) end
  local thin, full = 0.02, 0.2
  local miss_total = 0
  for _, p in ipairs(panels) do
    local ph = #p.Ms * SIZE
    put('<g class="panel">')
    put('<text x="%d" y="%d" font-weight="bold">%s</text>', left, y0 - 6, xml(p.key))
    for _, c in ipairs(p.cells) do
      local x = left + (p.ni[c.N] - 1) * SIZE
      local y = y0 + (#p.Ms - p.mi[c.M]) * SIZE
      local w = c.winner
      local fill, opacity = "#e5e5e5", 1
      if w then
        fill = colour[tostring(w.variant)] or "#999"
        opacity = c.margin and 0.25 + 0.75 * math.min(1, math.max(0, c.margin - thin) /
          (full - thin)) or 1
      end
      local a = c.dispatch[1]
      local miss = w and a and not (a.ratio and a.ratio >= 1 - M.CRITERION.within)
      if miss then miss_total = miss_total + 1 end
      local tip = {format("M=%s N=%s %s", int(c.M), int(c.N), c.dtype)}
      if w then
        tip[#tip + 1] = format("winner %s %s GB/s", tostring(w.variant), num(w.gbps))
        if c.runner_up then
          tip[#tip + 1] = format("runner-up %s %s GB/s, margin %s", tostring(c.runner_up.variant),
            num(c.runner_up.gbps), percent(100 * c.margin))
        end
      else
        tip[#tip + 1] = "no winner"
      end
      for _, d in ipairs(c.dispatch) do
        tip[#tip + 1] = format("%s: %s%s", d.variant, tostring(d.pick or "-"),
          d.ratio and (" " .. ratio_text(d.ratio)) or
          (d.row and d.row.status ~= "ok" and (" " .. tostring(d.row.status)) or ""))
      end
      put('<rect class="cell%s" x="%d" y="%d" width="%d" height="%d" fill="%s" '
        .. 'fill-opacity="%.2f"%s>'
        .. '<title>%s</title></rect>', miss and " miss" or "", x + GAP / 2, y + GAP / 2,
        SIZE - GAP, SIZE - GAP, fill, opacity,
        miss and ' stroke="#000" stroke-width="3"' or "", xml(concat(tip, "; ")))
      local label = w and (c.margin and percent(100 * c.margin) or "only") or "-"
      put('<text x="%d" y="%d" text-anchor="middle" font-size="9" fill="%s">%s</text>',
        x + SIZE / 2, y + SIZE / 2 + 3, opacity > 0.7 and w and "#fff" or "#222", xml(label))
    end
    for i, m in ipairs(p.Ms) do
      put('<text x="%d" y="%d" text-anchor="end" fill="#555">%s</text>', left - 6,
        y0 + (#p.Ms - i) * SIZE + SIZE / 2 + 4, xml(short(m)))
    end
    for i, n in ipairs(p.Ns) do
      put('<text x="%d" y="%d" text-anchor="middle" fill="#555">%s</text>',
        left + (i - 1) * SIZE + SIZE / 2, y0 + ph + 14, xml(short(n)))
    end
    put('<text x="%d" y="%d" text-anchor="middle" fill="#555">N</text>', left + #p.Ns * SIZE / 2,
      y0 + ph + 28)
    put('<text transform="translate(16 %d) rotate(-90)" text-anchor="middle" fill="#555">M</text>',
      y0 + ph / 2)
    put('</g>')
    y0 = y0 + ph + 56
  end
  -- legend: a swatch per strategy, the shading, the outline
  local ly = y0 - 10
  local items = {}
  for _, v in ipairs(self.concrete) do items[#items + 1] = {fill = colour[v], text = v} end
  items[#items + 1] = {fill = "#e5e5e5", text = "no winner"}
  local per_row = math.max(1, floor((width - left) / 130))
  for i, it in ipairs(items) do
    local col, row = (i - 1) % per_row, floor((i - 1) / per_row)
    local lx, yy = left + col * 130, ly + row * 18
    put('<rect class="legend" x="%d" y="%d" width="12" height="12" fill="%s"/>', lx, yy - 10,
      it.fill)
    put('<text x="%d" y="%d">%s</text>', lx + 16, yy, xml(it.text))
  end
  ly = ly + 18 * math.ceil(#items / per_row) + 4
  put('<text x="%d" y="%d" fill="#555">colour: the winner; label and shade: its margin over the '
    .. 'runner-up (pale up to %s, full from %s)</text>', left, ly, limit_text(thin),
    limit_text(full))
  if #self.dispatchers > 0 then
    ly = ly + 20
    put('<rect class="legend" x="%d" y="%d" width="12" height="12" fill="white" stroke="#000" '
      .. 'stroke-width="3"/>', left, ly - 10)
    put('<text x="%d" y="%d">%s below %s of the winner, or not run (%d cell%s)</text>', left + 18,
      ly, xml(self.dispatchers[1]), ratio_text(1 - M.CRITERION.within), miss_total,
      miss_total == 1 and "" or "s")
  end
  local height = ly + 16
  add('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '
    .. 'font-family="sans-serif" font-size="11">', width, height, width, height)
  add('<rect width="100%%" height="100%%" fill="white"/>')
  add('<text x="%d" y="18" font-size="13" font-weight="bold">%s</text>', 12, xml(h[1]))
  add('<text x="%d" y="33" fill="#555">%s</text>', 12, xml(h[2]))
  for i, l in ipairs(sl) do
    add('<text x="%d" y="%d">%s</text>', 12, 33 + 15 * i, xml(l))
  end
  for _, l in ipairs(parts) do out[#out + 1] = l end
  add("</svg>")
  local text = concat(out, "\n") .. "\n"
  if path then report.write_file(path, text) end
  return text
end

Crossover.__tostring = function(self) return self:text() end

M.Crossover = Crossover

return M
