# Writes a C++ fragment holding files as string literals, so the binary serves them without the source tree.
# Usage: cmake -DOUTPUT=file.inc -DINPUT_DIR=dir -DFILES=a.html,b.js -P embed_files.cmake
# For each file it writes `constexpr std::string_view kEmbed_<name>{"\x..", size};` (<name>: the file name
# with every character that is not a letter or digit made '_'), every byte as a \x escape: never a
# narrowing problem, and an escape can never swallow the next character since that is always '\'.
if(NOT OUTPUT OR NOT INPUT_DIR OR NOT FILES)
  message(FATAL_ERROR "embed_files.cmake: give -DOUTPUT=, -DINPUT_DIR= and -DFILES=a,b,...")
endif()
string(REPLACE "," ";" files "${FILES}")
# 40 bytes (80 hex digits) per source line.
string(REPEAT "[0-9a-f]" 80 chunk_re)
set(text "// Generated from ${INPUT_DIR} by cmake/embed_files.cmake; do not edit.\n")
foreach(name IN LISTS files)
  file(READ "${INPUT_DIR}/${name}" hex HEX)
  file(SIZE "${INPUT_DIR}/${name}" size)
  string(MAKE_C_IDENTIFIER "${name}" id)
  string(REGEX REPLACE "(${chunk_re})" "\\1\n" hex "${hex}")
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "\\\\x\\1" hex "${hex}")
  string(REGEX REPLACE "\n$" "" hex "${hex}")
  string(REPLACE "\n" "\"\n    \"" hex "${hex}")
  string(APPEND text "constexpr std::string_view kEmbed_${id}{\n    \"${hex}\",\n    ${size}};\n")
endforeach()
# Rewrite only when the text changed, so that an unchanged page does not recompile its users.
set(old "")
if(EXISTS "${OUTPUT}")
  file(READ "${OUTPUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUTPUT}" "${text}")
endif()
