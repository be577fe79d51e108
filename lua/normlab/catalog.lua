-- normlab.catalog: the variant registry and the settings as markdown, for `nl.catalog()`
-- (`normlab -l nl=normlab -e 'io.write(nl.catalog())'` prints it). Generated from the
-- registry, never written into a document by hand.
local ops = require("normlab.ops")
local settings = require("normlab.settings")

local catalog = {}

local function cell(s)
  return (tostring(s):gsub("|", "\\|"))
end

-- What a variant offers beyond y in x's dtype: "fp8: delayed, current; yt: strided, external".
local function outputs(v)
  local parts = {}
  if #v.fp8 > 0 then
    parts[#parts + 1] = "fp8: " .. table.concat(v.fp8, ", ")
  end
  if #v.transposes > 0 then
    parts[#parts + 1] = "yt: " .. table.concat(v.transposes, ", ")
  end
  return #parts > 0 and table.concat(parts, "; ") or "-"
end

-- One line per variant: | name | backend | reductions | fp8 y and yt | strategy | limits |
local function variant_line(v)
  local red = {}
  for _, r in ipairs(v.reduces) do
    if r == v.default_reduce then
      table.insert(red, 1, r)
    elseif r ~= "default" then
      red[#red + 1] = r
    end
  end
  red = #red > 0 and table.concat(red, ", ") or "-"
  return string.format("| `%s` | %s | %s | %s | %s | %s |", v.name, v.backend, red, outputs(v),
    cell(v.summary), cell(v.limits))
end

local function setting_line(s)
  return string.format("| `%s` | %.10g | %s |", s.key, s.builtin, cell(s.doc))
end

-- The whole catalog: variants, then settings with normlab's defaults, then the defaults that
-- differ by GPU model, as markdown text.
function catalog.markdown()
  local out = {"| variant | backend | dW reduction (default first) | fp8 y, transposed copy yt | "
    .. "strategy | limits |", "|---|---|---|---|---|---|"}
  for _, v in ipairs(ops.variants()) do
    out[#out + 1] = variant_line(v)
  end
  out[#out + 1] = ""
  out[#out + 1] = "| setting | default | meaning |"
  out[#out + 1] = "|---|---|---|"
  for _, s in ipairs(settings.list()) do
    out[#out + 1] = setting_line(s)
  end
  out[#out + 1] = ""
  out[#out + 1] = "| GPU model | setting | its default there |"
  out[#out + 1] = "|---|---|---|"
  for _, m in ipairs(settings.model_defaults()) do
    out[#out + 1] = string.format("| %s | `%s` | %.10g |", m.model, m.key, m.value)
  end
  return table.concat(out, "\n") .. "\n"
end

return catalog
