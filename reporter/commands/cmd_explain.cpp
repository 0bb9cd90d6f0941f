// `vramtrace explain MESSAGE | --file F [--json]`: reads a pasted out-of-memory message.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include "analyses/explain.h"
#include "commands/commands.h"
#include "commands/log.h"

namespace vramtrace::cli {

void register_explain(CLI::App& app) {
  auto* cmd = app.add_subcommand("explain", "Explain a pasted out-of-memory message (PyTorch, TensorFlow, XLA/JAX)");
  struct Opts {
    std::vector<std::string> words;
    std::string file;
    bool json = false;
  };
  auto opts = std::make_shared<Opts>();
  cmd->add_option("message", opts->words, "The message text (quote it); or use --file");
  cmd->add_option("--file,-f", opts->file, "Read the message from a file ('-' for standard input)");
  cmd->add_flag("--json", opts->json, "Print JSON: diagnosis and every figure read, in bytes");
  cmd->callback([opts]() {
    std::string text;
    if (!opts->file.empty()) {
      if (opts->file == "-") {
        text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
      } else {
        std::ifstream in(opts->file, std::ios::binary);
        if (!in) {
          logger().error("vramtrace explain: cannot open {}", opts->file);
          set_exit_code(2);
          return;
        }
        std::ostringstream ss;
        ss << in.rdbuf();
        text = ss.str();
      }
    } else {
      for (std::size_t i = 0; i < opts->words.size(); ++i) text += (i ? " " : "") + opts->words[i];
    }
    if (text.empty()) {
      logger().error("vramtrace explain: give the message as an argument or with --file");
      set_exit_code(2);
      return;
    }
    Explanation e = explain_message(text);
    if (opts->json) {
      std::fputs(explain_json(e).dump(2).c_str(), stdout);
      std::fputc('\n', stdout);
    } else {
      std::fputs(render_explain_text(e).c_str(), stdout);
    }
    // An unreadable message is unusable input.
    set_exit_code(e.message.format == OomMessageFormat::unknown ? 2 : 0);
  });
}

}  // namespace vramtrace::cli
