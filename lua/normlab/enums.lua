-- normlab.enums: the names Lua users write for the enums of normlab.h. Values come from the
-- binding's constants table (that is, from the header), never from this file.
local core = require("normlab.binding")
local enum = require("normlab.util").enum
local K = core.constants

return {
  dtype = enum(K, {{"fp32", "NL_F32"}, {"fp16", "NL_F16"}, {"bf16", "NL_BF16"},
                   {"fp8e4m3", "NL_F8E4M3"}, {"fp8e5m2", "NL_F8E5M2"}, {"fp64", "NL_F64"}}),
  backend = enum(K, {{"cpu", "NL_CPU"}, {"cuda", "NL_CUDA"}}),
  cast = enum(K, {{"llama", "NL_CAST_LLAMA"}, {"gemma", "NL_CAST_GEMMA"},
                  {"none", "NL_CAST_NONE"}}),
  reduce = enum(K, {{"default", "NL_REDUCE_DEFAULT"}, {"temp", "NL_REDUCE_TEMP"},
                    {"partials", "NL_REDUCE_PARTIALS"}, {"atomic", "NL_REDUCE_ATOMIC"}}),
  mode = enum(K, {{"rotate", "NL_BENCH_ROTATE"}, {"flush", "NL_BENCH_FLUSH"},
                  {"hot", "NL_BENCH_HOT"}}),
  scaling = enum(K, {{"delayed", "NL_SCALING_DELAYED"}, {"current", "NL_SCALING_CURRENT"}}),
  transpose = enum(K, {{"default", "NL_TRANSPOSE_DEFAULT"}, {"strided", "NL_TRANSPOSE_STRIDED"},
                       {"external", "NL_TRANSPOSE_EXTERNAL"}, {"fused_tiled", "NL_TRANSPOSE_FUSED"},
                       {"chunked", "NL_TRANSPOSE_CHUNKED"}}),
}
