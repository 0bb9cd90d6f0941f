// Loading the inputs of `vramtrace check` / `vramtrace diff`. See check_input.h.
#include "check_input.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <iterator>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "summary.h"
#include "trace_model.h"
#include "vramtrace/trace_reader.h"

namespace vramtrace {

namespace {

constexpr std::size_t kMaxSummaryBytes = std::size_t{64} << 20;

std::optional<nlohmann::json> read_summary(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  char c = 0;
  while (in.get(c) && std::isspace(static_cast<unsigned char>(c))) {
  }
  if (!in || c != '{') return std::nullopt;
  std::string text(1, c);
  char buf[65536];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    text.append(buf, static_cast<std::size_t>(in.gcount()));
    if (text.size() > kMaxSummaryBytes) return std::nullopt;
  }
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("traces") || !j["traces"].is_array()) return std::nullopt;
  return j;
}

// Per device: allocation counts by size, and what came before the largest request.
class EventFactsBuilder {
 public:
  void add(const TraceRecord& r) {
    if (r.action != Action::alloc && r.action != Action::free_requested && r.action != Action::free_completed) return;
    auto& d = devices_[r.device];
    if (r.action == Action::alloc) {
      d.facts.alloc_count_by_size[r.size]++;
      if (r.size > d.facts.largest_request_bytes) {
        d.facts.largest_request_bytes = r.size;
        d.facts.frees_before_largest = d.frees;
        d.facts.live_before_largest = d.live.size();
        d.facts.allocs_before_largest = d.allocs;
      }
      d.live.insert(r.addr);
      ++d.allocs;
    } else if (d.live.erase(r.addr)) {
      ++d.frees;
    }
  }
  std::vector<DeviceEventFacts> finish() {
    std::vector<DeviceEventFacts> out;
    for (auto& [id, d] : devices_) {
      d.facts.device = id;
      out.push_back(std::move(d.facts));
    }
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.device < b.device; });
    return out;
  }

 private:
  struct Device {
    DeviceEventFacts facts;
    std::unordered_set<std::uint64_t> live;
    std::uint64_t allocs = 0;
    std::uint64_t frees = 0;
  };
  std::unordered_map<std::int32_t, Device> devices_;
};

}  // namespace

bool is_summary_document(const std::string& path) { return read_summary(path).has_value(); }

CheckInput load_check_input(const std::string& path, std::size_t trace_index) {
  CheckInput in;
  in.path = path;
  if (auto j = read_summary(path)) {
    in.is_summary = true;
    in.summary = std::move(*j);
    in.measures = measures_from_summary(in.summary, path);
    for (auto& m : in.measures) m.trace_index += trace_index;
    return in;
  }
  auto reader = open_trace(path);
  TraceModelBuilder model(reader->header());
  StepSeriesBuilder steps;
  EventFactsBuilder facts;
  TraceRecord r;
  try {
    while (reader->next(r)) {
      model.add(r);
      steps.add(r);
      facts.add(r);
    }
  } catch (const TraceError&) {
    throw;
  } catch (const std::exception& e) {
    throw TraceError(fmt::format("{}: {}: {}", path, reader->position(), e.what()));
  }
  std::vector<TraceModel> models;
  models.push_back(model.finish(reader->incomplete()));
  if (models.back().header.path.empty()) models.back().header.path = path;
  in.summary = summary_json(models);
  in.measures = measures_from_summary(in.summary, path);
  in.steps = steps.finish();
  in.facts = facts.finish();
  for (auto& m : in.measures) {
    m.trace_index = trace_index;
    m.growth_source = "none";
    for (const auto& s : in.steps) {
      if (s.device != m.device) continue;
      m.growth_source = s.source;
      m.growth_note = s.note;
      if (s.source != "none") m.growth = fit_growth(s.samples);
    }
    if (m.growth_source == "none" && m.growth_note.empty()) m.growth_note = "no allocations on this device";
  }
  return in;
}

}  // namespace vramtrace
