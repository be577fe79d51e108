-- The normlab executable, run through io.popen (so this spec runs under Lua 5.4 and LuaJIT
-- alike), and the normlab.cli helpers of experiment scripts.
-- The executable: $NORMLAB_EXE, default $NORMLAB_BUILD/normlab (build/normlab), as .busted
-- finds the library (specs run from the repository root).

local helper = require("spec.helper")
local read_file, write_file = helper.read_file, helper.write_file

-- The executable (helper.run) with stdin from the given text (default: empty).
local function run(args, stdin)
  return helper.run(args, {stdin = stdin})
end

local function script(text)
  local path = os.tmpname() .. ".lua"
  write_file(path, text)
  return path
end

describe("normlab executable", function()
  it("--version names normlab, Lua, CUDA support and the devices", function()
    local rc, out = run({"--version"})
    assert.are.equal(0, rc)
    assert.truthy(out:find("^normlab %d+%.%d+"))
    assert.truthy(out:find("Lua 5.4", 1, true))
    assert.truthy(out:find("CUDA: ", 1, true))
    assert.truthy(out:find("\n  cpu ", 1, true))
  end)

  it("--list lists the variant registry and the settings", function()
    local rc, out = run({"--list"})
    assert.are.equal(0, rc)
    assert.truthy(out:find("\nrmsnorm.fwd.ref ", 1, true))
    assert.truthy(out:find("\nrmsnorm.bwd.row ", 1, true))
    assert.truthy(out:find("limits: ", 1, true))
    assert.truthy(out:find("\nSETTING ", 1, true))
    assert.truthy(out:find("rmsnorm.bwd.blockrow_max_n", 1, true))
  end)

  it("--help prints the options", function()
    local rc, out = run({"--help"})
    assert.are.equal(0, rc)
    for _, opt in ipairs({"-e stat", "-l mod", "-i ", "--device", "--list", "--version"}) do
      assert.truthy(out:find(opt, 1, true), opt)
    end
  end)

  it("-e runs a statement", function()
    local rc, out = run({"-e", "print(1+1)"})
    assert.are.equal(0, rc)
    assert.are.equal("2\n", out)
  end)

  it("-l requires a module into a global, -l g=mod under another name", function()
    local rc, out = run({"-l", "string", "-l", "s=string", "-e", "print(s == string, s.rep('a', 3))"})
    assert.are.equal(0, rc)
    assert.are.equal("true\taaa\n", out)
  end)

  it("runs a script with its arguments in arg", function()
    local path = script("print(#arg, arg[1], arg[2], arg[0] == ..., select('#', ...))\n" ..
      "print(arg[-1] ~= nil)\n")
    local rc, out = run({path, "one", "two words"})
    os.remove(path)
    assert.are.equal(0, rc)
    assert.are.equal("2\tone\ttwo words\tfalse\t2\ntrue\n", out)
  end)

  it("exits 1 with the message and a traceback when a script fails", function()
    local path = script("local function inner() error('boom') end\ninner()\n")
    local rc, out, err = run({path})
    os.remove(path)
    assert.are.equal(1, rc)
    assert.are.equal("", out)
    assert.truthy(err:find("boom", 1, true))
    assert.truthy(err:find("stack traceback:", 1, true))
    assert.truthy(err:find("in local 'inner'", 1, true) or err:find("in function 'inner'", 1, true)
      or err:find("inner", 1, true))
  end)

  it("exits 1 on a syntax error", function()
    local path = script("x = = 1\n")
    local rc, _, err = run({path})
    os.remove(path)
    assert.are.equal(1, rc)
    assert.truthy(err:find("unexpected symbol", 1, true))
  end)

  it("exits 1 on an error in -e, and on a missing script", function()
    local rc, _, err = run({"-e", "error('bad -e')"})
    assert.are.equal(1, rc)
    assert.truthy(err:find("bad -e", 1, true))
    rc, _, err = run({"/nonexistent/script.lua"})
    assert.are.equal(1, rc)
    assert.truthy(err:find("cannot open", 1, true))
  end)

  it("prints an error object with __tostring as it is, without a traceback", function()
    local rc, _, err = run({"-e", "error(setmetatable({}, {__tostring = function() return 'usage: x' end}))"})
    assert.are.equal(1, rc)
    assert.truthy(err:find("usage: x", 1, true))
    assert.is_nil(err:find("traceback", 1, true))
  end)

  it("rejects unknown options and bad devices with status 1", function()
    local rc, _, err = run({"--bogus"})
    assert.are.equal(1, rc)
    assert.truthy(err:find("'--bogus' is not an option", 1, true))
    rc, _, err = run({"--device", "gpu", "-e", "print(1)"})
    assert.are.equal(1, rc)
    assert.truthy(err:find("cpu, cuda, cuda:N or auto", 1, true))
    rc, _, err = run({"-e"})
    assert.are.equal(1, rc)
    assert.truthy(err:find("needs a statement", 1, true))
  end)

  it("--device sets NORMLAB_DEVICE for the library", function()
    local rc, out = run({"--device", "cpu", "-e", "print(os.getenv('NORMLAB_DEVICE'))"})
    assert.are.equal(0, rc)
    assert.are.equal("cpu\n", out)
    rc, out = run({"--device=cuda:1", "-e", "print(os.getenv('NORMLAB_DEVICE'))"})
    assert.are.equal(0, rc)
    assert.are.equal("cuda:1\n", out)
  end)

  it("- runs stdin as a script, with the arguments after it", function()
    local rc, out = run({"-", "a", "b"}, "print('from stdin', ...)\n")
    assert.are.equal(0, rc)
    assert.are.equal("from stdin\ta\tb\n", out)
  end)

  it("runs piped stdin as a script when there is no script", function()
    local rc, out = run({}, "local x = 20\nprint(x + 1)\n")
    assert.are.equal(0, rc)
    assert.are.equal("21\n", out)
  end)

  it("-i reads REPL input from a pipe: multi-line definitions, expressions print", function()
    local input = "function twice(a)\n  return 2 * a\nend\ntwice(21)\n" ..
      "t = {1, 2, name = 'x'}\nt\n" ..
      "'a', nil, 3\n" ..
      "print(\n  'continued'\n)\n"
    local rc, out, err = run({"-i"}, input)
    assert.are.equal(0, rc)
    assert.are.equal("", err)
    assert.are.equal("42\n{1, 2, name = \"x\"}\na\tnil\t3\ncontinued\n", out)
  end)

  it("-i keeps going after an error and prints multi-line expressions", function()
    local rc, out, err = run({"-i"}, "error('first')\n({\n  k = 1\n}).k\n")
    assert.are.equal(0, rc)
    assert.truthy(err:find("first", 1, true))
    assert.are.equal("1\n", out)
  end)

  it("finds the normlab library: require('normlab') works and the REPL has nl", function()
    local rc, out, err = run({"-e", "local nl = require('normlab'); print(nl.binding)"})
    assert.are.equal(0, rc, err)
    assert.are.equal("c\n", out)
    rc, out, err = run({"--device", "cpu", "-i"}, "nl.binding\n")
    assert.are.equal(0, rc, err)
    assert.are.equal("c\n", out)
  end)
end)

describe("normlab.cli", function()
  local cli = require("normlab.cli")

  local function parser()
    return cli.parser("test sweep", {N = "1024..8192", variants = "row,persistent"}, "sweep")
  end

  it("parses comma lists and doubling ranges", function()
    assert.are.same({1024, 2048}, (cli.int_list("1024,2048")))
    assert.are.same({1, 7, 256, 512, 1024}, (cli.int_list("1, 7,256..1024")))
    assert.are.same({"bf16", "fp16"}, (cli.name_list("bf16, fp16", "--dtypes", cli.DTYPES)))
    local none, err = cli.int_list("12x", "--N")
    assert.is_nil(none)
    assert.are.equal("--N: '12x' is not an integer", err)
    none, err = cli.name_list("bf17", "--dtypes", cli.DTYPES)
    assert.is_nil(none)
    assert.truthy(err:find("unknown 'bf17'", 1, true))
  end)

  it("gives the common options with defaults", function()
    local a = cli.parse(parser(), {})
    assert.are.same({4096}, a.M)
    assert.are.same({1024, 2048, 4096, 8192}, a.N)
    assert.are.same({"bf16"}, a.dtypes)
    assert.are.same({"row", "persistent"}, a.variants)
    assert.are.equal("rotate", a.mode)
    assert.is_true(a.check)
    assert.is_true(a.stats)
    assert.is_nil(a.device)
  end)

  it("reads every common option", function()
    local a = cli.parse(parser(), {"--device", "cuda:1", "--M", "1,7", "--N", "37",
      "--dtypes", "fp32,bf16", "--variants", "auto", "--mode", "flush", "--graph",
      "--batches", "9", "--seed", "3", "--no-check", "--no-stats", "--csv", "a.csv", "--json", "a.json",
      "--markdown", "a.md", "--svg", "a.svg"})
    assert.are.equal("cuda:1", a.device)
    assert.are.same({1, 7}, a.M)
    assert.are.same({37}, a.N)
    assert.are.same({"fp32", "bf16"}, a.dtypes)
    assert.are.same({"auto"}, a.variants)
    assert.are.equal("flush", a.mode)
    assert.is_true(a.graph)
    assert.are.equal(9, a.batches)
    assert.are.equal(3, a.seed)
    assert.is_false(a.check)
    assert.is_false(a.stats)
    assert.are.equal("a.csv", a.csv)
    assert.are.equal("a.svg", a.svg)
  end)

  it("raises a usage error naming the bad value", function()
    for _, case in ipairs({
      {{"--N", "0"}, "--N: 0 must be >= 1"},
      {{"--M", "4096..1024"}, "range 4096..1024 is empty"},
      {{"--dtypes", "int8"}, "--dtypes: unknown 'int8'"},
      {{"--mode", "warm"}, "--mode: unknown 'warm'"},
      {{"--device", "gpu"}, "--device: 'gpu' is not"},
      {{"--batches", "0"}, "--batches: expected an integer >= 1"},
      {{"--frobnicate"}, "unknown option '--frobnicate'"},
    }) do
      local ok, err = pcall(cli.parse, parser(), case[1])
      assert.is_false(ok)
      assert.is_true(cli.is_usage_error(err))
      assert.truthy(tostring(err):find(case[2], 1, true), case[2])
      assert.truthy(tostring(err):find("^Usage: sweep"))
    end
  end)

  it("hands -h to on_help", function()
    local text = cli.parse(parser(), {"-h"}, {on_help = function(t) return t end})
    assert.truthy(text:find("--no-check", 1, true))
    assert.truthy(text:find("test sweep", 1, true))
  end)

  it("rejects defaults it does not know", function()
    assert.has_error(function() cli.parser("x", {dtype = "bf16"}) end)
  end)

  it("maps the options onto nl.bench options over the script's own", function()
    local a = cli.parse(parser(), {"--no-check", "--graph", "--dtypes", "fp16"})
    local o = cli.bench_opts(a, {op = "rmsnorm.bwd", weight = "fp32", check = true})
    assert.is_nil(o.stats)
    assert.is_false(cli.bench_opts(cli.parse(parser(), {"--no-stats"})).stats)
    assert.are.equal("rmsnorm.bwd", o.op)
    assert.are.equal("fp32", o.weight)
    assert.are.same({"fp16"}, o.dtype)
    assert.are.same({"row", "persistent"}, o.variants)
    assert.is_false(o.check)
    assert.is_true(o.graph)
    assert.is_nil(o.batches)
  end)

  it("leaves out a script's speedup pair when --variants leaves out one of its variants", function()
    local report = require("normlab.report")
    local r = report.new({{op = "rmsnorm", pass = "fwd", variant = "auto", M = 8, N = 8,
      dtype = "fp32", status = "ok", ms = 1, gbps = 1}}, {device = "cpu"})
    local out = os.tmpname()
    local f = assert(io.open(out, "w"))
    cli.emit(r, {variants = {"rmsnorm.fwd.auto"}}, {file = f, speedup = {"auto", "row"}})
    f:close()
    assert.truthy(read_file(out):find("rmsnorm.fwd on cpu", 1, true))
    assert.falsy(read_file(out):find("auto/row", 1, true))
    os.remove(out)
    assert.has_error(function() r:text({speedup = {"auto", "row"}}) end)
  end)

  it("--op of a script of one pass: the op alone or <op>.<its pass>, rmsnorm by default", function()
    local function sweep(pass)
      return cli.op_options(cli.parser("one pass", {}, "sweep"), {pass = pass})
    end
    local a = cli.parse(sweep("bwd"), {})
    assert.are.same({"rmsnorm", "bwd", "rmsnorm.bwd"}, {a.op, a.pass, a.opname})
    for _, op in ipairs(cli.OPS) do
      -- the transpose op has a forward pass only (refused below)
      for _, pass in ipairs(op == "transpose" and {"fwd"} or cli.PASSES) do
        a = cli.parse(sweep(pass), {"--op", op})
        assert.are.same({op, pass, op .. "." .. pass}, {a.op, a.pass, a.opname})
        a = cli.parse(sweep(pass), {"--op", op .. "." .. pass})
        assert.are.same({op, pass, op .. "." .. pass}, {a.op, a.pass, a.opname})
      end
    end
    local o = cli.bench_opts(cli.parse(sweep("fwd"), {"--op", "add_rmsnorm"}), {op = "rmsnorm.fwd"})
    assert.are.equal("add_rmsnorm.fwd", o.op)
    assert.is_nil(o.bias)
    o = cli.bench_opts(cli.parse(sweep("fwd"), {"--op", "transpose", "--weight", "x"}))
    assert.are.same({"transpose.fwd", "none"}, {o.op, o.weight})
    local text = cli.parse(sweep("fwd"), {"-h"}, {on_help = function(t) return t end})
    assert.truthy(text:find("--op <op>", 1, true))
    assert.falsy(text:find("--pass", 1, true))
  end)

  it("--op and --pass of a script that runs either pass; --op <op>.<pass> as before", function()
    local function sweep()
      return cli.op_options(cli.parser("either pass", {}, "sweep"), {pass = "bwd", choose = true})
    end
    for _, case in ipairs({
      {{}, "rmsnorm.bwd"},
      {{"--op", "rmsnorm.bwd"}, "rmsnorm.bwd"},       -- tools/gpu.sh's form
      {{"--op", "rmsnorm.fwd"}, "rmsnorm.fwd"},
      {{"--op", "layernorm"}, "layernorm.bwd"},
      {{"--op", "layernorm", "--pass", "fwd"}, "layernorm.fwd"},
      {{"--pass", "fwd"}, "rmsnorm.fwd"},
      {{"--op", "add_rmsnorm.fwd", "--pass", "fwd"}, "add_rmsnorm.fwd"},
    }) do
      local a = cli.parse(sweep(), case[1])
      assert.are.equal(case[2], a.opname, table.concat(case[1], " "))
      assert.are.equal(case[2], a.op .. "." .. a.pass)
      assert.are.equal(case[2], cli.bench_opts(a).op)
    end
    local text = cli.parse(sweep(), {"-h"}, {on_help = function(t) return t end})
    assert.truthy(text:find("--pass <pass>", 1, true))
  end)

  it("refuses a bad --op or --pass, and --bias on an op without a bias", function()
    local one = cli.op_options(cli.parser("one pass", {}, "sweep"), {pass = "fwd"})
    local either = cli.op_options(cli.parser("either", {}, "sweep"), {pass = "bwd", choose = true})
    for _, case in ipairs({
      {one, {"--op", "groupnorm"}, "--op: unknown op 'groupnorm' (expected: rmsnorm, layernorm, "
        .. "add_rmsnorm, transpose, or <op>.<pass>)"},
      {either, {"--op", "transpose"}, "--op transpose: transpose has a forward pass only"},
      {one, {"--op", "layernorm.bwd"}, "--op layernorm.bwd: this script runs the fwd pass only "
        .. "(layernorm.fwd)"},
      {one, {"--pass", "bwd"}, "unknown option '--pass'"},
      {either, {"--op", "rmsnorm.mid"}, "--op: unknown pass 'mid' in 'rmsnorm.mid'"},
      {either, {"--pass", "up"}, "--pass: unknown 'up' (expected: fwd, bwd)"},
      {either, {"--op", "rmsnorm.fwd", "--pass", "bwd"},
        "--op rmsnorm.fwd names the fwd pass but --pass says bwd"},
      {either, {"--bias", "fp32"}, "--bias fp32: rmsnorm has no bias (layernorm has one)"},
      {one, {"--op", "add_rmsnorm", "--bias", "x"}, "--bias x: add_rmsnorm has no bias"},
      {one, {"--op", "layernorm", "--bias", "fp16"}, "--bias: unknown 'fp16'"},
    }) do
      local ok, err = pcall(cli.parse, case[1], case[2])
      assert.is_false(ok, table.concat(case[2], " "))
      assert.is_true(cli.is_usage_error(err))
      assert.truthy(tostring(err):find(case[3], 1, true), tostring(err))
      assert.truthy(tostring(err):find("^Usage: sweep"))
    end
    assert.has_error(function() cli.op_options(cli.parser("x", {}, "s"), {pass = "both"}) end)
    assert.has_error(function()
      cli.op_options(cli.parser("x", {}, "s"), {pass = "fwd", op = "bn"})
    end)
    -- --bias none is no bias, true of every op; layernorm takes any kind, and nl.bench gets it
    local a = cli.parse(either, {"--bias", "none"})
    assert.are.equal("none", cli.bench_opts(a).bias)
    a = cli.parse(either, {"--op", "layernorm", "--weight", "x", "--bias", "fp32"})
    local o = cli.bench_opts(a, {weight = "fp32"})
    assert.are.same({"layernorm.bwd", "x", "fp32"}, {o.op, o.weight, o.bias})
  end)

  it("maps a script's speedup pair onto full variant names", function()
    local report = require("normlab.report")
    local rows = {}
    for i, v in ipairs({"rmsnorm.fwd.row", "rmsnorm.fwd.auto"}) do
      rows[i] = {op = "rmsnorm", pass = "fwd", variant = v, M = 8, N = 8, dtype = "fp32",
        status = "ok", ms = i, gbps = 1 / i}
    end
    local out = os.tmpname()
    local f = assert(io.open(out, "w"))
    cli.emit(report.new(rows, {device = "cpu"}), {}, {file = f, speedup = {"auto", "row"}})
    f:close()
    assert.truthy(read_file(out):find("rmsnorm.fwd.auto/rmsnorm.fwd.row", 1, true))
    assert.truthy(read_file(out):find("0.50x", 1, true))
    os.remove(out)
  end)

  it("emits the table and the files asked for", function()
    local report = require("normlab.report")
    local r = report.new({{op = "rmsnorm", pass = "fwd", variant = "row", M = 8, N = 8,
      dtype = "fp32", status = "ok", ms = 1, gbps = 1}}, {device = "cpu"})
    local dir = os.tmpname()
    local a = {csv = dir .. ".csv", json = dir .. ".json", markdown = dir .. ".md", svg = dir .. ".svg"}
    local out = os.tmpname()
    local f = assert(io.open(out, "w"))
    local saved = io.stderr
    io.stderr = assert(io.open("/dev/null", "w"))
    cli.emit(r, a, {file = f})
    io.stderr:close()
    io.stderr = saved
    f:close()
    assert.truthy(read_file(out):find("rmsnorm.fwd on cpu", 1, true))
    assert.are.equal(r:csv(), read_file(a.csv))
    assert.are.equal(r:json(), read_file(a.json))
    assert.are.equal(r:markdown(), read_file(a.markdown))
    assert.are.equal(r:svg(), read_file(a.svg))
    for _, p in pairs(a) do os.remove(p) end
    os.remove(out)
    os.remove(dir)
  end)
end)

-- The experiment scripts on the CPU, every op, on a tiny shape with a short warm-up and
-- batch: the option parsing, the variant lists from the registry and the speedup columns run
-- for real. They run in this process (loadfile with its own `arg`, stdout to a file), so
-- under both bindings and without a copy roofline measured per script; one bad command line
-- goes through the executable.
describe("experiment scripts", function()
  local nl = require("normlab")
  local unpack_ = table.unpack or unpack

  -- Runs the script (helper.run_script) with the common tiny-shape options before args.
  -- Returns ok, stdout and the error.
  local function sweep(path, args)
    local argv = {"--device", "cpu", "--M", "4", "--N", "8,16", "--dtypes", "fp32",
      "--batches", "1", unpack_(args)}
    return helper.run_script(path, argv, {["bench.warmup_ms"] = 1, ["bench.batch_ms"] = 1})
  end

  -- The header line of the table: the column names.
  local function columns(out)
    local head = out:match("\n(%s*M%s+N%s+dtype[^\n]*)\n")
    local cols = {}
    for c in (head or ""):gmatch("%S+") do cols[#cols + 1] = c end
    return cols
  end

  for _, op in ipairs({"rmsnorm", "layernorm", "add_rmsnorm"}) do
    it("fwd_sweep and bwd_sweep --op " .. op, function()
      local ok, out, err = sweep("experiments/fwd_sweep.lua", {"--op", op})
      assert.is_true(ok, tostring(err))
      assert.truthy(out:find(op .. ".fwd on cpu", 1, true), out)
      local want = {"M", "N", "dtype"}
      for _, v in ipairs(nl.variants{op = op, pass = "fwd", backend = "cpu"}) do
        if v.strategy ~= "ref" then want[#want + 1] = v.strategy end
      end
      want[#want + 1] = "auto/row"
      assert.are.same(want, columns(out))
      assert.falsy(out:find("FAIL", 1, true), out)
      assert.falsy(out:find("skip", 1, true), out)

      ok, out, err = sweep("experiments/bwd_sweep.lua", {"--op", op})
      assert.is_true(ok, tostring(err))
      assert.truthy(out:find(op .. ".bwd on cpu", 1, true), out)
      assert.are.same({"M", "N", "dtype", "row", "persistent", "persistent/row"}, columns(out))
      assert.falsy(out:find("FAIL", 1, true), out)
      assert.truthy(out:find("persistent/row: geometric mean", 1, true), out)
    end)
  end

  it("bwd_sweep --op layernorm: the bias of the weight's kind unless --bias says", function()
    local path = os.tmpname()
    for _, case in ipairs({{{}, {"db", "dw", "dx"}}, {{"--bias", "none"}, {"dw", "dx"}},
        {{"--weight", "none"}, {"dx"}}, {{"--weight", "none", "--bias", "fp32"}, {"db", "dx"}}}) do
      local args = {"--op", "layernorm", "--variants", "row", "--json", path, unpack_(case[1])}
      local ok, _, err = sweep("experiments/bwd_sweep.lua", args)
      assert.is_true(ok, tostring(err))
      local r = require("normlab.report").from_json(read_file(path))
      for _, row in ipairs(r.rows) do
        assert.are.equal("ok", row.status)
        local got = {}
        for k in pairs(row.check) do got[#got + 1] = k end
        table.sort(got)
        assert.are.same(case[2], got, table.concat(case[1], " "))
      end
    end
    os.remove(path)
  end)

  it("fwd_sweep, bwd_sweep and fp8_sweep hold --set key=value for the run", function()
    local path = os.tmpname()
    for _, script in ipairs({"fwd_sweep", "bwd_sweep", "fp8_sweep"}) do
      local ok, _, err = sweep("experiments/" .. script .. ".lua", {"--variants", "row",
        "--set", "bench.max_sets=2", "--set", "cpu.threads=1", "--json", path})
      assert.is_true(ok, tostring(err))
      local r = require("normlab.report").from_json(read_file(path))
      assert.are.equal(2, r.meta.settings["bench.max_sets"], script)
      assert.are.equal(1, r.meta.settings["cpu.threads"], script)
      for _, row in ipairs(r.rows) do
        if row.status == "ok" then assert.are.equal(2, row.sets, script) end
      end
      ok, _, err = sweep("experiments/" .. script .. ".lua", {"--set", "bench.max_sets=2,3"})
      assert.is_false(ok)
      assert.truthy(tostring(err):find("--set bench.max_sets: one value per key here", 1, true),
        tostring(err))
    end
    -- held for the run only: the settings are as before
    assert.are.equal(64, nl.get("bench.max_sets"))
    os.remove(path)
  end)

  it("dispatch_sweep takes --op <op>.<pass> and --op <op> --pass <pass>", function()
    for _, case in ipairs({{{"--op", "rmsnorm.bwd"}, "rmsnorm.bwd"},
        {{"--op", "layernorm", "--pass", "fwd"}, "layernorm.fwd"},
        {{"--op", "add_rmsnorm"}, "add_rmsnorm.bwd"}, {{}, "rmsnorm.bwd"}}) do
      local ok, out, err = sweep("experiments/dispatch_sweep.lua",
        {"--set", "cpu.threads=1,2", unpack_(case[1])})
      assert.is_true(ok, tostring(err))
      assert.truthy(out:find(case[2] .. " on cpu", 1, true), out)
      assert.are.same({"M", "N", "dtype", "auto@threads=1", "auto@threads=2"}, columns(out))
      assert.falsy(out:find("FAIL", 1, true), out)
    end
    -- through the executable: a usage error, printed without a traceback, status 1
    local rc, _, err = run({"--device", "cpu", "experiments/dispatch_sweep.lua", "--op",
      "rmsnorm.bwd", "--pass", "fwd"})
    assert.are.equal(1, rc)
    assert.truthy(err:find("names the bwd pass but --pass says fwd", 1, true), err)
    assert.falsy(err:find("traceback", 1, true), err)
  end)

  it("dispatch_sweep --fp8 sweeps settings on an fp8 y (and its yt), each checked, the header says so", function()
    local path = os.tmpname()
    for _, case in ipairs({{{"--op", "layernorm.fwd", "--fp8", "fp8e4m3"}, "y in fp8e4m3 (delayed scaling)"},
        {{"--op", "rmsnorm.fwd", "--fp8", "fp8e5m2", "--scaling", "current", "--transpose", "external"},
         "y in fp8e5m2 (current scaling, yt external)"}}) do
      local ok, out, err = sweep("experiments/dispatch_sweep.lua",
        {"--set", "rmsnorm.fwd.fp8_max_threads=0,128", "--json", path, unpack_(case[1])})
      assert.is_true(ok, tostring(err))
      assert.truthy(out:find(case[2], 1, true), out)
      assert.are.same({"M", "N", "dtype", "auto@fp8_max_threads=0", "auto@fp8_max_threads=128"}, columns(out))
      local r = require("normlab.report").from_json(read_file(path))
      assert.are.equal(4, #r.rows) -- 2 cells x 2 combinations
      for _, row in ipairs(r.rows) do
        assert.are.equal("ok", row.status)
        assert.truthy(row.check.y and row.check.amax, case[2])
        assert.are.equal(case[1][6] ~= nil, row.check.yt ~= nil, case[2])
      end
    end
    os.remove(path)
    -- usage errors: --fp8 on a backward, --transpose or --scaling without --fp8, a dtype not fp8
    for _, case in ipairs({{{"--op", "rmsnorm.bwd", "--fp8", "fp8e4m3"}, "the forward pass writes y"},
        {{"--op", "rmsnorm.fwd", "--transpose", "external"}, "come with --fp8"},
        {{"--op", "rmsnorm.fwd", "--scaling", "current"}, "come with --fp8"},
        {{"--op", "rmsnorm.fwd", "--fp8", "bf16"}, "--fp8: unknown 'bf16' (expected: fp8e4m3, fp8e5m2)"}}) do
      local rc, _, err = run({"--device", "cpu", "experiments/dispatch_sweep.lua", unpack_(case[1])})
      assert.are.equal(1, rc, case[2])
      assert.truthy(err:find(case[2], 1, true), err)
      assert.falsy(err:find("traceback", 1, true), err)
    end
  end)
end)
