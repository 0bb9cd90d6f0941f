// The reporter's names for native frames (readers/native_names.h).
#include "readers/native_names.h"

#include <fmt/format.h>

#include <mutex>
#include <set>
#include <string>

#include "symbols/symbolizer.h"

namespace vramtrace {

namespace {

struct SharedSymbolizer {
  std::mutex mu;
  Symbolizer symbolizer;
};

SharedSymbolizer& shared() {
  static SharedSymbolizer* s = new SharedSymbolizer;  // never destroyed: readers may outlive main's statics
  return *s;
}

class Namer final : public FrameNamer {
 public:
  std::optional<Name> name(std::string_view module, std::string_view build_id, std::uint64_t link_address) override {
    SharedSymbolizer& s = shared();
    std::lock_guard<std::mutex> lock(s.mu);
    std::string path(module);
    // The call is the instruction before the return address (Frame::address).
    auto symbol = s.symbolizer.lookup(path, build_id, link_address == 0 ? 0 : link_address - 1);
    modules_.insert(std::move(path));
    if (!symbol) return std::nullopt;
    return Name{std::move(symbol->function), std::move(symbol->file), symbol->line};
  }

  std::vector<std::string> notes() const override {
    SharedSymbolizer& s = shared();
    std::lock_guard<std::mutex> lock(s.mu);  // modules_ is written under it too
    std::vector<std::string> all = s.symbolizer.notes();
    // The symbolizer's notes start with the module's recorded path; this trace's modules that
    // could not be used at all (their frames read as module+offset). Modules named in part
    // (exported names only, no source lines) are not worth a line: their names say so.
    std::vector<std::string> unusable;
    for (std::string& n : all) {
      const auto colon = n.find(": ");
      if (colon == std::string::npos || modules_.count(n.substr(0, colon)) == 0) continue;
      if (n.find(": not symbolised: ") != std::string::npos) unusable.push_back(std::move(n));
    }
    std::vector<std::string> out;
    for (std::size_t i = 0; i < unusable.size() && i < 5; ++i)
      out.push_back("native frames: " + unusable[i] + " (its frames read as module+offset)");
    if (unusable.size() > 5)
      out.push_back(fmt::format("native frames: {} more modules could not be symbolised", unusable.size() - 5));
    return out;
  }

 private:
  std::set<std::string> modules_;  // the modules this trace asked for
};

}  // namespace

std::shared_ptr<FrameNamer> native_frame_namer() { return std::make_shared<Namer>(); }

}  // namespace vramtrace
