// The memory ledger in the reports (ledger_report.h).
#include "analyses/ledger_report.h"

#include <fmt/format.h>

#include "analyses/sites.h"
#include "vramtrace/units.h"

namespace vramtrace {

namespace {

using i64 = std::int64_t;
using u64 = std::uint64_t;

std::string fb(i64 v) { return format_bytes(static_cast<double>(v), ByteStyle::pytorch); }

nlohmann::json or_null(const std::optional<i64>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); }
nlohmann::json or_null(const std::optional<u64>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); }

const char* moment_key(LedgerAt::Moment m) {
  switch (m) {
    case LedgerAt::Moment::end:
      return "end";
    case LedgerAt::Moment::peak:
      return "peak";
    case LedgerAt::Moment::oom:
      return "oom";
  }
  return "end";
}

std::string source_text(const LedgerAt& at) {
  if (at.free_source == "mem_get_info") return "torch.cuda.mem_get_info at exit";
  if (at.free_source == "oom") return "cudaMemGetInfo at the OOM";
  return at.free_source;
}

}  // namespace

std::string ledger_moment_name(const LedgerAt& at) {
  switch (at.moment) {
    case LedgerAt::Moment::end:
      return "the end";
    case LedgerAt::Moment::peak:
      return "the peak";
    case LedgerAt::Moment::oom:
      return fmt::format("OOM {}", at.oom + 1);
  }
  return "the end";
}

std::string ledger_levels(const MemoryLedger& ledger) {
  std::string t =
      ledger.sidecar.empty() ? "tensor level (PyTorch's history)" : "tensor level (PyTorch's history and its sidecar)";
  if (ledger.device_trace.empty()) return t + "; no device level";
  return t + " and device level (the shim's trace " + ledger.device_trace + ")";
}

std::string render_ledger_text(const MemoryLedger& ledger, const LedgerAt& at, const std::string& title,
                               const std::string& indent) {
  std::string out = indent + title + "\n";
  auto row = [&](const std::string& name, const std::string& value, const std::string& extra = {}) {
    out += fmt::format("{}  {:<46} {:>12}{}\n", indent, name, value, extra.empty() ? "" : "  (" + extra + ")");
  };
  row("PyTorch's tensors (allocated)", fb(at.allocated_bytes),
      fmt::format("active {}, requested {}", fb(at.active_bytes), fb(at.requested_bytes)));
  row("PyTorch's cache (reserved - allocated)", fb(at.cache_bytes()));
  row("= PyTorch reserved", fb(at.reserved_bytes));
  const auto used = at.used_bytes();
  if (at.outside) {
    std::string kinds;
    auto kind = [&](const char* name, u64 v) {
      if (v) kinds += fmt::format("{}{} {}", kinds.empty() ? "" : ", ", name, fb(static_cast<i64>(v)));
    };
    kind("device", at.outside->device);
    kind("pitched", at.outside->pitched);
    kind("pool", at.outside->pool);
    kind("virtual memory", at.outside->virtual_memory);
    row("+ outside PyTorch's allocator", fb(static_cast<i64>(at.outside->total())), kinds);
    if (at.rounding_bytes && *at.rounding_bytes)
      row("+ vramtrace's blocks beyond PyTorch's segments", fb(static_cast<i64>(*at.rounding_bytes)));
  } else {
    row("+ outside PyTorch's allocator", "unknown");
  }
  const std::string context = at.context_bytes ? fmt::format("of it, {} when vramtrace met the context",
                                                             fb(static_cast<i64>(*at.context_bytes)))
                                               : std::string();
  if (auto rest = at.rest_bytes()) {
    row("+ rest: CUDA context, driver, other processes", fb(*rest), context);
  } else if (auto np = at.not_pytorch_bytes()) {
    row("+ rest: CUDA context, driver, other processes", "unknown");
    row("  (not PyTorch's: outside + rest together)", fb(*np), context);
  } else {
    row("+ rest: CUDA context, driver, other processes", "unknown",
        at.context_bytes ? fmt::format("the context and the device's other users when vramtrace met it: {}",
                                       fb(static_cast<i64>(*at.context_bytes)))
                         : std::string());
  }
  if (used)
    row("= used (total - free)", fb(*used),
        fmt::format("{} free of {}, {}", fb(static_cast<i64>(*at.free_bytes)), fb(static_cast<i64>(*at.total_bytes)),
                    source_text(at)));
  else
    row("= used (total - free)", "unknown",
        at.free_bytes ? "the device's total is not recorded" : "no free-memory reading at this moment");
  if (at.outside && ledger.stacks && !at.outside_stacks.empty()) {
    const SitesAt s = sites_of(at.outside_stacks, *ledger.stacks);
    out += render_sites_text(s, "Allocated outside PyTorch's allocator, by site:", indent + "  ");
  }
  for (const auto& n : at.notes) out += indent + "  - " + n + "\n";
  return out;
}

nlohmann::json ledger_at_json(const MemoryLedger& ledger, const LedgerAt& at) {
  nlohmann::json j;
  j["moment"] = moment_key(at.moment);
  if (at.moment == LedgerAt::Moment::oom) {
    j["oom"] = at.oom;
    j["in_history"] = at.oom_in_history;
    j["request_bytes"] = at.request_bytes;
  }
  j["time_ns"] = at.time_ns;
  j["tensor_source"] = at.tensor_source;
  j["allocated_bytes"] = at.allocated_bytes;
  j["active_bytes"] = at.active_bytes;
  j["requested_bytes"] = at.requested_bytes;
  j["reserved_bytes"] = at.reserved_bytes;
  j["cache_bytes"] = at.cache_bytes();
  if (at.outside) {
    j["outside_bytes"] = at.outside->total();
    j["outside_by_kind"] = {{"device", at.outside->device},
                            {"pitched", at.outside->pitched},
                            {"pool", at.outside->pool},
                            {"virtual_memory", at.outside->virtual_memory}};
  } else {
    j["outside_bytes"] = nullptr;
    j["outside_by_kind"] = nullptr;
  }
  j["rounding_bytes"] = or_null(at.rounding_bytes);
  j["context_bytes"] = or_null(at.context_bytes);
  j["rest_bytes"] = or_null(at.rest_bytes());
  j["not_pytorch_bytes"] = or_null(at.not_pytorch_bytes());
  j["used_bytes"] = or_null(at.used_bytes());
  j["free_bytes"] = or_null(at.free_bytes);
  j["total_bytes"] = or_null(at.total_bytes);
  j["free_source"] = at.free_source.empty() ? nlohmann::json(nullptr) : nlohmann::json(at.free_source);
  j["managed_bytes"] = at.managed_bytes;
  j["arrays"] = at.arrays;
  if (at.outside && ledger.stacks && !at.outside_stacks.empty())
    j["outside_sites"] = sites_json(sites_of(at.outside_stacks, *ledger.stacks));
  j["notes"] = at.notes;
  return j;
}

nlohmann::json ledger_json(const TraceModel& m) {
  if (!m.ledger) return nullptr;
  const MemoryLedger& l = *m.ledger;
  nlohmann::json devices = nlohmann::json::array();
  for (const auto& d : l.devices) {
    nlohmann::json moments = nlohmann::json::array();
    for (const auto& at : d.moments) moments.push_back(ledger_at_json(l, at));
    devices.push_back({{"device", d.device}, {"moments", moments}});
  }
  return {{"levels", ledger_levels(l)},
          {"sidecar", l.sidecar.empty() ? nlohmann::json(nullptr) : nlohmann::json(l.sidecar)},
          {"device_trace", l.device_trace.empty() ? nlohmann::json(nullptr) : nlohmann::json(l.device_trace)},
          {"notes", l.notes},
          {"devices", devices}};
}

}  // namespace vramtrace
