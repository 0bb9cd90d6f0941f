// A shared library with known functions for test_symbols.cpp (the native symboliser). Built with
// -g -O0 and a build-id; CMake also makes a stripped copy (.dynsym only), a debug file of it
// (objcopy --only-keep-debug) and a stripped copy that names the debug file (.gnu_debuglink).
// The lines the test expects come from __LINE__ here, so editing this file cannot break it.

extern "C" {

// The return address into whoever called this: a pc inside the caller's call instruction's line
// once 1 is subtracted.
__attribute__((noinline)) void* vt_fixture_return_address() { return __builtin_return_address(0); }

}  // extern "C"

namespace vt_fixture {

struct Widget {
  int size = 0;
  int grow(int by);  // _ZN10vt_fixture6Widget4growEi
};

__attribute__((noinline)) int Widget::grow(int by) {
  size += by;
  return size;
}

template <class T>
__attribute__((noinline)) T twice(T v) {
  return v + v;
}
template long twice<long>(long);  // _ZN10vt_fixture5twiceIlEET_S1_

}  // namespace vt_fixture

namespace {

__attribute__((noinline)) int hidden_helper(int x) { return x * 3 + 1; }

// Inlined into its caller even at -O0: the call below lies in a DW_TAG_inlined_subroutine.
__attribute__((always_inline)) inline void* inlined_step(int* body_line) {
  *body_line = __LINE__ + 1;
  return vt_fixture_return_address();
}

}  // namespace

extern "C" {

int vt_fixture_plain(int x) { return hidden_helper(x) + 2; }

// The address of a function that has no exported symbol (a local one in .symtab only).
void* vt_fixture_hidden_address() { return reinterpret_cast<void*>(&hidden_helper); }

// A return address inside this function, and the line of the call it returns from.
void* vt_fixture_call_site(int* line) {
  *line = __LINE__ + 1;
  return vt_fixture_return_address();
}

// A return address inside code inlined into this function: `line` is the line here that the
// code was inlined from, `body_line` the inlined function's own line of the call.
void* vt_fixture_inlined_call_site(int* line, int* body_line) {
  *line = __LINE__ + 1;
  return inlined_step(body_line);
}

}  // extern "C"
