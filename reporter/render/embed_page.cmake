# Embeds the HTML report page (render/report/) into the command as a C++ byte array.
#
#   cmake -DPAGE=<dir>/report.html -DPIECES=<name,name,...> -DOUT=<file.cpp> -P embed_page.cmake
#
# The page is PAGE with every line "@include NAME" replaced by the file NAME of PAGE's folder,
# byte for byte (NAME must end in a newline, which stands for the line's own). Includes do not
# nest. Every included NAME must be in PIECES, the list the build declares as the page's
# dependencies, so that editing any piece regenerates the page. The page must hold the data
# placeholder @DATA@ exactly once (render_report_html puts the escaped JSON there).
#
# OUT defines vramtrace::report_page_template() (render/report_page.h). It is rewritten only when
# its content changes. Pure CMake: the build needs no xxd or other tool for it.
cmake_minimum_required(VERSION 3.25)

foreach(var PAGE PIECES OUT)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "embed_page.cmake: -D${var}=... is required")
  endif()
endforeach()
get_filename_component(PAGE "${PAGE}" ABSOLUTE)
get_filename_component(dir "${PAGE}" DIRECTORY)
get_filename_component(page_name "${PAGE}" NAME)
string(REPLACE "," ";" declared "${PIECES}")

# `rest` is the text still to expand, always after a newline of its own (one put in front), so
# that "\n@include " finds an include on the first line and one right after another.
file(READ "${PAGE}" rest)
set(rest "\n${rest}")
set(page "")
set(marker "\n@include ")
string(LENGTH "${marker}" marker_length)
while(TRUE)
  string(FIND "${rest}" "${marker}" at)
  if(at EQUAL -1)
    string(SUBSTRING "${rest}" 1 -1 tail)
    string(APPEND page "${tail}")
    break()
  endif()
  # The text up to and with the newline that ends the line before the include.
  string(SUBSTRING "${rest}" 1 ${at} head)
  string(APPEND page "${head}")
  math(EXPR name_at "${at} + ${marker_length}")
  string(SUBSTRING "${rest}" ${name_at} -1 rest)
  string(FIND "${rest}" "\n" eol)
  if(eol EQUAL -1)
    message(FATAL_ERROR "${PAGE}: the last line, an @include, must end in a newline")
  endif()
  string(SUBSTRING "${rest}" 0 ${eol} name)
  string(SUBSTRING "${rest}" ${eol} -1 rest)  # from the include line's newline on
  if(NOT name IN_LIST declared)
    message(FATAL_ERROR "${PAGE}: @include ${name}: add it to the page's pieces in reporter/CMakeLists.txt, "
                        "so that editing it rebuilds the page")
  endif()
  if(NOT EXISTS "${dir}/${name}")
    message(FATAL_ERROR "${PAGE}: @include ${name}: no such file in ${dir}")
  endif()
  file(READ "${dir}/${name}" piece)
  string(FIND "\n${piece}" "${marker}" nested)
  if(NOT nested EQUAL -1)
    message(FATAL_ERROR "${dir}/${name}: has an @include line; includes do not nest")
  endif()
  string(LENGTH "${piece}" piece_length)
  set(last_char "")
  if(piece_length GREATER 0)
    math(EXPR last "${piece_length} - 1")
    string(SUBSTRING "${piece}" ${last} 1 last_char)
  endif()
  if(NOT last_char STREQUAL "\n")
    message(FATAL_ERROR "${dir}/${name}: must end in a newline")
  endif()
  string(APPEND page "${piece}")
endwhile()

string(FIND "${page}" "@DATA@" first)
string(FIND "${page}" "@DATA@" last REVERSE)
if(first EQUAL -1 OR NOT first EQUAL last)
  message(FATAL_ERROR "${PAGE}: the page must hold the placeholder @DATA@ exactly once")
endif()

# The bytes as "0x3c,0x21,...", sixteen a line.
string(HEX "${page}" hex)
string(LENGTH "${hex}" digits)
math(EXPR size "${digits} / 2")
string(REGEX REPLACE "(..)" "0x\\1," bytes "${hex}")
string(REPEAT "0x..," 16 row)
string(REGEX REPLACE "(${row})" "\\1\n    " bytes "${bytes}")

set(source "// Generated from reporter/render/report/${page_name} by reporter/render/embed_page.cmake; do not edit.
#include \"render/report_page.h\"

namespace vramtrace {

namespace {

// unsigned: a byte above 0x7f (UTF-8) initialises it without narrowing.
constexpr unsigned char kPage[${size}] = {
    ${bytes}};

}  // namespace

std::string_view report_page_template() noexcept { return {reinterpret_cast<const char*>(kPage), sizeof(kPage)}; }

}  // namespace vramtrace
")
file(WRITE "${OUT}.tmp" "${source}")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
