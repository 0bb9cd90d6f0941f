// `vramtrace replay TRACE [--capacity SIZE] [--conf SETTINGS]... [--json]` (docs/replay.md).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "analyses/oom/oom_report.h"
#include "analyses/oom/oom_whatif.h"
#include "analyses/oom/verdict.h"
#include "analyses/printable.h"
#include "analyses/replay.h"
#include "commands/commands.h"
#include "commands/log.h"
#include "commands/progress.h"
#include "model/load_models.h"
#include "model/trace_model.h"

namespace vramtrace::cli {
namespace {

struct ReplayArgs {
  std::string trace;
  std::string full;
  std::string capacity;
  std::vector<std::string> confs;
  std::string level = "auto";
  bool json = false;
};

/// Writes to standard output as every command does, through stdio: a failed write sets its error
/// flag, which main reports once at the end (exit 2). fmt::print would throw instead.
template <typename... T>
void out(fmt::format_string<T...> format, T&&... args) {
  const std::string text = fmt::format(format, std::forward<T>(args)...);
  std::fwrite(text.data(), 1, text.size(), stdout);
}

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

/// Why a result's figures may not be what the setting would do, or "": PyTorch's garbage
/// collection of cached blocks runs only under its memory fraction (Note in
/// docs/pytorch-allocator.md, `garbage_collection_threshold`), and --capacity is the device's
/// size, not a cap. (With `limit`, which PyTorch does not see, the verdict is withheld:
/// analyses/oom/verdict_support.h.)
std::string setting_note(const AllocatorSettings& s) {
  if (s.garbage_collection_threshold <= 0.0 || s.per_process_memory_fraction < 1.0 || s.limit_bytes != 0) return {};
  return "garbage_collection_threshold acts only under PyTorch's memory fraction (per_process_memory_fraction "
         "below 1 in the same --conf): without one PyTorch never collects cached blocks, so these figures are "
         "those of the same settings without it";
}

/// One column of the table: a setting's replay on one device, and its judgement.
struct Column {
  const WhatIf* row = nullptr;
  const ReplayResult* result = nullptr;
  const Judgement* judgement = nullptr;
};

std::vector<Column> columns_of(const WhatIfRun& run) {
  std::vector<Column> out;
  for (const WhatIf* w : run.shown_rows())
    for (std::size_t d = 0; d < w->results.size(); ++d) out.push_back({w, &w->results[d], &w->per_device[d]});
  return out;
}

std::string label_of(const Column& c) { return c.row->settings.empty() ? "(defaults)" : c.row->settings; }

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

/// Rows of the report: label and one cell per column.
std::vector<std::pair<std::string, std::vector<std::string>>> rows(const std::vector<Column>& columns) {
  std::vector<std::pair<std::string, std::vector<std::string>>> out;
  auto add = [&](std::string label, auto cell) {
    std::vector<std::string> cells;
    for (const Column& c : columns) cells.push_back(cell(*c.result));
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
  std::vector<std::string> verdicts;
  for (const Column& c : columns) verdicts.push_back(judgement_text(*c.judgement));
  out.emplace_back("verdict", std::move(verdicts));
  return out;
}

/// The head of the text report: the trace, what the replays cover, the capacity and the bound,
/// and why there is no verdict, if so.
void print_head(const WhatIfRun& run) {
  const TraceHeader& h = run.header;
  out("trace     {} ({}{}{})\n", printable(h.path), h.format,
      h.workload.empty() ? "" : ", workload " + printable(h.workload),
      fmt::format(", recorded with settings: {}", h.settings.empty() ? "(defaults)" : printable(h.settings)));
  out("events    {} ({} allocation requests){}\n", run.events, run.alloc_requests,
      run.incomplete ? " -- the trace ends abruptly (cut, or the process did not finish): replayed up to its last event"
                     : "");
  if (run.lost_events) out("{}\n", lost_events_warning(run.lost_events));
  if (run.covers == WhatIfCovers::full_trace)
    out("covers    {}, a complete trace of the same program (--full), replayed on this trace's capacity\n",
        printable(run.full_path));
  else if (run.covers == WhatIfCovers::to_failure)
    out("covers    the run up to its failed request (the trace ends at its OOM): the rest of the run was never "
        "recorded\n");
  if (run.capacity.bytes)
    out("capacity  {} ({})\n", format_size(run.capacity.bytes), run.capacity.source);
  else
    out("capacity  {} (a stand-in: the trace records no device total and no cap; give --capacity)\n",
        format_size(run.replayed_capacity_bytes));
  out("bound     {}\n", whatif_bound_source());
  const std::string withheld = render_withheld_text(run);
  if (!withheld.empty()) out("{}", withheld);
  for (const auto& w : run.warnings) out("WARNING: {}\n", printable(w));
}

/// The side-by-side table of several columns: each as wide as its content, at most kMaxColumn;
/// the details of a longer cell and the note of a setting become numbered notes below it.
void print_columns(const std::vector<Column>& columns,
                   std::vector<std::pair<std::string, std::vector<std::string>>> table, bool multi_device) {
  std::vector<std::string> notes;
  auto note = [&](std::string text) {
    notes.push_back(std::move(text));
    return fmt::format("[{}]", notes.size());
  };
  std::vector<std::vector<std::string>> head;
  for (const Column& c : columns) {
    const std::string label = multi_device ? fmt::format("{} [device {}]", label_of(c), c.result->device) : label_of(c);
    std::vector<std::string> lines = wrap(label, kMaxColumn);
    std::string why = setting_note(c.result->config.settings);
    if (c.judgement->withheld && c.judgement->verdict == WhatIfVerdict::withheld && !c.judgement->partial)
      why = c.judgement->withheld->why + (c.judgement->withheld->how.empty() ? "" : "; " + c.judgement->withheld->how);
    if (!why.empty()) {
      const std::string mark = note(label_of(c) + ": " + why);
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
      cell = cell.substr(0, paren) + " " + note(fmt::format("{}, {}: {}", label, label_of(columns[i]), detail));
    }
  }
  std::vector<std::size_t> width(columns.size());
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
  for (std::size_t i = 0; i < notes.size(); ++i) out("[{}] {}\n", i + 1, printable(notes[i]));
}

void print_text(const WhatIfRun& run) {
  print_head(run);
  const std::vector<Column> columns = columns_of(run);
  bool multi_device = false;
  for (const Column& c : columns) multi_device |= c.result->device != 0;
  for (const WhatIf& w : run.rows)
    if (w.shown && !w.error.empty()) out("replay failed for {}: {}\n", printable(w.settings), printable(w.error));
  if (columns.size() == 1) {
    const Column& c = columns[0];
    out("settings  {}\n", printable(label_of(c)));
    if (const std::string why = setting_note(c.result->config.settings); !why.empty()) out("note      {}\n", why);
    if (c.judgement->verdict == WhatIfVerdict::withheld && c.judgement->withheld && !c.judgement->partial &&
        !run.withheld)
      out("no verdict {}; to get one: {}\n", c.judgement->withheld->why, c.judgement->withheld->how);
    out("\n");
    for (const auto& [label, cells] : rows(columns)) out("{:<32} {}\n", label, cells[0]);
  } else if (!columns.empty()) {
    print_columns(columns, rows(columns), multi_device);
  }
  for (const auto& note : run.replay_notes) out("\nNote: {}\n", note);
  for (const auto& n : run.notes) out("\nNote: {}\n", n);
  for (const Column& c : columns) {
    const ReplayResult& r = *c.result;
    if (!r.first_oom) continue;
    out("\nOut of memory with {}{}: the program would have stopped at allocation #{} ({} requested). The "
        "replay skipped each failed allocation and its free and went on; {} allocation(s) failed in all.\n",
        printable(label_of(c)), multi_device ? fmt::format(" on device {}", r.device) : "", r.first_oom->alloc_index,
        format_size(r.first_oom->requested_bytes), r.failed_allocs);
  }
}

void print_json(const WhatIfRun& run, const std::string& trace) {
  nlohmann::ordered_json j;
  j["trace"] = trace;
  if (!run.full_path.empty()) j["full_trace"] = run.full_path;
  j["events"] = run.events;
  j["lost_events"] = run.lost_events;
  j["capacity_source"] = run.capacity.source;
  const bool judged = !run.withheld;
  j["bound_bytes"] =
      judged ? nlohmann::ordered_json(whatif_error_bound(run.capacity.bytes)) : nlohmann::ordered_json(nullptr);
  j["covers"] = whatif_covers_name(run.covers);
  auto withheld = [](const std::optional<Withheld>& w) {
    return w ? nlohmann::ordered_json{{"why", w->why}, {"how", w->how}} : nlohmann::ordered_json(nullptr);
  };
  j["withheld"] = withheld(run.withheld);
  j["partial"] = withheld(run.partial);
  j["warnings"] = run.warnings;
  j["results"] = nlohmann::ordered_json::array();
  const std::vector<Column> columns = columns_of(run);
  bool multi_device = false;
  for (const Column& c : columns) multi_device |= c.result->device != 0;
  for (const Column& c : columns) {
    const ReplayResult& r = *c.result;
    nlohmann::ordered_json o;
    o["settings"] = c.row->settings;
    if (multi_device) o["device"] = r.device;
    o["capacity_bytes"] = r.config.capacity_bytes;
    o["notes"] = nlohmann::ordered_json::array();
    if (const std::string why = setting_note(r.config.settings); !why.empty()) o["notes"].push_back(why);
    put_judgement(o, *c.judgement);
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
  std::optional<std::uint64_t> capacity;
  if (!args.capacity.empty()) {
    std::uint64_t bytes = 0;
    std::string err;
    if (!parse_size(args.capacity, bytes, err)) {
      logger().error("vramtrace replay: --capacity {}: {}", args.capacity, err);
      return 2;
    }
    if (bytes == 0) {
      logger().error("vramtrace replay: --capacity must be more than 0 bytes");
      return 2;
    }
    capacity = bytes;
  }
  std::vector<std::string> confs = args.confs.empty() ? std::vector<std::string>{""} : args.confs;
  for (const auto& text : confs) {
    AllocatorSettings s;
    std::string err;
    if (!AllocatorSettings::parse(text, s, err)) {
      logger().error("vramtrace replay: --conf \"{}\": {}", text, err);
      return 2;
    }
  }
  try {
    // The model of the trace gives what every command judges from: its OOMs, its level, its cap
    // and its coverage (analyses/oom/verdict_support.h); then the replays run in one more pass.
    // The level the other commands read of the same argument (a shim trace's tensor-level
    // companion by default), and one trace: a directory that holds one process's trace is one.
    const std::vector<std::string> paths = traces_to_read({args.trace}, args.level, "replay");
    if (paths.size() != 1) {
      logger().error("vramtrace replay: {} names {} traces; give one (replay judges one process)", args.trace,
                     paths.size());
      return 2;
    }
    std::vector<TraceModel> models = load_models(paths);
    WhatIfOptions wo;
    wo.settings = confs;
    wo.settings_replace_own = true;
    wo.capacity_bytes = capacity;
    wo.full_path = args.full;
    Progress progress;
    wo.replay.progress = [&](std::uint64_t n, std::uint64_t b, std::uint64_t t) { progress.update(n, b, t); };
    const WhatIfRun run = run_whatifs(paths.front(), models.front(), wo);
    progress.done();
    if (args.json)
      print_json(run, args.trace);
    else
      print_text(run);
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
         "PyTorch allocator history (JSON lines, .gz/.zst), snapshot pickle (_dump_snapshot), vramtrace trace, or a "
         "directory of one process's trace (read at --level, as the other commands read it)")
      ->required();
  sub->add_option("--capacity", args->capacity,
                  "simulated GPU memory: a size (14.58GiB, 16GB, 512MiB, 1048576) or a card name (T4, A100-40GB); "
                  "default, as oom's: the smallest of what the allocator reached at the first OOM (reserved + free "
                  "then), the trace's cap and its device total")
      ->check(size_check());
  sub->add_option("--full", args->full,
                  "a complete trace of the same program (e.g. run without the cap), replayed instead of TRACE on "
                  "TRACE's capacity: for a TRACE that ends at its OOM");
  sub->add_option("--conf", args->confs,
                  "allocator settings in PYTORCH_CUDA_ALLOC_CONF syntax; repeat for a side-by-side comparison")
      ->allow_extra_args(false);
  add_level_option(sub, args->level);
  sub->add_flag("--json", args->json, "print JSON (format in docs/replay.md)");
  sub->callback([args] { set_exit_code(run_replay(*args)); });
}

}  // namespace vramtrace::cli
