-- normlab.binding: the low-level binding of this Lua state, the Lua 5.4 C module
-- normlab.binding_c or, under LuaJIT, the FFI binding normlab.binding_ffi. Both offer the same
-- interface (documented at the top of lua/binding_c.c). NORMLAB_BINDING=c|ffi forces one.
local util = require("normlab.util")

local luajit = type(rawget(_G, "jit")) == "table"
local want = os.getenv("NORMLAB_BINDING")
if want == nil or want == "" then
  want = luajit and "ffi" or "c"
elseif want ~= "c" and want ~= "ffi" then
  error("normlab: NORMLAB_BINDING must be 'c' or 'ffi', got '" .. want .. "'", 0)
elseif want == "c" and luajit then
  error("normlab: NORMLAB_BINDING=c needs Lua 5.4; LuaJIT uses the FFI binding", 0)
elseif want == "ffi" and not luajit then
  error("normlab: NORMLAB_BINDING=ffi needs LuaJIT", 0)
end

local core = require(want == "ffi" and "normlab.binding_ffi" or "normlab.binding_c")
if util.prefix then
  core.lib_prefix(util.prefix)
end
return core
