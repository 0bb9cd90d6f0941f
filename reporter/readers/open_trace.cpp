// open_trace: format detection and the registry of JSON Lines formats (open_trace.h; the
// TraceReader interface is vramtrace/trace/reader.h).
#include "readers/open_trace.h"

#include <map>
#include <mutex>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "readers/native_names.h"
#include "readers/readers.h"
#include "vramtrace/trace/byte_source.h"

namespace vramtrace {
namespace {

std::mutex& registry_mutex() {
  static std::mutex mu;
  return mu;
}
std::map<std::string, TraceOpener>& registry() {
  static std::map<std::string, TraceOpener> formats;
  return formats;
}

TraceOpener find_format(const std::string& name) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto it = registry().find(name);
  return it == registry().end() ? nullptr : it->second;
}

}  // namespace

void register_trace_format(const std::string& name, TraceOpener opener) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry()[name] = opener;
}

std::unique_ptr<TraceReader> open_trace(const std::string& path) {
  // A pipe, a FIFO or "-" (standard input) is copied on its first open and read from the copy
  // (Note [a trace from a pipe], vramtrace/trace/byte_source.h).
  // Sniff the first decompressed bytes: the pickle PROTO opcode or the first line.
  auto bytes = ByteSource::open(path);
  char first = 0;
  std::size_t got = bytes->read(&first, 1);
  if (got == 0) {
    if (bytes->bytes_read() > 0) {  // compressed bytes that decode to nothing: a cut .gz/.zst
      throw TraceError(
          fmt::format("{}: the compressed file is cut before its first complete block: nothing to read "
                      "(a process killed before the trace writer's first flush?)",
                      path));
    }
    throw TraceError(fmt::format("{}: empty file: not a trace", path));
  }
  if (static_cast<unsigned char>(first) == 0x80) return open_snapshot_trace(path);

  auto lines = LineSource::open(path);
  std::string_view line;
  while (lines->next_line(line)) {
    if (line.find_first_not_of(" \t\r") != std::string_view::npos) break;
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const std::exception&) {
    if (lines->truncated() && lines->line_number() == 1 && line.rfind("{\"a\":\"header\"", 0) == 0) {
      throw TraceError(
          fmt::format("{}:1: a vramtrace trace whose header line is cut (the process was killed while "
                      "the file was being created?): nothing to read",
                      path));
    }
    throw TraceError(fmt::format(
        "{}: line {}: not a known trace format (expected a PyTorch snapshot pickle, or JSON lines: PyTorch's "
        "allocator history or a vramtrace trace)",
        path, lines->line_number()));
  }
  if (!j.is_object())
    throw TraceError(fmt::format("{}: line {}: not a known trace format (the first line is not a JSON object)", path,
                                 lines->line_number()));
  if (auto it = j.find("format"); it != j.end() && it->is_string()) {
    std::string name = it->get<std::string>();
    if (TraceOpener opener = find_format(name)) return opener(path);
    if (name == "vramtrace") {
      auto reader = open_vramtrace_trace(path);
      reader->set_frame_namer(native_frame_namer());  // docs/design.md, "Call stacks"
      return reader;
    }
    throw TraceError(fmt::format("{}: line {}: trace format \"{}\" is not supported by this build", path,
                                 lines->line_number(), name));
  }
  auto kind = j.find("kind");
  if ((kind != j.end() && *kind == "header") || j.contains("action")) return open_torch_trace(path);
  throw TraceError(fmt::format(
      "{}: line {}: not a known trace format (a JSON object without \"format\", \"kind\": \"header\" or \"action\")",
      path, lines->line_number()));
}

}  // namespace vramtrace
