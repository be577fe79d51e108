-- The normlab executable, run through io.popen (so this spec runs under Lua 5.4 and LuaJIT
-- alike), and the normlab.cli helpers of experiment scripts.
-- The executable: $NORMLAB_EXE, default $NORMLAB_BUILD/normlab (build/normlab), as .busted
-- finds the library (specs run from the repository root).

local BUILD = os.getenv("NORMLAB_BUILD")
local EXE = os.getenv("NORMLAB_EXE") or ((BUILD and BUILD ~= "" and BUILD or "build") .. "/normlab")

local function q(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

local function write_file(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

local function read_file(path)
  local f = io.open(path, "r")
  if not f then return "" end
  local s = f:read("*a")
  f:close()
  return s
end

-- Runs the executable with a shell-quoted argument list; stdin from the given text (default:
-- empty). Returns exit status, stdout, stderr. The status comes through the shell because
-- io.popen's close reports none under LuaJIT.
local function run(args, stdin)
  local f = io.open(EXE, "r")
  if not f then error(EXE .. " not found: build first (cmake --build build) or set NORMLAB_EXE", 2) end
  f:close()
  local quoted = {}
  for i, a in ipairs(args) do quoted[i] = q(a) end
  local errf, inf = os.tmpname(), os.tmpname()
  write_file(inf, stdin or "")
  local p = io.popen(q(EXE) .. " " .. table.concat(quoted, " ") .. " <" .. q(inf) .. " 2>" ..
    q(errf) .. "; echo \"__rc=$?\"")
  local out = p:read("*a")
  p:close()
  local err = read_file(errf)
  os.remove(errf)
  os.remove(inf)
  local rc = tonumber(out:match("__rc=(%d+)%s*$"))
  out = out:gsub("__rc=%d+%s*$", "")
  return rc, out, err
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
