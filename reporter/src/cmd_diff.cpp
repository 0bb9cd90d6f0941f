// `vramtrace diff BASE NEW [--json]`: two runs side by side and what explains the difference.
#include <cstdio>
#include <memory>

#include "budgets.h"
#include "commands.h"
#include "diff.h"

namespace vramtrace::cli {

void register_diff(CLI::App& app) {
  auto* cmd = app.add_subcommand("diff", "Compare two runs: peaks, allocation sizes, largest free block, and why");
  struct Opts {
    std::string base, now, margin;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("base", o->base, "The earlier run: a trace or a `vramtrace summary --json` document")->required();
  cmd->add_option("new", o->now, "The run to compare with it")->required();
  cmd->add_flag("--json", o->json, "Print JSON");
  cmd->add_option("--noise-margin", o->margin, "Changes below this count as none (default 2MiB)");
  cmd->callback([o]() {
    try {
      std::uint64_t margin = std::uint64_t{2} << 20;
      if (!o->margin.empty()) {
        auto m = parse_size(o->margin);
        if (!m) throw BudgetError("--noise-margin: \"" + o->margin + "\" is not a size");
        margin = *m;
      }
      auto base = load_check_input(o->base, 0);
      auto now = load_check_input(o->now, 0);
      auto d = diff_inputs(base, now, margin);
      if (o->json) {
        std::fputs((diff_json(d).dump(2) + "\n").c_str(), stdout);
      } else {
        std::fputs(render_diff_text(d).c_str(), stdout);
      }
      set_exit_code(0);
    } catch (const TraceError& e) {
      std::fprintf(stderr, "vramtrace diff: %s\n", e.what());
      set_exit_code(2);
    } catch (const BudgetError& e) {
      std::fprintf(stderr, "vramtrace diff: %s\n", e.what());
      set_exit_code(2);
    }
  });
}

}  // namespace vramtrace::cli
