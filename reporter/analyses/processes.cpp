#include "analyses/processes.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <map>
#include <set>

#include "analyses/oom/diagnosis.h"
#include "model/ledger.h"
#include "vramtrace/units.h"

namespace vramtrace {

namespace {

using i64 = std::int64_t;

std::optional<std::int32_t> parse_ordinal(const std::string& s) {
  if (s.empty() || s.size() > 6) return std::nullopt;
  std::int32_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

std::string trim(const std::string& s) {
  std::size_t a = s.find_first_not_of(" \t");
  if (a == std::string::npos) return {};
  std::size_t b = s.find_last_not_of(" \t");
  return s.substr(a, b - a + 1);
}

/// CUDA_VISIBLE_DEVICES split at commas (entries trimmed, empty entries dropped).
std::vector<std::string> visible_entries(const std::string& v) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= v.size()) {
    std::size_t comma = v.find(',', start);
    if (comma == std::string::npos) comma = v.size();
    std::string e = trim(v.substr(start, comma - start));
    if (!e.empty()) out.push_back(e);
    start = comma + 1;
  }
  return out;
}

/// How one process's device ordinals map to device keys.
struct DeviceMap {
  std::vector<std::int32_t> physical;  ///< from CUDA_VISIBLE_DEVICES; empty = identity
  std::int32_t host_offset = 0;
  std::int32_t key(std::int32_t ordinal) const {
    std::int32_t phys = ordinal;
    if (ordinal >= 0 && static_cast<std::size_t>(ordinal) < physical.size())
      phys = physical[static_cast<std::size_t>(ordinal)];
    return host_offset + phys;
  }
};

constexpr std::int32_t kHostStride = 1000;

std::string file_name(const std::string& path) {
  std::string n = std::filesystem::path(path).filename().string();
  return n.empty() ? path : n;
}

// One process's device ordinals as device keys: its host's offset, and CUDA_VISIBLE_DEVICES when
// it names devices by number. `visible` gets its entries; a note says when they are not numbers.
DeviceMap map_devices(const TraceHeader& h, const std::vector<std::string>& hosts, bool several_hosts,
                      std::vector<std::string>& visible, std::vector<std::string>& notes) {
  DeviceMap map;
  if (several_hosts)
    map.host_offset =
        static_cast<std::int32_t>(std::find(hosts.begin(), hosts.end(), h.host) - hosts.begin()) * kHostStride;
  if (h.cuda_visible_devices) {
    visible = visible_entries(*h.cuda_visible_devices);
    bool all_int = !visible.empty();
    for (const auto& e : visible) all_int = all_int && parse_ordinal(e).has_value() && *parse_ordinal(e) < kHostStride;
    if (all_int) {
      for (const auto& e : visible) map.physical.push_back(*parse_ordinal(e));
    } else if (!visible.empty()) {
      notes.push_back(
          fmt::format("{}: CUDA_VISIBLE_DEVICES={} names devices by UUID or MIG instance; its device "
                      "numbers are shown as the process saw them",
                      file_name(h.path), *h.cuda_visible_devices));
    }
  }
  return map;
}

// Process `i`'s cells, one per device of its trace, and the label of each device it reached.
void add_cells(std::size_t i, const TraceModel& model, const DeviceMap& map, bool several_hosts,
               std::vector<ProcessDeviceCell>& cells, std::map<std::int32_t, std::string>& device_labels) {
  const auto& h = model.header;
  auto label = [&](const ProcessDeviceCell& c) {
    std::int32_t phys = c.device - map.host_offset;
    device_labels[c.device] = several_hosts
                                  ? fmt::format("{} device {}", h.host.empty() ? "(unknown host)" : h.host, phys)
                                  : fmt::format("device {}", phys);
  };
  auto ledger_end = [&](std::int32_t ordinal) -> std::optional<ProcessDeviceCell::LedgerEnd> {
    const DeviceLedger* dl = model.ledger ? model.ledger->device(ordinal) : nullptr;
    const LedgerAt* at = dl ? dl->at(LedgerAt::Moment::end) : nullptr;
    if (!at) return std::nullopt;
    ProcessDeviceCell::LedgerEnd e;
    e.reserved = at->reserved_bytes;
    if (at->outside) e.outside = static_cast<i64>(at->outside->total());
    if (at->context_bytes) e.context = static_cast<i64>(*at->context_bytes);
    e.rest = at->rest_bytes();
    e.used = at->used_bytes();
    return e;
  };
  for (const auto& d : model.devices) {
    ProcessDeviceCell c;
    c.process = i;
    c.device = map.key(d.device);
    c.ordinal = d.device;
    c.peak_allocated = d.stats.allocated_bytes[kStatAll].peak;
    c.peak_reserved = d.stats.reserved_bytes[kStatAll].peak;
    c.end_reserved = d.stats.reserved_bytes[kStatAll].current;
    c.ledger_end = ledger_end(d.device);
    cells.push_back(c);
    label(c);
  }
  // Devices only the ledger names: the process initialised CUDA there, PyTorch holds nothing.
  if (model.ledger)
    for (const auto& dl : model.ledger->devices) {
      bool known = false;
      for (const auto& d : model.devices) known = known || d.device == dl.device;
      if (known) continue;
      ProcessDeviceCell c;
      c.process = i;
      c.device = map.key(dl.device);
      c.ordinal = dl.device;
      c.ledger_end = ledger_end(dl.device);
      c.context_only = true;
      cells.push_back(c);
      label(c);
    }
}

// Own device (rules in processes.h and docs/reports.md).
void find_own_device(ProcessInfo& p, std::size_t i, const TraceHeader& h, const DeviceMap& map,
                     const std::vector<std::string>& visible, bool several_hosts,
                     const std::vector<ProcessDeviceCell>& cells) {
  if (visible.size() == 1) {
    p.own_device = map.key(0);
    p.own_device_rule = "CUDA_VISIBLE_DEVICES";
  } else if (auto lr = parse_ordinal(h.local_rank)) {
    p.own_device = map.key(*lr);
    p.own_device_rule = "LOCAL_RANK";
  } else if (auto r = parse_ordinal(h.rank); r && !several_hosts) {
    p.own_device = map.key(*r);
    p.own_device_rule = "RANK";
  } else {
    const ProcessDeviceCell* best = nullptr;
    for (const auto& c : cells) {
      if (c.process != i || (c.peak_reserved == 0 && c.peak_allocated == 0)) continue;
      if (!best || c.peak_reserved > best->peak_reserved ||
          (c.peak_reserved == best->peak_reserved && c.peak_allocated > best->peak_allocated))
        best = &c;
    }
    if (best) {
      p.own_device = best->device;
      p.own_device_rule = "most memory";
    }
  }
}

// Labels: by rank, else pid, else file name; made unique.
void label_processes(std::vector<ProcessInfo>& processes, bool several_hosts) {
  for (auto& p : processes) {
    std::string base = !p.rank.empty() ? "rank " + p.rank : p.pid ? fmt::format("pid {}", p.pid) : file_name(p.path);
    if (several_hosts && !p.host.empty()) base = p.host + " " + base;
    p.label = base;
  }
  std::vector<bool> dup(processes.size(), false);
  for (std::size_t i = 0; i < processes.size(); ++i)
    for (std::size_t j = 0; j < processes.size(); ++j)
      dup[i] = dup[i] || (i != j && processes[j].label == processes[i].label);
  for (std::size_t i = 0; i < processes.size(); ++i) {
    if (!dup[i]) continue;
    auto& p = processes[i];
    if (!p.rank.empty() && p.pid)
      p.label += fmt::format(" (pid {})", p.pid);
    else
      p.label += " (" + file_name(p.path) + ")";
  }
  for (std::size_t i = 0; i < processes.size(); ++i) {  // still equal (same file name twice): number them
    for (std::size_t j = i + 1; j < processes.size(); ++j)
      if (processes[j].label == processes[i].label) processes[j].label += fmt::format(" #{}", j + 1);
  }
}

// Each device's sums over the processes, and each process's devices other than its own.
void sum_device_loads(ProcessDeviceView& v, const std::map<std::int32_t, std::string>& device_labels) {
  std::sort(v.cells.begin(), v.cells.end(), [](const auto& a, const auto& b) {
    return a.process != b.process ? a.process < b.process : a.device < b.device;
  });
  // A process with two devices of one trace mapped to one key (should not happen) keeps both
  // cells; the sums below still add them.
  std::map<std::int32_t, DeviceLoad> loads;
  for (const auto& [key, label] : device_labels) {
    loads[key].device = key;
    loads[key].label = label;
  }
  for (const auto& c : v.cells) {
    auto& l = loads[c.device];
    l.peak_allocated_sum += c.peak_allocated;
    l.peak_reserved_sum += c.peak_reserved;
    if (c.peak_reserved > 0 || c.peak_allocated > 0 || c.context_only) {
      l.processes++;
      auto& p = v.processes[c.process];
      if (p.own_device && *p.own_device != c.device &&
          std::find(p.foreign_devices.begin(), p.foreign_devices.end(), c.device) == p.foreign_devices.end())
        p.foreign_devices.push_back(c.device);
    }
  }
  for (auto& [k, l] : loads) v.devices.push_back(l);
}

// The most loaded device against the least loaded of the others.
void find_imbalance(ProcessDeviceView& v) {
  std::vector<const DeviceLoad*> loaded;
  for (const auto& d : v.devices)
    if (d.peak_reserved_sum > 0) loaded.push_back(&d);
  if (loaded.size() >= 2) {
    const DeviceLoad* mx = loaded.front();
    for (const auto* d : loaded)
      if (d->peak_reserved_sum > mx->peak_reserved_sum) mx = d;
    const DeviceLoad* mn = nullptr;  // the least loaded of the others (so never mx itself)
    for (const auto* d : loaded)
      if (d != mx && (!mn || d->peak_reserved_sum < mn->peak_reserved_sum)) mn = d;
    v.imbalance = static_cast<double>(mx->peak_reserved_sum) / static_cast<double>(mn->peak_reserved_sum);
    v.most_loaded = mx->device;
    v.least_loaded = mn->device;
    i64 omax = 0, omin = INT64_MAX;
    for (const auto* d : loaded) {
      if (d == mx) continue;
      omax = std::max(omax, d->peak_reserved_sum);
      omin = std::min(omin, d->peak_reserved_sum);
    }
    v.others_equal = loaded.size() > 2 && static_cast<double>(omax) <= 1.01 * static_cast<double>(omin);
  }
}

}  // namespace

namespace {

// Note [processes one after another]: the "all processes" sums of a device are the most it can
// have held at once when its processes ran together (the ranks of a job). Traces of runs made one
// after another (a directory of unrelated runs, a job restarted) never held their peaks at once:
// where every process's time span on a device is known and each starts kApartGapNs or more after
// the ones before it end, a note says so and names the largest single peak.
constexpr std::int64_t kApartGapNs = 10'000'000'000;  // 10 s

void note_processes_apart(ProcessDeviceView& v, const std::vector<TraceModel>& models) {
  struct Span {
    i64 begin, end, peak_reserved;
  };
  std::map<std::int32_t, std::vector<Span>> spans;
  std::set<std::int32_t> unknown;
  for (const auto& c : v.cells) {
    const DeviceModel* d = nullptr;
    for (const auto& x : models[c.process].devices)
      if (x.device == c.ordinal) d = &x;
    // No claim without a span that bounds the process's time on the device: no events, a history
    // that began late (memory alive before its first event), no times (a history written without
    // them reads 0), or times that went back (the first or last event may be the odd one).
    if (!d || d->events == 0 || d->history != DeviceModel::History::complete || d->times_back != 0 ||
        (d->first_time_ns == 0 && d->last_time_ns == 0)) {
      unknown.insert(c.device);
      continue;
    }
    spans[c.device].push_back({d->first_time_ns, d->last_time_ns, c.peak_reserved});
  }
  for (auto& [key, list] : spans) {
    if (list.size() < 2 || unknown.count(key)) continue;
    std::sort(list.begin(), list.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
    // A process holds its last memory past its last event, until it ends (unknown here): only a
    // gap of kApartGapNs or more between one's last event and the next one's first tells runs made
    // one after another from the ranks of one job, whose events interleave or follow within
    // moments of each other.
    bool apart = true;
    i64 end = list.front().end, largest = list.front().peak_reserved;
    i64 gap = std::numeric_limits<i64>::max();
    for (std::size_t i = 1; i < list.size(); ++i) {
      gap = std::min(gap, list[i].begin - end);
      apart = apart && list[i].begin - end >= kApartGapNs;
      end = std::max(end, list[i].end);
      largest = std::max(largest, list[i].peak_reserved);
    }
    if (!apart) continue;
    v.apart_devices.push_back(key);
    const DeviceLoad* load = nullptr;
    for (const auto& d : v.devices)
      if (d.device == key) load = &d;
    v.notes.push_back(fmt::format(
        "{}: its {} processes' traces do not overlap in time ({:.1f} s or more between one's last event and the "
        "next one's first): runs made one after another never held the sum of their peaks at once; the largest "
        "single peak reserved is {}",
        load ? load->label : fmt::format("device {}", key % kHostStride), list.size(), static_cast<double>(gap) / 1e9,
        format_bytes(largest, ByteStyle::pytorch)));
  }
}

}  // namespace

ProcessDeviceView process_device_view(const std::vector<TraceModel>& models) {
  ProcessDeviceView v;
  // Hosts, in order of first appearance (an unknown host counts as one more).
  std::vector<std::string> hosts;
  for (const auto& m : models)
    if (std::find(hosts.begin(), hosts.end(), m.header.host) == hosts.end()) hosts.push_back(m.header.host);
  const bool several_hosts = hosts.size() > 1;

  std::vector<DeviceMap> maps;
  std::map<std::int32_t, std::string> device_labels;
  for (std::size_t i = 0; i < models.size(); ++i) {
    const auto& h = models[i].header;
    ProcessInfo p;
    p.path = h.path;
    p.pid = h.pid;
    p.host = h.host;
    p.rank = h.rank;
    p.local_rank = h.local_rank;
    std::vector<std::string> visible;
    DeviceMap map = map_devices(h, hosts, several_hosts, visible, v.notes);
    maps.push_back(map);
    add_cells(i, models[i], map, several_hosts, v.cells, device_labels);
    find_own_device(p, i, h, map, visible, several_hosts, v.cells);
    v.processes.push_back(std::move(p));
  }
  label_processes(v.processes, several_hosts);
  sum_device_loads(v, device_labels);
  note_processes_apart(v, models);
  // The imbalance compares the devices' sums of peaks: not a figure any device held where its
  // processes ran one after another.
  if (v.apart_devices.empty()) find_imbalance(v);
  return v;
}

namespace {

const DeviceLoad* find_load(const ProcessDeviceView& v, std::int32_t key) {
  for (const auto& d : v.devices)
    if (d.device == key) return &d;
  return nullptr;
}

std::string device_label(const ProcessDeviceView& v, std::int32_t key) {
  const DeviceLoad* d = find_load(v, key);
  return d ? d->label : fmt::format("device {}", key % kHostStride);
}

const ProcessDeviceCell* find_cell(const ProcessDeviceView& v, std::size_t process, std::int32_t device) {
  for (const auto& c : v.cells)
    if (c.process == process && c.device == device) return &c;
  return nullptr;
}

// The processes' memory ledgers at their ends (model/ledger.h), one cell per process and device:
// PyTorch reserved + outside PyTorch's allocator + rest = used. "" when no process has a ledger.
std::string render_ledger_table(const ProcessDeviceView& v) {
  bool any = false;
  for (const auto& c : v.cells) any = any || c.ledger_end.has_value();
  if (!any) return {};
  auto fb = [](const std::optional<i64>& x) { return x ? format_bytes(*x, ByteStyle::pytorch) : std::string("?"); };
  std::size_t w0 = std::string("process").size();
  for (const auto& p : v.processes) w0 = std::max(w0, p.label.size());
  std::vector<std::vector<std::string>> cols;
  std::vector<std::size_t> widths;
  for (const auto& d : v.devices) {
    std::vector<std::string> col;
    std::size_t w = d.label.size();
    for (std::size_t i = 0; i < v.processes.size(); ++i) {
      const auto* c = find_cell(v, i, d.device);
      std::string s = "-";
      if (c && c->ledger_end) {
        const auto& e = *c->ledger_end;
        s = fmt::format("{} + {} + {} = {}", format_bytes(e.reserved, ByteStyle::pytorch), fb(e.outside), fb(e.rest),
                        fb(e.used));
      }
      w = std::max(w, s.size());
      col.push_back(s);
    }
    cols.push_back(std::move(col));
    widths.push_back(w);
  }
  std::string out =
      "Memory ledger at each process's end: PyTorch reserved + outside PyTorch's allocator + rest "
      "(context, driver, other processes) = used\n";
  out += fmt::format("  {:<{}}", "process", w0);
  for (std::size_t k = 0; k < v.devices.size(); ++k) out += fmt::format("  {:>{}}", v.devices[k].label, widths[k]);
  out += "\n";
  for (std::size_t i = 0; i < v.processes.size(); ++i) {
    out += fmt::format("  {:<{}}", v.processes[i].label, w0);
    for (std::size_t k = 0; k < v.devices.size(); ++k) out += fmt::format("  {:>{}}", cols[k][i], widths[k]);
    out += "\n";
  }
  out +=
      "  (used: the whole device as the process read it at its end, other processes' memory in its rest; ? = not "
      "known, - = no ledger)\n";
  return out;
}

std::string own_rule_text(const ProcessInfo& p) {
  if (p.own_device_rule == "CUDA_VISIBLE_DEVICES") return "the only device in its CUDA_VISIBLE_DEVICES";
  if (p.own_device_rule == "LOCAL_RANK") return "from LOCAL_RANK=" + p.local_rank;
  if (p.own_device_rule == "RANK") return "from its rank " + p.rank + " (one host)";
  return "where it holds the most";
}

}  // namespace

std::string render_process_device_text(const ProcessDeviceView& v) {
  std::string out =
      fmt::format("Processes x devices ({} traces): peak allocated / peak reserved\n", v.processes.size());
  std::size_t w0 = std::string("all processes").size();
  for (const auto& p : v.processes) w0 = std::max(w0, p.label.size());
  std::vector<std::vector<std::string>> cols;  // per device, its cells
  std::vector<std::size_t> widths;
  for (const auto& d : v.devices) {
    std::vector<std::string> c;
    std::size_t w = d.label.size();
    for (std::size_t i = 0; i < v.processes.size(); ++i) {
      const auto* cell = find_cell(v, i, d.device);
      const auto& p = v.processes[i];
      bool foreign = std::find(p.foreign_devices.begin(), p.foreign_devices.end(), d.device) != p.foreign_devices.end();
      std::string s = !cell                ? "-"
                      : cell->context_only ? std::string("CUDA context")  // no PyTorch memory there
                                           : format_bytes(cell->peak_allocated, ByteStyle::pytorch) + " / " +
                                                 format_bytes(cell->peak_reserved, ByteStyle::pytorch);
      if (foreign) s += " *";
      w = std::max(w, s.size());
      c.push_back(s);
    }
    std::string total = format_bytes(d.peak_allocated_sum, ByteStyle::pytorch) + " / " +
                        format_bytes(d.peak_reserved_sum, ByteStyle::pytorch);
    w = std::max(w, total.size());
    c.push_back(total);
    cols.push_back(std::move(c));
    widths.push_back(w);
  }
  out += fmt::format("  {:<{}}  {:>5}", "process", w0, "own");
  for (std::size_t k = 0; k < v.devices.size(); ++k) out += fmt::format("  {:>{}}", v.devices[k].label, widths[k]);
  out += "\n";
  bool any_foreign = false;
  for (std::size_t i = 0; i < v.processes.size(); ++i) {
    const auto& p = v.processes[i];
    std::string own = p.own_device ? std::to_string(*p.own_device % kHostStride) : "?";
    out += fmt::format("  {:<{}}  {:>5}", p.label, w0, own);
    for (std::size_t k = 0; k < v.devices.size(); ++k) out += fmt::format("  {:>{}}", cols[k][i], widths[k]);
    out += "\n";
    any_foreign = any_foreign || !p.foreign_devices.empty();
  }
  out += fmt::format("  {:<{}}  {:>5}", "all processes", w0, "");
  for (std::size_t k = 0; k < v.devices.size(); ++k) out += fmt::format("  {:>{}}", cols[k].back(), widths[k]);
  out += "\n";
  out +=
      "  (all processes: sums of each process's peak, the most the device can have held at once when they ran "
      "together)\n";
  if (any_foreign) out += "  * memory on a device other than the process's own\n";

  if (v.imbalance) {
    const DeviceLoad* mx = find_load(v, v.most_loaded);
    const DeviceLoad* mn = find_load(v, v.least_loaded);
    if (*v.imbalance < 1.05) {
      out += fmt::format("Balance: the devices hold the same within 5% (largest/smallest peak reserved {:.2f}).\n",
                         *v.imbalance);
    } else if (v.others_equal) {
      out += fmt::format("Imbalance: {} holds {:.1f}x the others ({} reserved vs {} on each other device).\n",
                         mx->label, *v.imbalance, format_bytes(mx->peak_reserved_sum, ByteStyle::pytorch),
                         format_bytes(mn->peak_reserved_sum, ByteStyle::pytorch));
    } else {
      out += fmt::format("Imbalance: {} holds {:.1f}x {}, the least loaded device ({} reserved vs {}).\n", mx->label,
                         *v.imbalance, mn->label, format_bytes(mx->peak_reserved_sum, ByteStyle::pytorch),
                         format_bytes(mn->peak_reserved_sum, ByteStyle::pytorch));
    }
  }
  std::size_t flagged = 0;
  for (const auto& p : v.processes) flagged += p.foreign_devices.empty() ? 0 : 1;
  if (flagged == 0) {
    out += "Every process holds memory only on its own device.\n";
  } else {
    out += fmt::format("{} of {} processes {} memory on a device other than {} own:\n", flagged, v.processes.size(),
                       flagged == 1 ? "holds" : "hold", flagged == 1 ? "its" : "their");
    for (std::size_t i = 0; i < v.processes.size(); ++i) {
      const auto& p = v.processes[i];
      if (p.foreign_devices.empty()) continue;
      std::string where;
      for (auto d : p.foreign_devices) {
        const auto* c = find_cell(v, i, d);
        if (c && c->context_only) {
          // No PyTorch memory there: what the ledger knows of it.
          std::string what = "a CUDA context";
          if (c->ledger_end && c->ledger_end->context)
            what += fmt::format(" ({} with the device's other users when vramtrace met it)",
                                format_bytes(*c->ledger_end->context, ByteStyle::pytorch));
          if (c->ledger_end && c->ledger_end->outside && *c->ledger_end->outside > 0)
            what += fmt::format(" and {} outside PyTorch's allocator",
                                format_bytes(*c->ledger_end->outside, ByteStyle::pytorch));
          where += fmt::format("{}{} on {}", where.empty() ? "" : ", ", what, device_label(v, d));
          continue;
        }
        where += fmt::format("{}{} reserved on {}", where.empty() ? "" : ", ",
                             format_bytes(c ? c->peak_reserved : 0, ByteStyle::pytorch), device_label(v, d));
      }
      out += fmt::format("  {}: {} (its own device is {}, {})\n", p.label, where, device_label(v, *p.own_device),
                         own_rule_text(p));
    }
    out +=
        "  A process that creates tensors or a CUDA context on another rank's device (torch.cuda.set_device not "
        "called\n"
        "  before the first CUDA call, map_location missing in torch.load, a tensor created with device='cuda') takes\n"
        "  that memory from the other rank.\n";
  }
  out += render_ledger_table(v);
  for (const auto& n : v.notes) out += "Note: " + n + "\n";
  return out;
}

nlohmann::json process_device_json(const ProcessDeviceView& v) {
  nlohmann::json procs = nlohmann::json::array();
  nlohmann::json flagged = nlohmann::json::array();
  for (const auto& p : v.processes) {
    nlohmann::json j = {{"label", p.label},
                        {"path", p.path},
                        {"pid", p.pid},
                        {"host", p.host},
                        {"rank", p.rank},
                        {"local_rank", p.local_rank},
                        {"own_device_rule", p.own_device_rule},
                        {"foreign_devices", p.foreign_devices},
                        {"cross_device", !p.foreign_devices.empty()}};
    j["own_device"] = p.own_device ? nlohmann::json(*p.own_device) : nlohmann::json(nullptr);
    procs.push_back(j);
    if (!p.foreign_devices.empty()) flagged.push_back(p.label);
  }
  nlohmann::json devs = nlohmann::json::array();
  for (const auto& d : v.devices)
    devs.push_back({{"device", d.device},
                    {"label", d.label},
                    {"allocated_bytes.all.peak", d.peak_allocated_sum},
                    {"reserved_bytes.all.peak", d.peak_reserved_sum},
                    {"processes", d.processes}});
  nlohmann::json cells = nlohmann::json::array();
  auto or_null = [](const std::optional<i64>& x) { return x ? nlohmann::json(*x) : nlohmann::json(nullptr); };
  for (const auto& c : v.cells) {
    nlohmann::json cj = {{"process", c.process},
                         {"device", c.device},
                         {"allocated_bytes.all.peak", c.peak_allocated},
                         {"reserved_bytes.all.peak", c.peak_reserved},
                         {"reserved_bytes.all.current", c.end_reserved},
                         {"context_only", c.context_only}};
    if (c.ledger_end)
      cj["ledger_end"] = {{"reserved_bytes", c.ledger_end->reserved},
                          {"outside_bytes", or_null(c.ledger_end->outside)},
                          {"context_bytes", or_null(c.ledger_end->context)},
                          {"rest_bytes", or_null(c.ledger_end->rest)},
                          {"used_bytes", or_null(c.ledger_end->used)}};
    cells.push_back(cj);
  }
  return {{"processes", procs},      {"devices", devs},  {"cells", cells},
          {"cross_device", flagged}, {"notes", v.notes}, {"imbalance", imbalance_json(v)}};
}

nlohmann::json imbalance_json(const ProcessDeviceView& v) {
  if (!v.imbalance) return nullptr;
  return {{"ratio", *v.imbalance},
          {"most_loaded", v.most_loaded},
          {"least_loaded", v.least_loaded},
          {"others_equal", v.others_equal}};
}

nlohmann::json process_device_timelines_json(const std::vector<TraceModel>& models, const ProcessDeviceView& view,
                                             std::size_t max_points) {
  constexpr int kAllocated = 0, kReserved = 2;  // kSeriesNames
  i64 t0 = INT64_MAX;
  for (const auto& m : models)
    for (const auto& d : m.devices)
      if (!d.timeline.empty()) t0 = std::min(t0, d.timeline.front().t_begin_ns);
  if (t0 == INT64_MAX) t0 = 0;
  // Each cell's timeline, found through the process's device map again (cells hold keys).
  struct Band {
    std::size_t process;
    const DeviceModel* dev;
  };
  std::map<std::int32_t, std::vector<Band>> by_device;
  for (std::size_t i = 0; i < models.size(); ++i) {
    for (const auto& c : view.cells) {
      if (c.process != i) continue;
      for (const auto& d : models[i].devices)
        if (d.device == c.ordinal) by_device[c.device].push_back({i, &d});
    }
  }
  nlohmann::json out = nlohmann::json::array();
  for (const auto& load : view.devices) {
    auto& bands = by_device[load.device];
    std::vector<i64> grid;
    for (const auto& b : bands)
      for (const auto& tb : b.dev->timeline) {
        grid.push_back(tb.t_begin_ns);
        grid.push_back(tb.t_end_ns);
      }
    std::sort(grid.begin(), grid.end());
    grid.erase(std::unique(grid.begin(), grid.end()), grid.end());
    if (grid.size() > max_points && max_points >= 2) {
      std::vector<i64> g;
      for (std::size_t k = 0; k < max_points; ++k) g.push_back(grid[k * (grid.size() - 1) / (max_points - 1)]);
      g.erase(std::unique(g.begin(), g.end()), g.end());
      grid = std::move(g);
    }
    // Each process's first and last moment stay grid points whatever the downsampling: otherwise
    // one interval can span a process's end and the idle stretch after it, and its maximum would
    // hold the process's memory long after the process had released it.
    for (const auto& b : bands)
      if (!b.dev->timeline.empty()) {
        grid.push_back(b.dev->timeline.front().t_begin_ns);
        grid.push_back(b.dev->timeline.back().t_end_ns);
      }
    std::sort(grid.begin(), grid.end());
    grid.erase(std::unique(grid.begin(), grid.end()), grid.end());
    nlohmann::json jb = nlohmann::json::array();
    for (const auto& b : bands) {
      const auto& tl = b.dev->timeline;
      std::vector<i64> series[2];
      const int which[2] = {kReserved, kAllocated};
      for (int s = 0; s < 2; ++s) {
        const int k = which[s];
        std::size_t j = 0;
        i64 last = 0;
        for (std::size_t gi = 0; gi < grid.size(); ++gi) {
          const i64 lo = gi ? grid[gi - 1] : grid[0], hi = grid[gi];
          // The interval is (lo, hi] (the first one [lo, lo]): a bucket that ends at lo belongs
          // to the interval before, and its last value holds on into this one.
          while (j < tl.size() && (gi ? tl[j].t_end_ns <= lo : tl[j].t_end_ns < lo)) last = tl[j++].last[k];
          // A bucket that begins at hi belongs to the next interval (it holds what happened
          // after hi too), as the process's start does: the interval before it is idle.
          std::optional<i64> v;
          for (std::size_t q = j; q < tl.size() && (gi ? tl[q].t_begin_ns < hi : tl[q].t_begin_ns <= hi); ++q)
            v = std::max(v.value_or(INT64_MIN), tl[q].max[k]);
          bool before = tl.empty() || (gi ? hi <= tl.front().t_begin_ns : hi < tl.front().t_begin_ns);
          // The process had ended (its trace's last moment is at or before the interval): its
          // memory was released.
          bool after = !tl.empty() && (gi ? lo >= tl.back().t_end_ns : lo > tl.back().t_end_ns);
          series[s].push_back(v ? *v : (before || after) ? 0 : last);
        }
      }
      jb.push_back({{"process", b.process},
                    {"label", view.processes[b.process].label},
                    {"reserved", series[0]},
                    {"allocated", series[1]}});
    }
    std::vector<double> t;
    for (i64 g : grid) t.push_back(static_cast<double>(g - t0) / 1e6);
    out.push_back({{"device", load.device}, {"label", load.label}, {"t", t}, {"bands", jb}});
  }
  return out;
}

}  // namespace vramtrace
