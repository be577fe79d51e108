# Describes every `typedef struct NAME { ... } NAME;` of core/include/normlab.h for the two Lua
# bindings, so that neither lists a struct's fields by hand and a field added to the header
# reaches Lua without an edit anywhere:
#   OUT_C    a C header for lua/binding_c.c: per struct its FIELD(type, field, KIND, nested)
#            lines, then STRUCT(type), then `structs`, every struct in header order (FIELD,
#            STRUCT and the kinds are binding_c.c's)
#   OUT_LUA  a Lua file for lua/normlab/binding_ffi.lua: per struct its fields in order, as
#            {name =, kind = [, struct =]}
# Kinds: i32 i64 u32 u64 f64 (int32_t int64_t uint32_t uint64_t double; lists such as
# `int64_t rows, cols;` too), string (const char *), chars (char name[N]), buffer (nl_buf *),
# struct (a struct of the header declared before: a table of its own in Lua) and spread (an
# nl_device: its backend and index go into the enclosing table, as devices cross the bindings as
# those two numbers everywhere). Anything else stops the build, since neither binding could
# carry it.
#   cmake -DHEADER=... -DOUT_C=... -DOUT_LUA=... -P gen_structs.cmake
cmake_minimum_required(VERSION 3.24)  # the policies of the project, in script mode too
file(READ "${HEADER}" text)

# Comments go first: they span lines and may hold braces and semicolons.
while(TRUE)
  string(FIND "${text}" "/*" open)
  if(open EQUAL -1)
    break()
  endif()
  string(SUBSTRING "${text}" 0 ${open} head)
  string(SUBSTRING "${text}" ${open} -1 rest)
  string(FIND "${rest}" "*/" close)
  if(close EQUAL -1)
    message(FATAL_ERROR "${HEADER}: unterminated comment")
  endif()
  math(EXPR close "${close} + 2")
  string(SUBSTRING "${rest}" ${close} -1 rest)
  set(text "${head} ${rest}")
endwhile()
string(REGEX REPLACE "//[^\n]*" "" text "${text}")

set(ws "[ \t\r\n]")
set(id "[A-Za-z_][A-Za-z_0-9]*")
set(scalar_int32_t i32)
set(scalar_int64_t i64)
set(scalar_uint32_t u32)
set(scalar_uint64_t u64)
set(scalar_double f64)

set(c "")
set(lua "")
set(all "")
while(TRUE)
  string(REGEX MATCH "typedef${ws}+struct${ws}+(${id})${ws}*{([^}]*)}${ws}*(${id})${ws}*;" m
         "${text}")
  if(m STREQUAL "")
    break()
  endif()
  set(type "${CMAKE_MATCH_1}")
  set(body "${CMAKE_MATCH_2}")
  if(NOT CMAKE_MATCH_3 STREQUAL type)
    message(FATAL_ERROR "${HEADER}: struct ${type} is typedef'd as ${CMAKE_MATCH_3}")
  endif()
  string(FIND "${text}" "${m}" at)
  string(LENGTH "${m}" len)
  math(EXPR at "${at} + ${len}")
  string(SUBSTRING "${text}" ${at} -1 text)

  # The body as a list of declarations: CMake lists are separated by semicolons.
  string(REGEX REPLACE "${ws}+" " " body "${body}")
  set(c_fields "")
  set(lua_fields "")
  foreach(decl IN LISTS body)
    string(STRIP "${decl}" decl)
    if(decl STREQUAL "")
      continue()
    endif()
    set(names "")
    set(sub "")
    string(CONCAT cannot "${HEADER}: ${type}: the bindings cannot carry the field `${decl}` "
           "(cmake/gen_structs.cmake lists the types they can, nested structs declared above)")
    if(decl MATCHES "^const char ?\\* ?(${id})$")
      set(kind string)
      set(names ${CMAKE_MATCH_1})
    elseif(decl MATCHES "^char (${id}) ?\\[ ?[0-9]+ ?\\]$")
      set(kind chars)
      set(names ${CMAKE_MATCH_1})
    elseif(decl MATCHES "^nl_buf ?\\* ?(${id})$")
      set(kind buffer)
      set(names ${CMAKE_MATCH_1})
    elseif(decl MATCHES "^(int32_t|int64_t|uint32_t|uint64_t|double) (${id}( ?, ?${id})*)$")
      set(kind ${scalar_${CMAKE_MATCH_1}})
      string(REPLACE " " "" names "${CMAKE_MATCH_2}")
      string(REPLACE "," ";" names "${names}")
    elseif(decl MATCHES "^(${id}) (${id})$")
      set(sub ${CMAKE_MATCH_1})
      set(names ${CMAKE_MATCH_2})
      if(NOT sub IN_LIST all)
        message(FATAL_ERROR "${cannot}")
      elseif(sub STREQUAL "nl_device")
        set(kind spread)
      else()
        set(kind struct)
      endif()
    else()
      message(FATAL_ERROR "${cannot}")
    endif()
    foreach(name IN LISTS names)
      string(TOUPPER ${kind} KIND)
      if(sub STREQUAL "")
        string(APPEND c_fields "  FIELD(${type}, ${name}, ${KIND}, NULL),\n")
        string(APPEND lua_fields "    {name = \"${name}\", kind = \"${kind}\"},\n")
      else()
        string(APPEND c_fields "  FIELD(${type}, ${name}, ${KIND}, &struct_${sub}),\n")
        string(APPEND lua_fields
               "    {name = \"${name}\", kind = \"${kind}\", struct = \"${sub}\"},\n")
      endif()
    endforeach()
  endforeach()
  if(c_fields STREQUAL "")
    message(FATAL_ERROR "${HEADER}: struct ${type} has no fields")
  endif()
  string(APPEND c "static const Field fields_${type}[] = {\n${c_fields}};\n"
                  "static const Struct struct_${type} = STRUCT(${type});\n\n")
  string(APPEND lua "  ${type} = {\n${lua_fields}  },\n")
  list(APPEND all ${type})
endwhile()

list(TRANSFORM all PREPEND "  &struct_")
list(JOIN all ",\n" list)
set(note "Generated from core/include/normlab.h by cmake/gen_structs.cmake. Do not edit.")
file(WRITE "${OUT_C}.tmp" "/* ${note} */\n\n${c}static const Struct *const structs[] = {\n"
                          "${list},\n};\n")
file(WRITE "${OUT_LUA}.tmp" "-- ${note}\nreturn {\n${lua}}\n")
foreach(out "${OUT_C}" "${OUT_LUA}")
  file(COPY_FILE "${out}.tmp" "${out}" ONLY_IF_DIFFERENT)
  file(REMOVE "${out}.tmp")
endforeach()
