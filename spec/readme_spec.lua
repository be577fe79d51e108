-- The README's variant catalog is generated from the registry: every registered variant and
-- setting appears there as the generator writes it, and (where the CUDA backend is compiled
-- in, so the registry is complete) the section is exactly the generated text.
local nl = require("normlab")
local catalog = require("normlab.catalog")

local function readme_catalog()
  local f = assert(io.open("README.md", "r"))
  local text = f:read("*a")
  f:close()
  local block = text:match("<!%-%- catalog:begin %-%->\n(.-)<!%-%- catalog:end %-%->")
  assert.is_not_nil(block, "README.md has no catalog section")
  return block
end

describe("README catalog", function()
  it("lists every registered variant and setting as the generator writes them", function()
    local block = readme_catalog()
    for _, v in ipairs(nl.variants()) do
      local line = catalog.variant_line(v)
      assert.is_truthy(block:find(line, 1, true), "README catalog lacks: " .. line)
    end
    for _, s in ipairs(nl.settings()) do
      local line = catalog.setting_line(s)
      assert.is_truthy(block:find(line, 1, true), "README catalog lacks: " .. line)
    end
  end)

  it("is exactly the generated text when the registry is complete", function()
    if not nl.cuda_compiled then
      return -- a CPU-only build lists fewer variants than the README
    end
    assert.are.equal(catalog.markdown(), readme_catalog())
  end)
end)
