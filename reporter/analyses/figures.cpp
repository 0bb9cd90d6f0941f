// The figures of `check` and `diff`: see figures.h.
#include "analyses/figures.h"

#include <fmt/format.h>

#include "analyses/budgets.h"

namespace vramtrace {

namespace {

// An integer of `j` under `key`, unset when absent or of another type.
template <class Int>
std::optional<Int> integer_at(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<Int>();
}

}  // namespace

std::vector<TraceFigures> figures_from_models(const std::vector<TraceModel>& models) {
  std::vector<TraceFigures> out;
  for (const auto& m : models) {
    TraceFigures t;
    t.path = m.header.path;
    t.rank = m.header.rank;
    t.incomplete = m.incomplete;
    if (m.incomplete) t.incomplete_reason = m.incomplete_reason;
    t.lost_events = m.lost_events;
    for (const auto& d : m.devices) {
      const DeviceStats& s = d.stats;
      DeviceFigures f;
      f.device = d.device;
      f.allocated_bytes_peak = s.allocated_bytes[kStatAll].peak;
      f.reserved_bytes_peak = s.reserved_bytes[kStatAll].peak;
      f.active_bytes_peak = s.active_bytes[kStatAll].peak;
      f.requested_bytes_peak = s.requested_bytes[kStatAll].peak;
      f.inactive_split_bytes_peak = s.inactive_split_bytes[kStatAll].peak;
      f.segment_peak = s.segment[kStatAll].peak;
      f.allocations = s.allocation[kStatAll].allocated;
      // The OOMs and retries every command reports (Note [one OOM per failed request]).
      f.num_ooms = static_cast<std::int64_t>(d.oom_count.ooms);
      if (d.oom_count.retries) f.num_alloc_retries = static_cast<std::int64_t>(*d.oom_count.retries);
      f.oom_events = static_cast<std::int64_t>(d.oom_count.entries);
      if (const std::uint64_t cap = m.header.usable_bytes_of(d.device)) f.capacity_bytes = cap;
      if (d.at_peak.captured) f.largest_free_block_at_peak_bytes = d.at_peak.largest_free_block;
      f.largest_free_block_at_end_bytes = d.at_end.largest_free_block;
      if (d.history == DeviceModel::History::late) f.history = "late";
      if (d.history == DeviceModel::History::none) f.history = "none";
      t.devices.push_back(f);
    }
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<TraceFigures> figures_from_summary_json(const nlohmann::json& summary, const std::string& what) {
  auto fail = [&](const std::string& m) -> void {
    throw BudgetError(fmt::format("{}: not a `vramtrace summary --json` document: {}", what, m));
  };
  if (!summary.is_object() || !summary.contains("traces") || !summary["traces"].is_array()) fail("no \"traces\" array");
  std::vector<TraceFigures> out;
  std::size_t ti = 0;
  for (const auto& t : summary["traces"]) {
    if (!t.is_object() || !t.contains("devices") || !t["devices"].is_array())
      fail(fmt::format("traces[{}] has no \"devices\" array", ti));
    TraceFigures tf;
    std::string path = t.value("path", std::string{});
    if (t.contains("path")) tf.path = std::move(path);
    for (const auto& d : t["devices"]) {
      if (!d.is_object() || !d.contains("device") || !d["device"].is_number_integer())
        fail(fmt::format("traces[{}]: a device entry without an integer \"device\"", ti));
      DeviceFigures f;
      f.device = d["device"].get<std::int32_t>();
      const nlohmann::json empty = nlohmann::json::object();
      const auto& stats = d.contains("stats") && d["stats"].is_object() ? d["stats"] : empty;
      // The figures check budgets: a value that is not an integer makes the document unusable.
      auto budgeted = [&](const char* key) -> std::optional<std::int64_t> {
        auto it = stats.find(key);
        if (it == stats.end() || it->is_null()) return std::nullopt;
        if (!it->is_number_integer())
          fail(fmt::format("traces[{}] device {}: \"{}\" is not an integer", ti, f.device, key));
        return it->get<std::int64_t>();
      };
      f.reserved_bytes_peak = budgeted("reserved_bytes.all.peak");
      f.allocated_bytes_peak = budgeted("allocated_bytes.all.peak");
      f.num_ooms = budgeted("num_ooms");
      // "oom_count" (since the count of OOMs and entries differ): the entries; else "ooms".
      f.oom_events = integer_at<std::int64_t>(d, "ooms");
      if (auto oc = d.find("oom_count"); oc != d.end() && oc->is_object())
        if (auto e = integer_at<std::int64_t>(*oc, "oom_entries")) f.oom_events = e;
      f.num_alloc_retries = budgeted("num_alloc_retries");
      // Figures only diff shows: unset when not an integer.
      f.active_bytes_peak = integer_at<std::int64_t>(stats, "active_bytes.all.peak");
      f.requested_bytes_peak = integer_at<std::int64_t>(stats, "requested_bytes.all.peak");
      f.inactive_split_bytes_peak = integer_at<std::int64_t>(stats, "inactive_split_bytes.all.peak");
      f.segment_peak = integer_at<std::int64_t>(stats, "segment.all.peak");
      if (auto h = d.find("history"); h != d.end() && h->is_string()) f.history = h->get<std::string>();
      f.capacity_bytes = integer_at<std::uint64_t>(d, "capacity_bytes");
      f.allocations = integer_at<std::int64_t>(stats, "allocation.all.allocated");
      if (auto peak = d.find("peak"); peak != d.end())
        f.largest_free_block_at_peak_bytes = integer_at<std::uint64_t>(*peak, "largest_free_block_bytes");
      if (auto end = d.find("end"); end != d.end())
        f.largest_free_block_at_end_bytes = integer_at<std::uint64_t>(*end, "largest_free_block_bytes");
      tf.devices.push_back(f);
    }
    // Descriptive fields of another type read as absent: they only label the figures.
    if (auto r = t.find("rank"); r != t.end() && r->is_string()) tf.rank = r->get<std::string>();
    if (auto inc = t.find("incomplete"); inc != t.end() && inc->is_boolean()) tf.incomplete = inc->get<bool>();
    tf.incomplete_reason = "cut last line";
    if (auto why = t.find("incomplete_reason"); why != t.end() && why->is_string())
      tf.incomplete_reason = why->get<std::string>();
    if (!tf.incomplete) tf.incomplete_reason.clear();
    if (auto lost = t.find("lost_events"); lost != t.end() && lost->is_number_unsigned())
      tf.lost_events = lost->get<std::uint64_t>();
    out.push_back(std::move(tf));
    ++ti;
  }
  return out;
}

}  // namespace vramtrace
