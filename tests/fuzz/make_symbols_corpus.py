#!/usr/bin/env python3
"""Writes the seed corpus of the symbols fuzz target into tests/fuzz/corpus/symbols/ (run once; the
output is committed). Needs g++, strip and objcopy. The seeds are tiny ELF files (a few KB):

  tiny.so           a shared library without libc: .symtab, .dynsym, DWARF 5 lines, an inlined
                    call, a C++ and an anonymous-namespace function, a build-id
  tiny-dwarf4.so    the same with DWARF 4
  tiny.stripped.so  strip --strip-all: .dynsym only
  tiny.linked.so    stripped, with a .gnu_debuglink
  tiny.debug        objcopy --only-keep-debug: NOBITS code, .symtab, DWARF
  tiny-zdebug.so    tiny.so with zlib-compressed DWARF sections (SHF_COMPRESSED)
  tiny-exec         a static ET_EXEC without libc
  tiny-cut.so       tiny.so cut in the middle of its section table
"""
import os
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus", "symbols")

SOURCE = r"""
extern "C" __attribute__((noinline)) void* leaf() { return __builtin_return_address(0); }
namespace { __attribute__((noinline)) int helper(int x) { return x * 3 + 1; } }
__attribute__((always_inline)) inline void* step() { return leaf(); }
namespace ns { int twice(int x) { return helper(x) + x; } }
extern "C" void* entry() { return step(); }
extern "C" void _start() { entry(); }
"""

FLAGS = ["-nostdlib", "-fPIC", "-O0", "-Wl,--build-id", "-Wl,-z,noseparate-code", "-Wl,-z,norelro",
         "-Wl,-z,max-page-size=0x1000", "-Wl,--hash-style=gnu", "-fno-asynchronous-unwind-tables"]


def run(*args):
    subprocess.run(args, check=True)


def main():
    os.makedirs(OUT, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "tiny.cpp")
        with open(src, "w") as f:
            f.write(SOURCE)
        out = lambda name: os.path.join(OUT, name)
        run("g++", "-shared", "-g", *FLAGS, "-o", out("tiny.so"), src)
        run("g++", "-shared", "-gdwarf-4", *FLAGS, "-o", out("tiny-dwarf4.so"), src)
        run("g++", "-static", "-no-pie", "-g", *[f for f in FLAGS if f != "-fPIC"], "-o", out("tiny-exec"), src)
        run("strip", "--strip-all", "-o", out("tiny.stripped.so"), out("tiny.so"))
        run("objcopy", "--only-keep-debug", out("tiny.so"), out("tiny.debug"))
        run("objcopy", "--compress-debug-sections=zlib", out("tiny.so"), out("tiny-zdebug.so"))
        run("objcopy", "--strip-all", "--add-gnu-debuglink=" + out("tiny.debug"), out("tiny.so"), out("tiny.linked.so"))
        data = open(out("tiny.so"), "rb").read()
        with open(out("tiny-cut.so"), "wb") as f:
            f.write(data[: len(data) - 300])
    for name in sorted(os.listdir(OUT)):
        print(name, os.path.getsize(os.path.join(OUT, name)))


if __name__ == "__main__":
    main()
