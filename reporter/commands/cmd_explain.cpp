// `vramtrace explain MESSAGE | --file F [--json]`: reads a pasted out-of-memory message; with
// neither, from standard input when that is not a terminal (`cat log | vramtrace explain`).
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <sstream>

#include "analyses/oom/explain.h"
#include "commands/commands.h"
#include "commands/log.h"

namespace vramtrace::cli {

namespace {

/// The message in the file named by --file (not "-"); nullopt after saying why there is none.
std::optional<std::string> read_message_file(const std::string& file) {
  // A directory opens as a stream on Linux and reads as nothing: say what it is, not that the
  // message is missing.
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec)) {
    logger().error("vramtrace explain: --file {} is a directory; give the file that holds the message", file);
    return std::nullopt;
  }
  errno = 0;
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    const int err = errno;
    logger().error("vramtrace explain: cannot open {}: {}", file, err != 0 ? std::strerror(err) : "cannot be opened");
    return std::nullopt;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) {
    logger().error("vramtrace explain: cannot read {}", file);
    return std::nullopt;
  }
  if (ss.str().empty()) {
    logger().error("vramtrace explain: --file {} is empty", file);
    return std::nullopt;
  }
  return ss.str();
}

}  // namespace

void register_explain(CLI::App& app) {
  auto* cmd = app.add_subcommand("explain",
                                 "Explain pasted out-of-memory messages (PyTorch on CUDA, ROCm and MPS, TensorFlow, "
                                 "XLA/JAX, CuPy, cuBLAS/cuDNN/NCCL "
                                 "statuses), each on its own");
  struct Opts {
    std::vector<std::string> words;
    std::string file;
    bool json = false;
  };
  auto opts = std::make_shared<Opts>();
  cmd->add_option("message", opts->words,
                  "The message text (quote it), or - for standard input; or use --file; or pipe it in (standard input "
                  "is read when it is not a terminal)");
  cmd->add_option("--file,-f", opts->file, "Read the message from a file ('-' for standard input)");
  cmd->add_flag("--json", opts->json, "Print JSON: diagnosis and every figure read, in bytes");
  cmd->callback([opts]() {
    std::string text;
    if (!opts->file.empty()) {
      if (opts->file == "-") {
        text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
      } else {
        auto read = read_message_file(opts->file);
        if (!read) {
          set_exit_code(2);
          return;
        }
        text = std::move(*read);
      }
    } else if (!opts->words.empty() && !(opts->words.size() == 1 && opts->words[0] == "-")) {
      for (std::size_t i = 0; i < opts->words.size(); ++i) text += (i ? " " : "") + opts->words[i];
    } else if (::isatty(STDIN_FILENO) == 0 || !opts->words.empty()) {
      // A lone "-", as other tools take it, or piped or redirected: the message is what comes in.
      // Without "-", a terminal would wait for typing that nobody announced, so there the usage
      // error below stays.
      text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
      if (text.empty()) {
        logger().error(
            "vramtrace explain: standard input is empty; give the message as an argument, with --file, or "
            "on standard input");
        set_exit_code(2);
        return;
      }
    }
    if (text.empty()) {
      logger().error("vramtrace explain: give the message as an argument, with --file, or on standard input");
      set_exit_code(2);
      return;
    }
    const std::vector<Explanation> all = explain_messages(text);
    if (opts->json) {
      std::fputs(explain_json(all).dump(2).c_str(), stdout);
      std::fputc('\n', stdout);
    } else {
      std::fputs(render_explain_text(all).c_str(), stdout);
    }
    // An unreadable message is unusable input.
    set_exit_code(all.size() == 1 && all.front().message.format == OomMessageFormat::unknown ? 2 : 0);
  });
}

}  // namespace vramtrace::cli
