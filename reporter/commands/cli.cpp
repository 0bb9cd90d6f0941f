// The process exit code shared by the subcommands, and the option checks they share (commands.h).
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "analyses/budgets.h"
#include "analyses/check_input.h"
#include "commands/commands.h"
#include "commands/log.h"
#include "readers/trace_paths.h"
#include "vramtrace/gpu_cards.h"
#include "vramtrace/types.h"
#include "vramtrace/units.h"

namespace vramtrace::cli {
namespace {
std::atomic<int> g_exit_code{0};

// An empty value is almost always an unset shell variable ("--limit $LIMIT").
constexpr const char* kEmptyValue = "an empty value (an unset shell variable?)";

// Below these a size written without a unit is surely a mistake (SizeUse).
constexpr std::uint64_t kSmallestBareCapacity = 64 * kMiB;
constexpr std::uint64_t kSmallestBarePeakBudget = kMiB;

// The refusal of a number written without a unit that is too small to be meant for `use`
// (SizeUse; docs/configuration.md "Sizes"), or "" when the value may stand.
std::string bare_size_refusal(const std::string& v, std::uint64_t bytes, SizeUse use) {
  const std::optional<SizeSpelling> spelled = size_spelling(v);
  if (!spelled || !spelled->unit.empty() || use == SizeUse::amount || bytes == 0) return {};
  const std::uint64_t floor = use == SizeUse::capacity ? kSmallestBareCapacity : kSmallestBarePeakBudget;
  if (bytes >= floor) return {};
  // "3090" is the card RTX3090 more often than 3090 bytes: name the card it ends.
  std::string cards;
  for (const GpuCard& c : kGpuCards) {
    const std::string key = gpu_card_key(c.name);
    if (spelled->number.size() >= 3 && key.size() > spelled->number.size() &&
        key.compare(key.size() - spelled->number.size(), std::string::npos, spelled->number) == 0)
      cards += std::string(cards.empty() ? "" : ", ") + c.name;
  }
  const std::string& n = spelled->number;
  // Only the units that turn the number into a size that could be meant ("67108863GiB" could not).
  const double number = std::strtod(n.c_str(), nullptr);
  std::string units;
  for (const auto& [unit, scale] : {std::pair{"GiB", double(kGiB)}, std::pair{"MiB", double(kMiB)}}) {
    const double sized = number * scale;
    if (sized >= static_cast<double>(floor) && sized <= 1024.0 * double(kGiB))  // no device holds a TiB
      units += n + unit + "; ";
  }
  units += n + "B for bytes";
  return "'" + v + "' is " + n + " bytes (a bare number is bytes), surely not meant as " +
         (use == SizeUse::capacity ? "a capacity under 64 MiB" : "a peak budget under 1 MiB") + ": " +
         (cards.empty()
              ? "give a unit (" + units + "), or a card by its name with the maker's letters (RTX3090, \"rtx 3090\")"
              : "for the card, give its name with the maker's letters (" + cards + "); for a size, a unit (" + units +
                    ")");
}

// "note: 16GB = 16 x 10^9 bytes = 14.90 GiB; ..." on stderr for a size in a decimal unit, once a
// value: "16GB" is read as decimal, as written, but is usually copied from a card's marketed size,
// which is neither 16 x 10^9 nor 16 x 2^30 bytes of usable memory.
void note_decimal_unit(const std::string& v, std::uint64_t bytes) {
  const std::optional<SizeSpelling> spelled = size_spelling(v);
  if (!spelled || spelled->decimal_exponent == 0) return;
  static std::mutex mutex;
  static std::set<std::string> noted;
  const std::lock_guard<std::mutex> lock(mutex);
  if (!noted.insert(v).second) return;
  logger().info(
      "vramtrace: note: {} = {} x 10^{} bytes = {}; for a card, give its name (T4, V100-16GB), whose figure is what "
      "PyTorch reports on it",
      v, spelled->number, spelled->decimal_exponent, format_bytes(static_cast<double>(bytes), ByteStyle::binary));
}
}  // namespace

void set_exit_code(int code) { g_exit_code.store(code); }
int exit_code() { return g_exit_code.load(); }

void refuse_empty_values(CLI::App& app, const std::vector<std::string>& empty_allowed) {
  for (CLI::Option* opt : app.get_options()) {
    if (opt->get_type_size() == 0) continue;  // a flag
    bool exempt = false;
    for (const std::string& entry : empty_allowed) {  // "SUBCOMMAND --option"
      const auto space = entry.find(' ');
      exempt = exempt || (entry.substr(0, space) == app.get_name() && opt->check_name(entry.substr(space + 1)));
    }
    if (exempt) continue;
    opt->check(CLI::Validator([](std::string& v) { return v.empty() ? std::string(kEmptyValue) : std::string(); }, "",
                              "NonEmpty"));
  }
  for (CLI::App* sub : app.get_subcommands({})) refuse_empty_values(*sub, empty_allowed);
}

CLI::Validator count_check() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        if (v.empty()) return kEmptyValue;
        if (v.size() > 18 || v.find_first_not_of("0123456789") != std::string::npos)
          return "'" + v + "' is not a count (a whole number >= 0)";
        return {};
      },
      "COUNT", "Count");
}

CLI::Validator size_check(SizeUse use) {
  return CLI::Validator(
      [use](std::string& v) -> std::string {
        if (v.empty()) return kEmptyValue;
        std::uint64_t bytes = 0;
        std::string error;
        // Budgets are limits rather than allocations: analyses/budgets.h's bounds.
        if (!parse_size(v, bytes, error, use == SizeUse::capacity ? SizeBounds{} : kBudgetSizeBounds)) return error;
        if (bytes == 0 && use == SizeUse::capacity) return "must be greater than 0";
        if (std::string refusal = bare_size_refusal(v, bytes, use); !refusal.empty()) return refusal;
        note_decimal_unit(v, bytes);
        return {};
      },
      "SIZE", "Size");
}

void add_level_option(CLI::App* cmd, std::string& level) {
  cmd->add_option("--level", level,
                  "For PyTorch runs of `vramtrace run`: auto (default: PyTorch's tensor level where a trace has "
                  "one beside it), tensors (or torch), or device (the shim's trace: PyTorch's segments and every "
                  "other allocation)")
      ->check(CLI::IsMember({"auto", "tensors", "torch", "device"}));
}

std::vector<std::string> traces_to_read(const std::vector<std::string>& args, const std::string& level,
                                        const char* command, bool include_summary_json) {
  TracePathOptions po;
  po.include_summary_json = include_summary_json;
  std::vector<std::string> notes;
  if (include_summary_json) {
    po.is_summary = is_summary_document;
    po.skipped = &notes;
  }
  std::vector<std::string> paths = expand_trace_paths(args, po);
  paths = choose_trace_level(paths, parse_trace_level(level).value_or(TraceLevel::automatic), notes);
  for (const std::string& n : notes) logger().info("vramtrace {}: {}", command, n);
  return paths;
}

}  // namespace vramtrace::cli
