// The process exit code shared by the subcommands, and the option checks they share (commands.h).
#include <atomic>
#include <string>

#include "analyses/check_input.h"
#include "commands/commands.h"
#include "commands/log.h"
#include "readers/trace_paths.h"
#include "vramtrace/gpu_cards.h"
#include "vramtrace/units.h"

namespace vramtrace::cli {
namespace {
std::atomic<int> g_exit_code{0};

// An empty value is almost always an unset shell variable ("--limit $LIMIT").
constexpr const char* kEmptyValue = "an empty value (an unset shell variable?)";
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

CLI::Validator size_check(bool allow_zero) {
  return CLI::Validator(
      [allow_zero](std::string& v) -> std::string {
        if (v.empty()) return kEmptyValue;
        std::uint64_t bytes = 0;
        std::string error;
        if (!parse_size(v, bytes, error)) {
          // One hint, with every card a size option takes; the other refusals (a unit, a
          // fraction of a byte, too large) say precisely what is wrong and keep their words.
          if (error.find("is not a size (examples:") != std::string::npos)
            return "'" + v +
                   "' is neither a size (such as 512MiB, 16GB, 14.58GiB, 1048576) nor a known card; known cards: " +
                   gpu_card_names();
          return error;
        }
        if (bytes == 0 && !allow_zero) return "must be greater than 0";
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
