#include "analyses/oom_whatif.h"

#include <fmt/format.h>

#include <algorithm>

#include "analyses/replay.h"
#include "vramtrace/settings.h"

namespace vramtrace {

namespace {
constexpr DevicePtr kInjectedBase = 0xfff0000000000000ull;  // far above any device address
}

bool OomAsAllocReader::next(TraceRecord& out) {
  if (!queue_.empty()) {
    out = queue_.front();
    queue_.erase(queue_.begin());
    return true;
  }
  if (!inner_.next(out)) return false;
  const std::uint64_t index = read_++;
  if (out.action != Action::oom || out.size == 0) return true;
  if (put_back_ && !std::binary_search(put_back_->begin(), put_back_->end(), index)) return true;
  TraceRecord a = out;
  a.action = Action::alloc;
  a.addr = kInjectedBase + (injected_++) * (1ull << 40);
  TraceRecord fr = a;
  fr.action = Action::free_requested;
  TraceRecord fc = a;
  fc.action = Action::free_completed;
  out = a;
  queue_.push_back(fr);
  queue_.push_back(fc);
  return true;
}

std::vector<std::string> whatif_settings() {
  return {"",
          "expandable_segments:True",
          "max_split_size_mb:20",
          "max_split_size_mb:128",
          "max_split_size_mb:512",
          "roundup_power2_divisions:4"};
}

std::uint64_t whatif_capacity(const TraceModel& m, const std::vector<OomCase>& cases, const std::string& text,
                              std::string& error) {
  if (!text.empty()) {
    std::uint64_t v = 0;
    if (!parse_size(text, v, error)) return 0;
    return v;
  }
  for (const auto& c : cases) {
    if (c.last_state || !c.figures.reserved) continue;
    if (c.figures.device_free) return *c.figures.reserved + *c.figures.device_free;
  }
  // The device of the first case: a process's devices may differ in size (or cap).
  return cases.empty() ? m.header.device_total_bytes : m.header.total_bytes_of(cases.front().device);
}

std::vector<WhatIf> run_whatifs(const std::string& path, const TraceModel& m, std::uint64_t capacity) {
  std::vector<WhatIf> out;
  std::vector<ReplayConfig> configs;
  std::vector<std::string> names;
  for (const auto& extra : whatif_settings()) {
    std::string conf = m.header.settings;
    if (!extra.empty()) conf = conf.empty() ? extra : conf + "," + extra;
    ReplayConfig c;
    std::string err;
    if (!AllocatorSettings::parse(conf, c.settings, err)) {
      WhatIf w;
      w.settings = extra;
      w.error = err;
      out.push_back(w);
      continue;
    }
    c.capacity_bytes = capacity;
    configs.push_back(c);
    names.push_back(extra);
  }
  // The OOMs only: a failed attempt the program retried is followed by its allocation already.
  std::vector<std::uint64_t> put_back;
  for (const auto& d : m.devices)
    for (const auto& o : d.ooms)
      if (o.fate == OomFate::oom) put_back.push_back(o.event_index);
  std::sort(put_back.begin(), put_back.end());
  auto reader = open_trace(path);
  OomAsAllocReader wrapped(*reader, std::move(put_back));
  ReplayReport rep = replay(wrapped, configs);
  for (std::size_t i = 0; i < configs.size(); ++i) {
    WhatIf w;
    w.settings = names[i];
    bool any = false;
    for (const auto& r : rep.results) {
      if (r.config.settings.text != configs[i].settings.text || r.config.capacity_bytes != capacity) continue;
      any = true;
      w.peak_reserved = std::max(w.peak_reserved, r.stats.reserved_bytes[kStatAll].peak);
      w.peak_allocated = std::max(w.peak_allocated, r.stats.allocated_bytes[kStatAll].peak);
      w.ooms += r.failed_allocs;
    }
    if (!any) w.error = "no replay result";
    w.fits = any && w.ooms == 0;
    w.margin_bytes = static_cast<std::int64_t>(capacity) - w.peak_reserved;
    out.push_back(w);
  }
  return out;
}

}  // namespace vramtrace
