// Loading the inputs of `vramtrace check` / `vramtrace diff`. See check_input.h.
#include "analyses/check_input.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <iterator>
#include <optional>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "model/trace_model.h"
#include "readers/open_trace.h"
#include "readers/read_progress.h"
#include "vramtrace/size_rules.h"
#include "vramtrace/trace/byte_source.h"

namespace vramtrace {

namespace {

constexpr std::size_t kMaxSummaryBytes = std::size_t{64} << 20;

std::optional<nlohmann::json> read_summary(const std::string& path) {
  // Through ByteSource, as the trace readers read: a pipe or FIFO is copied once and read again
  // from the copy (Note [a trace from a pipe]), so looking here leaves the trace for them.
  std::unique_ptr<ByteSource> in;
  try {
    in = ByteSource::open(path);
  } catch (const TraceError&) {
    return std::nullopt;  // the trace readers say why
  }
  std::string text;
  char buf[65536];
  for (std::size_t n; (n = in->read(buf, sizeof buf)) > 0;) {
    if (text.empty()) {
      const std::string_view chunk(buf, n);
      const std::size_t first = chunk.find_first_not_of(" \t\r\n\f\v");
      if (first == std::string_view::npos) continue;
      if (chunk[first] != '{') return std::nullopt;
      text.append(chunk.substr(first));
    } else {
      text.append(buf, n);
    }
    if (text.size() > kMaxSummaryBytes) return std::nullopt;
  }
  if (text.empty()) return std::nullopt;
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("traces") || !j["traces"].is_array()) return std::nullopt;
  return j;
}

// Per device: allocation counts by size, and what came before the largest request.
class EventFactsBuilder {
 public:
  void add(const TraceRecord& r) {
    if (r.action == Action::oom) {
      // Every entry: which one reached the program is known only once the model is done.
      auto& d = devices_[r.device];
      if (d.oom_points.size() < kMaxOomPoints) {
        std::uint64_t same_size = 0;  // earlier allocations of this request (Note [diff explanation])
        for (const auto& [size, n] : d.facts.alloc_count_by_size)
          if (size == r.size || round_size(size, 1u) == r.size) same_size += n;
        d.oom_points.push_back({d.live_bytes, d.frees, d.allocs, d.sizes_hash, same_size});
      }
      return;
    }
    if (r.action != Action::alloc && r.action != Action::free_requested && r.action != Action::free_completed) return;
    auto& d = devices_[r.device];
    if (r.action == Action::alloc) {
      d.facts.alloc_count_by_size[r.size]++;
      if (r.size > d.facts.largest_request_bytes) {
        d.facts.largest_request_bytes = r.size;
        d.facts.frees_before_largest = d.frees;
        d.facts.live_before_largest = d.live.size();
        d.facts.allocs_before_largest = d.allocs;
        d.facts.live_bytes_before_largest = d.live_bytes;
      }
      if (auto [it, fresh] = d.live.try_emplace(r.addr, r.size); !fresh) {
        d.live_bytes -= it->second;
        it->second = r.size;
      }
      d.live_bytes += r.size;
      ++d.allocs;
      d.sizes_hash = extend_sizes_hash(d.sizes_hash, r.size);
    } else if (auto it = d.live.find(r.addr); it != d.live.end()) {
      d.live_bytes -= it->second;
      d.live.erase(it);
      ++d.frees;
    }
  }
  // `ooms`: per device, the indices among its `oom` entries of the first and the last that
  // reached the program (Note [one OOM per failed request]).
  std::vector<DeviceEventFacts> finish(const std::map<std::int32_t, std::pair<std::size_t, std::size_t>>& ooms) {
    std::vector<DeviceEventFacts> out;
    for (auto& [id, d] : devices_) {
      d.facts.device = id;
      d.facts.allocs = d.allocs;
      if (auto it = ooms.find(id); it != ooms.end() && it->second.first < d.oom_points.size()) {
        const OomPoint& p = d.oom_points[it->second.first];
        d.facts.live_bytes_at_oom = p.live_bytes;
        d.facts.frees_before_oom = p.frees;
        d.facts.allocs_before_oom = p.allocs;
        d.facts.sizes_hash_at_oom = p.sizes_hash;
        d.facts.same_size_before_oom = p.same_size;
      }
      if (auto it = ooms.find(id); it != ooms.end() && it->second.second < d.oom_points.size())
        d.facts.allocs_before_last_oom = d.oom_points[it->second.second].allocs;
      out.push_back(std::move(d.facts));
    }
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.device < b.device; });
    return out;
  }

 private:
  // The model keeps every entry's figures; the facts keep this many moments (the first OOM that
  // reached the program lies among them unless the program retried more often than that).
  static constexpr std::size_t kMaxOomPoints = 4096;
  struct OomPoint {
    std::uint64_t live_bytes = 0;
    std::uint64_t frees = 0;
    std::uint64_t allocs = 0;
    std::uint64_t sizes_hash = 0;
    std::uint64_t same_size = 0;
  };
  struct Device {
    DeviceEventFacts facts;
    std::unordered_map<std::uint64_t, std::uint64_t> live;  // addr -> requested bytes
    std::uint64_t live_bytes = 0;
    std::uint64_t allocs = 0;
    std::uint64_t frees = 0;
    std::uint64_t sizes_hash = kEmptySizesHash;
    std::vector<OomPoint> oom_points;  // per `oom` entry, in order
  };
  std::unordered_map<std::int32_t, Device> devices_;
};

// The sites of a summary document's trace entry `t` (its "sites": trace_sites_json).
void sites_from_summary(const nlohmann::json& t, const std::string& path, CheckInput& in) {
  const auto it = t.find("sites");
  if (it == t.end() || !it->is_object()) {
    in.no_stacks_reason = "the summary document lists no allocation sites (written before vramtrace had them?)";
    return;
  }
  const auto devs = it->find("devices");
  if (devs == it->end() || !devs->is_array() || devs->empty()) {
    in.no_stacks_reason = it->value("reason", std::string("the summary document lists no allocation sites"));
    return;
  }
  try {
    for (const auto& d : *devs) {
      DeviceSiteTotals s;
      s.device = d.at("device").get<std::int32_t>();
      s.at_peak = site_bytes_from_json(d.value("at_peak", nlohmann::json()));
      s.at_end = site_bytes_from_json(d.value("at_end", nlohmann::json()));
      if (!s.at_end) {
        in.sites.clear();
        in.no_stacks_reason =
            "the summary document lists only the top sites, not every site's bytes (\"all_sites\", written by an "
            "earlier vramtrace): run `vramtrace summary --json` on the trace again";
        return;
      }
      in.sites.push_back(std::move(s));
    }
  } catch (const nlohmann::json::exception& e) {
    throw BudgetError(fmt::format("{}: the summary document's \"sites\" are not usable: {}", path, e.what()));
  }
  in.has_stacks = true;
}

// The sites of a trace's model, for diff.
void sites_from_model(const TraceModel& m, CheckInput& in) {
  if (!m.stacks) {
    in.no_stacks_reason = "the trace records no call stacks";
    return;
  }
  in.has_stacks = true;
  for (const auto& ds : trace_sites(m)) {
    DeviceSiteTotals s;
    s.device = ds.device;
    const bool peak_known = std::any_of(m.devices.begin(), m.devices.end(), [&](const DeviceModel& d) {
      return d.device == ds.device && d.at_peak.captured;
    });
    if (peak_known) s.at_peak = ds.at_peak.all;
    s.at_end = ds.at_end.all;
    in.sites.push_back(std::move(s));
  }
}

}  // namespace

bool is_summary_document(const std::string& path) { return read_summary(path).has_value(); }

AlignmentPoints alignment_points(const std::string& path, std::int32_t device, std::uint64_t at_index,
                                 std::uint64_t request_bytes, std::uint64_t same_size_index) {
  auto reader = open_trace(path);
  std::unordered_map<std::uint64_t, std::uint64_t> live;  // addr -> requested bytes
  AllocationPoint p;
  p.sizes_hash = kEmptySizesHash;
  std::uint64_t same_size = 0;
  AlignmentPoints out;
  TraceRecord r;
  while ((!out.at_index || !out.at_same_size) && reader->next(r)) {
    tick_read_progress(*reader);
    if (r.device != device) continue;
    if (r.action == Action::alloc) {
      // The state right before this allocation, frees since the one before included.
      p.next_request_bytes = r.size;
      if (p.allocs == at_index) out.at_index = p;
      if (r.size == request_bytes || round_size(r.size, 1u) == request_bytes) {
        if (same_size == same_size_index && !out.at_same_size) out.at_same_size = p;
        ++same_size;
      }
      if (auto [it, fresh] = live.try_emplace(r.addr, r.size); !fresh) {
        p.live_bytes -= it->second;
        it->second = r.size;
      }
      p.live_bytes += r.size;
      ++p.allocs;
      p.sizes_hash = extend_sizes_hash(p.sizes_hash, r.size);
    } else if (r.action == Action::free_requested || r.action == Action::free_completed) {
      if (auto it = live.find(r.addr); it != live.end()) {
        p.live_bytes -= it->second;
        live.erase(it);
        ++p.frees;
      }
    }
  }
  return out;
}

CheckInput load_check_input(const std::string& path, std::size_t trace_index) {
  CheckInput in;
  in.path = path;
  if (auto j = read_summary(path)) {
    in.is_summary = true;
    in.traces = figures_from_summary_json(*j, path);
    if (!(*j)["traces"].empty()) sites_from_summary((*j)["traces"].front(), path, in);
    in.measures = measures_from_figures(in.traces);
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
      steps.add(r, r.action == Action::mark ? std::string_view(reader->mark_name()) : std::string_view{});
      facts.add(r);
      tick_read_progress(*reader);
    }
  } catch (const TraceError&) {
    throw;
  } catch (const std::exception& e) {
    throw TraceError(fmt::format("{}: {}: {}", path, reader->position(), e.what()));
  }
  std::vector<TraceModel> models;
  models.push_back(model.finish(*reader));
  if (models.back().header.path.empty()) models.back().header.path = path;
  sites_from_model(models.back(), in);
  in.traces = figures_from_models(models);
  in.measures = measures_from_figures(in.traces);
  in.steps = steps.finish();
  std::map<std::int32_t, std::pair<std::size_t, std::size_t>> ooms;  // first and last OOM
  for (const auto& d : models.front().devices)
    for (std::size_t i = 0; i < d.ooms.size(); ++i)
      if (d.ooms[i].fate == OomFate::oom) {
        auto [it, fresh] = ooms.try_emplace(d.device, i, i);
        if (!fresh) it->second.second = i;
      }
  in.facts = facts.finish(ooms);
  for (const auto& d : models.front().devices) {
    auto first = ooms.find(d.device);
    if (first == ooms.end() || first->second.first >= 4096) continue;
    for (auto& f : in.facts) {
      if (f.device != d.device) continue;
      const OomRecord& o = d.ooms[first->second.first];
      f.has_oom = true;
      f.oom_request_bytes = o.request_bytes;
      f.oom_device_free_bytes = o.device_free_bytes;
      f.oom_allocated_bytes = o.state.stats.allocated_bytes[kStatAll].current;
      f.oom_reserved_bytes = o.state.stats.reserved_bytes[kStatAll].current;
      f.oom_largest_free_block_bytes = o.state.largest_free_block;
    }
  }
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
