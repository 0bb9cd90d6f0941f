// `vramtrace replay TRACE [--capacity SIZE] [--conf SETTINGS]... [--json]` (docs/replay.md).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "analyses/oom/oom_whatif.h"
#include "analyses/printable.h"
#include "analyses/replay.h"
#include "analyses/oom/verdict.h"
#include "commands/commands.h"
#include "commands/log.h"
#include "commands/progress.h"
#include "model/trace_model.h"

namespace vramtrace::cli {
namespace {

struct ReplayArgs {
  std::string trace;
  std::string full;
  std::string capacity;
  std::vector<std::string> confs;
  bool json = false;
};

/// Writes to standard output as every command does, through stdio: a failed write sets its error
/// flag, which main reports once at the end (exit 2). fmt::print would throw instead.
template <typename... T>
void out(fmt::format_string<T...> format, T&&... args) {
  const std::string text = fmt::format(format, std::forward<T>(args)...);
  std::fwrite(text.data(), 1, text.size(), stdout);
}

/// Capacity when neither --capacity nor the trace gives one.
constexpr std::uint64_t kFallbackCapacity = 1024 * kGiB;

std::string settings_label(const ReplayConfig& c) { return c.settings.text.empty() ? "(defaults)" : c.settings.text; }

std::string bytes_cell(std::int64_t b) {
  return fmt::format("{} ({} B)", format_size(static_cast<std::uint64_t>(std::max<std::int64_t>(b, 0))), b);
}

std::string ratio(std::int64_t a, std::int64_t b) { return b > 0 ? fmt::format("{:.3f}", double(a) / double(b)) : "-"; }

std::string oom_cell(const ReplayResult& r) {
  if (!r.first_oom) return fmt::format("{}", r.stats.num_ooms);
  const FirstOom& o = *r.first_oom;
  return fmt::format("{} (first: alloc #{} of {}, with {} allocated, {} reserved)", r.stats.num_ooms, o.alloc_index,
                     format_size(o.requested_bytes), format_size(o.allocated_bytes), format_size(o.reserved_bytes));
}

/// What the replay ran on and how each result is judged (analyses/oom/verdict.h).
struct Verdicts {
  std::uint64_t capacity_bytes = 0;
  std::string capacity_source;
  bool known = false;  ///< a real capacity (given or recorded): without one there is no verdict
  std::uint64_t bound_bytes = 0;
  std::vector<Judgement> judged;  ///< per shown result, in order
  std::string covers = "whole_trace";
  std::string covers_text;  ///< one line for people, empty for a whole trace
  std::vector<std::string> warnings;
};

std::string verdict_cell(const Judgement& j, std::uint64_t ooms, std::uint64_t capacity) {
  // Spare memory under a fraction or a limit is spare below that cap, not below the device.
  const std::string spare =
      j.allowed_bytes < capacity
          ? fmt::format("{} spare of the {} allowed", format_size(static_cast<std::uint64_t>(j.margin_bytes)),
                        format_size(j.allowed_bytes))
          : fmt::format("{} spare", format_size(static_cast<std::uint64_t>(j.margin_bytes)));
  switch (j.verdict) {
    case WhatIfVerdict::fits:
      return fmt::format("fits ({} > {} bound)", spare, format_size(j.bound_bytes));
    case WhatIfVerdict::marginal:
      if (ooms == 0) return fmt::format("marginal ({} <= {} bound: verify)", spare, format_size(j.bound_bytes));
      return fmt::format("marginal (OOM here, none with {} more: verify)", format_size(j.bound_bytes));
    case WhatIfVerdict::does_not_fit:
      return fmt::format("does not fit (OOM also with {} more)", format_size(j.bound_bytes));
    case WhatIfVerdict::failed:
      break;
  }
  return "-";
}

/// Why a result's figures may not be what the setting would do, or "": PyTorch's garbage
/// collection of cached blocks runs only when a memory fraction or a limit caps the allocator
/// (Note in docs/pytorch-allocator.md, `garbage_collection_threshold`), and --capacity is the
/// device's size, not a cap.
std::string setting_note(const ReplayConfig& c) {
  const AllocatorSettings& s = c.settings;
  if (s.garbage_collection_threshold <= 0.0 || s.per_process_memory_fraction < 1.0 || s.limit_bytes != 0) return {};
  return "garbage_collection_threshold acts only under a memory limit (per_process_memory_fraction below 1, or "
         "limit:SIZE, in the same --conf): without one PyTorch never collects cached blocks, so these figures "
         "are those of the same settings without it";
}

/// Column width of the side-by-side table: a wider cell keeps its first words and moves its
/// details (the part in parentheses) to a note below the table; a wider settings name wraps.
constexpr std::size_t kMaxColumn = 32;  // the longest single setting, garbage_collection_threshold:0.6

/// `text` in lines of at most `width` characters, broken after a ',' or a ':' or at a space where
/// there is one, else cut.
std::vector<std::string> wrap(const std::string& text, std::size_t width) {
  std::vector<std::string> lines;
  std::string rest = text;
  while (rest.size() > width) {
    std::size_t cut = std::string::npos;
    for (std::size_t i = width; i > 0; --i) {
      if (rest[i - 1] == ',' || rest[i - 1] == ':' || rest[i] == ' ') {
        cut = i;
        break;
      }
    }
    if (cut == std::string::npos || cut == 0) cut = width;
    lines.push_back(rest.substr(0, cut));
    rest = rest.substr(cut);
    if (!rest.empty() && rest.front() == ' ') rest.erase(0, 1);
  }
  lines.push_back(rest);
  return lines;
}

/// Rows of the report: label and one cell per result.
std::vector<std::pair<std::string, std::vector<std::string>>> rows(const std::vector<ReplayResult>& results) {
  std::vector<std::pair<std::string, std::vector<std::string>>> out;
  auto add = [&](std::string label, auto cell) {
    std::vector<std::string> cells;
    for (const auto& r : results) cells.push_back(cell(r));
    out.emplace_back(std::move(label), std::move(cells));
  };
  add("capacity", [](const ReplayResult& r) { return format_size(r.config.capacity_bytes); });
  add("peak requested", [](const ReplayResult& r) { return bytes_cell(r.stats.requested_bytes[kStatAll].peak); });
  add("peak allocated", [](const ReplayResult& r) { return bytes_cell(r.stats.allocated_bytes[kStatAll].peak); });
  add("peak reserved", [](const ReplayResult& r) { return bytes_cell(r.stats.reserved_bytes[kStatAll].peak); });
  add("reserved / requested", [](const ReplayResult& r) {
    return ratio(r.stats.reserved_bytes[kStatAll].peak, r.stats.requested_bytes[kStatAll].peak);
  });
  add("segments (peak / device allocs)", [](const ReplayResult& r) {
    return fmt::format("{} / {}", r.stats.segment[kStatAll].peak, r.stats.num_device_alloc);
  });
  add("alloc retries", [](const ReplayResult& r) { return fmt::format("{}", r.stats.num_alloc_retries); });
  add("OOMs", oom_cell);
  add("peak inactive split",
      [](const ReplayResult& r) { return bytes_cell(r.stats.inactive_split_bytes[kStatAll].peak); });
  add("largest free block at peak",
      [](const ReplayResult& r) { return bytes_cell(static_cast<std::int64_t>(r.largest_free_at_peak)); });
  return out;
}

void print_text(const ReplayReport& rep, const Verdicts& v, bool multi_device) {
  const TraceHeader& h = rep.header;
  out("trace     {} ({}{}{})\n", printable(h.path), h.format,
      h.workload.empty() ? "" : ", workload " + printable(h.workload),
      fmt::format(", recorded with settings: {}", h.settings.empty() ? "(defaults)" : printable(h.settings)));
  out("events    {} ({} allocation requests){}\n", rep.events, rep.alloc_requests,
      rep.incomplete ? " -- the trace ends abruptly (cut, or the process did not finish): replayed up to its last event"
                     : "");
  if (rep.lost_events) out("{}\n", lost_events_warning(rep.lost_events));
  if (!v.covers_text.empty()) out("covers    {}\n", v.covers_text);
  out("capacity  {} ({})\n", format_size(v.capacity_bytes), v.capacity_source);
  if (v.known) out("bound     {} ({})\n", format_size(v.bound_bytes), whatif_bound_source());
  for (const auto& w : v.warnings) out("WARNING: {}\n", w);
  auto table = rows(rep.results);
  if (v.known) {
    std::vector<std::string> cells;
    for (std::size_t i = 0; i < rep.results.size(); ++i)
      cells.push_back(verdict_cell(v.judged[i], rep.results[i].failed_allocs, v.capacity_bytes));
    table.emplace_back("verdict", std::move(cells));
  }
  if (rep.results.size() == 1) {
    const ReplayResult& r = rep.results[0];
    out("settings  {}\n", settings_label(r.config));
    if (const std::string why = setting_note(r.config); !why.empty()) out("note      {}\n", why);
    out("\n");
    for (const auto& [label, cells] : table) out("{:<32} {}\n", label, cells[0]);
  } else {
    // Each column as wide as its content, at most kMaxColumn: the details of a longer cell and
    // the note of a setting become numbered notes below the table.
    std::vector<std::string> notes;
    auto note = [&](std::string text) {
      notes.push_back(std::move(text));
      return fmt::format("[{}]", notes.size());
    };
    std::vector<std::vector<std::string>> head;
    for (const auto& r : rep.results) {
      std::string label =
          multi_device ? fmt::format("{} [device {}]", settings_label(r.config), r.device) : settings_label(r.config);
      const std::string why = setting_note(r.config);
      std::vector<std::string> lines = wrap(label, kMaxColumn);
      if (!why.empty()) {
        const std::string mark = note(settings_label(r.config) + ": " + why);
        if (lines.back().size() + 1 + mark.size() <= kMaxColumn)
          lines.back() += " " + mark;
        else
          lines.push_back(mark);
      }
      head.push_back(std::move(lines));
    }
    for (auto& [label, cells] : table) {
      for (std::size_t i = 0; i < cells.size(); ++i) {
        std::string& cell = cells[i];
        const std::size_t paren = cell.find(" (");
        if (cell.size() <= kMaxColumn || paren == std::string::npos || cell.back() != ')') continue;
        const std::string detail = cell.substr(paren + 2, cell.size() - paren - 3);
        cell = cell.substr(0, paren) + " " +
               note(fmt::format("{}, {}: {}", label, settings_label(rep.results[i].config), detail));
      }
    }
    std::vector<std::size_t> width(rep.results.size());
    for (std::size_t i = 0; i < head.size(); ++i) {
      for (const auto& line : head[i]) width[i] = std::max(width[i], line.size());
      for (const auto& row : table) width[i] = std::max(width[i], std::min(row.second[i].size(), kMaxColumn));
    }
    auto print_row = [&](const std::string& label, const std::vector<std::vector<std::string>>& cells) {
      std::size_t lines = 1;
      for (const auto& c : cells) lines = std::max(lines, c.size());
      for (std::size_t l = 0; l < lines; ++l) {
        out("{:<32}", l == 0 ? label : std::string());
        for (std::size_t i = 0; i < cells.size(); ++i)
          out(" | {:<{}}", l < cells[i].size() ? cells[i][l] : std::string(), width[i]);
        out("\n");
      }
    };
    out("\n");
    print_row("settings", head);
    for (const auto& [label, cells] : table) {
      std::vector<std::vector<std::string>> wrapped;
      for (const auto& c : cells) wrapped.push_back(wrap(c, kMaxColumn));
      print_row(label, wrapped);
    }
    if (!notes.empty()) out("\n");
    for (std::size_t i = 0; i < notes.size(); ++i) out("[{}] {}\n", i + 1, notes[i]);
  }
  for (const auto& note : rep.notes) out("\nNote: {}\n", note);
  for (const auto& r : rep.results) {
    if (r.first_oom) {
      out("\nOut of memory with {}{}: the program would have stopped at allocation #{} ({} requested). The "
          "replay skipped each failed allocation and its free and went on; {} allocation(s) failed in all.\n",
          settings_label(r.config), multi_device ? fmt::format(" on device {}", r.device) : "",
          r.first_oom->alloc_index, format_size(r.first_oom->requested_bytes), r.failed_allocs);
    }
  }
}

void print_json(const ReplayReport& rep, const Verdicts& v, bool multi_device, const std::string& trace) {
  nlohmann::ordered_json j;
  j["trace"] = trace;
  if (rep.header.path != trace) j["full_trace"] = rep.header.path;
  j["events"] = rep.events;
  j["lost_events"] = rep.lost_events;
  j["capacity_source"] = v.capacity_source;
  j["bound_bytes"] = v.known ? nlohmann::ordered_json(v.bound_bytes) : nlohmann::ordered_json(nullptr);
  j["covers"] = v.covers;
  j["warnings"] = v.warnings;
  j["results"] = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < rep.results.size(); ++i) {
    const ReplayResult& r = rep.results[i];
    nlohmann::ordered_json o;
    o["settings"] = r.config.settings.text;
    if (multi_device) o["device"] = r.device;
    o["capacity_bytes"] = r.config.capacity_bytes;
    o["notes"] = nlohmann::ordered_json::array();
    if (const std::string why = setting_note(r.config); !why.empty()) o["notes"].push_back(why);
    if (v.known) {
      const Judgement& jd = v.judged[i];
      o["verdict"] = whatif_verdict_name(jd.verdict);
      o["margin_bytes"] = jd.margin_bytes;
      o["allowed_bytes"] = jd.allowed_bytes;
      o["shortfall_bytes"] =
          jd.shortfall_bytes ? nlohmann::ordered_json(*jd.shortfall_bytes) : nlohmann::ordered_json(nullptr);
    } else {
      o["verdict"] = nullptr;
    }
    nlohmann::ordered_json stats = nlohmann::ordered_json::object();
    for (const auto& [name, value] : flatten_stats(r.stats)) stats[name] = value;
    o["stats"] = std::move(stats);
    if (r.first_oom) {
      o["first_oom"] = {{"alloc_index", r.first_oom->alloc_index},
                        {"requested_bytes", r.first_oom->requested_bytes},
                        {"allocated_bytes", r.first_oom->allocated_bytes},
                        {"reserved_bytes", r.first_oom->reserved_bytes}};
    } else {
      o["first_oom"] = nullptr;
    }
    j["results"].push_back(std::move(o));
  }
  out("{}\n", j.dump(2));
}

/// Progress on stderr once the replay has run for a second: a rewritten line on a terminal,
/// otherwise a line every 5 seconds; none with --quiet.
class Progress {
 public:
  Progress() : start_(Clock::now()), last_(start_), tty_(::isatty(2) == 1) {}
  void update(std::uint64_t records, std::uint64_t bytes, std::uint64_t total) {
    if (quiet()) return;
    auto now = Clock::now();
    double elapsed = std::chrono::duration<double>(now - start_).count();
    if (elapsed < 1.0) return;
    double since = std::chrono::duration<double>(now - last_).count();
    if (shown_ && since < (tty_ ? 0.5 : 5.0)) return;
    last_ = now;
    shown_ = true;
    std::string pct = total > 0 ? fmt::format("{:3.0f}% ", 100.0 * double(bytes) / double(total)) : "";
    std::string line = fmt::format("replay: {}{:.1f} M events, {:.2f} M events/s", pct, double(records) / 1e6,
                                   double(records) / 1e6 / elapsed);
    if (tty_)
      fmt::print(stderr, "\r{}\033[K", line);
    else
      fmt::print(stderr, "{}\n", line);
    std::fflush(stderr);
  }
  void done() {
    if (shown_ && tty_) fmt::print(stderr, "\r\033[K");
  }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point start_, last_;
  bool tty_;
  bool shown_ = false;
};

int run_replay(const ReplayArgs& args) {
  std::uint64_t capacity = 0;
  if (!args.capacity.empty()) {
    std::string err;
    if (!parse_size(args.capacity, capacity, err)) {
      logger().error("vramtrace replay: --capacity {}: {}", args.capacity, err);
      return 2;
    }
    if (capacity == 0) {
      logger().error("vramtrace replay: --capacity must be more than 0 bytes");
      return 2;
    }
  }
  std::vector<ReplayConfig> configs;
  std::vector<std::string> confs = args.confs.empty() ? std::vector<std::string>{""} : args.confs;
  for (const auto& text : confs) {
    ReplayConfig c;
    std::string err;
    if (!AllocatorSettings::parse(text, c.settings, err)) {
      logger().error("vramtrace replay: --conf \"{}\": {}", text, err);
      return 2;
    }
    c.settings.text = text;
    configs.push_back(std::move(c));
  }
  try {
    auto reader = open_trace(args.trace);
    Verdicts v;
    bool capped_conf = false;  // a fraction or limit in --conf on a trace replayed on its own cap
    v.capacity_bytes = capacity;
    v.capacity_source = "--capacity";
    if (!capacity) {
      // The trace's device, capped where the trace records a cap (TraceHeader::cap_of).
      const TraceHeader& h = reader->header();
      v.capacity_bytes = h.device_total_bytes;
      v.capacity_source = "the trace's device total";
      const std::uint64_t total = h.device_total_bytes;
      if (const TraceHeader::Cap* c = h.cap_of(0); c && (!v.capacity_bytes || c->bytes < v.capacity_bytes)) {
        v.capacity_bytes = c->bytes;
        v.capacity_source = c->what;
        // A fraction or a limit of --conf caps the device, not the trace's own cap: replayed on the
        // cap it would be a cap of a cap, and its verdict a promise about another program.
        for (const auto& conf : configs)
          if (conf.settings.per_process_memory_fraction < 1.0 || conf.settings.limit_bytes != 0) {
            v.warnings.push_back(fmt::format(
                "the capacity is the trace's own cap ({}, {}), and \"{}\" sets a memory fraction or limit, which "
                "would apply to the device{}: no verdict is given. Give --capacity {} to replay on the device",
                format_size(c->bytes), c->what, conf.settings.text,
                total ? fmt::format(" ({})", format_size(total)) : std::string(),
                total ? std::to_string(total) : std::string("SIZE")));
            capped_conf = true;
            break;
          }
      }
    }
    v.known = v.capacity_bytes != 0 && !capped_conf;
    if (v.capacity_bytes == 0) {
      v.capacity_bytes = kFallbackCapacity;
      v.capacity_source = "the trace records no device total: 1 TiB, and no verdicts (give --capacity)";
      for (const auto& conf : configs)
        if (conf.settings.per_process_memory_fraction < 1.0) {
          v.warnings.push_back(fmt::format(
              "\"{}\" sets a memory fraction of a device the trace does not size: its figures are a fraction of "
              "the 1 TiB stand-in; give --capacity SIZE",
              conf.settings.text));
          break;
        }
    }
    v.bound_bytes = whatif_error_bound(v.capacity_bytes);
    for (auto& c : configs) c.capacity_bytes = v.capacity_bytes;
    std::unique_ptr<TraceReader> full;
    if (!args.full.empty()) {
      const TraceMatch match = match_traces(args.trace, args.full);
      full = open_trace(args.full);
      v.covers = "full_trace";
      v.covers_text = fmt::format(
          "{}, a complete trace of the same program (--full), replayed on this trace's capacity", args.full);
      if (!match.first_difference.empty())
        v.warnings.push_back(
            fmt::format("the full trace differs from {} at {} ({} of {} allocations before its "
                        "failure match): it may not be the same program or input",
                        args.trace, match.first_difference, match.matching, match.compared));
      if (match.full_ooms > 0 || match.full_incomplete)
        v.warnings.push_back("the full trace is not a complete run (it records an OOM, or it ends abruptly)");
    }
    FailureCounter counter(full ? *full : *reader);
    OomAsAllocReader wrapped(counter);
    Progress progress;
    ReplayOptions opts;
    opts.progress = [&](std::uint64_t n, std::uint64_t b, std::uint64_t t) { progress.update(n, b, t); };
    const std::vector<ReplayConfig> lanes = v.known ? with_bound_lanes(configs, v.bound_bytes) : configs;
    ReplayReport rep = replay(wrapped, lanes, opts);
    progress.done();
    if (!full && counter.ends_at_failure()) {
      v.covers = "to_failure";
      v.covers_text = fmt::format(
          "the run up to its failed request (the trace ends at its OOM, after allocation #{}): the rest of the run "
          "was never recorded; --full TRACE replays a complete trace of the same program",
          counter.allocs_before_last_oom());
    }
    // The table shows the settings on the capacity; the bound's lanes only judge them.
    std::vector<ReplayResult> shown;
    for (const auto& r : rep.results) {
      if (r.config.capacity_bytes != v.capacity_bytes) continue;
      if (v.known) {
        ReplayConfig wide = r.config;
        wide.capacity_bytes += v.bound_bytes;
        v.judged.push_back(judge_replay(r, result_of(rep.results, wide, r.device), v.capacity_bytes, v.bound_bytes));
      }
      shown.push_back(r);
    }
    rep.results = std::move(shown);
    // The trace's own settings must run out of memory where the trace did (as `oom` requires of
    // its replays): when they do not, the capacity is more than the program could use (the CUDA
    // context and memory outside the allocator are not in a device total, nor a cap the trace does
    // not record), and no verdict on it holds.
    // An OOM the header records (its message, PyTorch's statistics) counts too: a history that
    // ends before the failed request replays without it, and a verdict on it would be about a run
    // that did not die.
    std::uint64_t recorded = counter.ooms();
    for (const auto& o : reader->header().recorded_ooms) recorded += o.device == 0 && counter.ooms() == 0;
    if (recorded > 0 && capacity == 0 && v.known) {
      for (const ReplayResult& r : rep.results) {
        if (r.config.settings.text != reader->header().settings || r.failed_allocs != 0) continue;
        v.warnings.push_back(fmt::format(
            "the trace records {} OOM(s), but its own settings ({}) run without one on {} ({}): that is more than "
            "the program could use, or the history ends before the failed request, so no verdict is given. "
            "`vramtrace oom {}` replays on what the allocator could reach at the OOM (reserved + free then); or "
            "give the real limit with --capacity SIZE",
            recorded, settings_label(r.config), format_size(v.capacity_bytes), v.capacity_source, args.trace));
        v.known = false;
        v.judged.clear();
        break;
      }
    }
    bool multi_device = false;
    for (const auto& r : rep.results) multi_device |= r.device != 0;
    if (args.json)
      print_json(rep, v, multi_device, args.trace);
    else
      print_text(rep, v, multi_device);
    return 0;
  } catch (const TraceError& e) {
    logger().error("vramtrace replay: {}", e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    logger().error("vramtrace replay: {}: out of host memory", args.trace);
    return 2;
  }
}

}  // namespace

void register_replay(CLI::App& app) {
  auto args = std::make_shared<ReplayArgs>();
  CLI::App* sub = app.add_subcommand(
      "replay", "Replay a trace through the caching allocator on a simulated GPU: peaks, segments, OOMs per setting");
  sub->add_option(
         "TRACE", args->trace,
         "PyTorch allocator history (JSON lines, .gz/.zst), snapshot pickle (_dump_snapshot), or vramtrace trace")
      ->required();
  sub->add_option("--capacity", args->capacity,
                  "simulated GPU memory: a size (14.58GiB, 16GB, 512MiB, 1048576) or a card name (T4, A100-40GB); "
                  "default: the trace's device total, or its cap")
      ->check(size_check());
  sub->add_option("--full", args->full,
                  "a complete trace of the same program (e.g. run without the cap), replayed instead of TRACE on "
                  "TRACE's capacity: for a TRACE that ends at its OOM");
  sub->add_option("--conf", args->confs,
                  "allocator settings in PYTORCH_CUDA_ALLOC_CONF syntax; repeat for a side-by-side comparison")
      ->allow_extra_args(false);
  sub->add_flag("--json", args->json, "print JSON (format in docs/replay.md)");
  sub->callback([args] { set_exit_code(run_replay(*args)); });
}

}  // namespace vramtrace::cli
