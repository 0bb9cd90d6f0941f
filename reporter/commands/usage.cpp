#include "commands/usage.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

namespace vramtrace::cli {

std::string command_list(const CLI::App& app) {
  std::size_t width = 0;
  const std::vector<const CLI::App*> subs = app.get_subcommands([](const CLI::App*) { return true; });
  for (const CLI::App* s : subs) width = std::max(width, s->get_name().size());
  std::string out =
      "usage: vramtrace COMMAND [OPTIONS] (vramtrace COMMAND --help for a command's options)\n\ncommands:\n";
  for (const CLI::App* s : subs) out += fmt::format("  {:<{}}  {}\n", s->get_name(), width, s->get_description());
  return out;
}

int check_command_word(const CLI::App& app, int argc, char** argv, std::FILE* err) {
  if (argc < 2) {
    fmt::print(err, "vramtrace: give a command\n{}", command_list(app));
    return 2;
  }
  const std::string word = argv[1];
  if (word == "-h" || word == "--help" || word == "--help-all" || word == "--version") return -1;
  if (!word.empty() && word.front() == '-') {
    fmt::print(err, "vramtrace: unknown option \"{}\": options come after the command\n{}", word, command_list(app));
    return 2;
  }
  for (const CLI::App* s : app.get_subcommands([](const CLI::App*) { return true; }))
    if (s->check_name(word)) return -1;
  fmt::print(err, "vramtrace: unknown command \"{}\"\n{}", word, command_list(app));
  return 2;
}

int report_parse_error(CLI::App& app, const CLI::ParseError& e, std::FILE* err) {
  if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);  // --help, --version
  // The innermost command being parsed: CLI11 lists a subcommand as parsed before it reads the
  // subcommand's own arguments, so it is known for an error in them.
  const CLI::App* at = &app;
  for (std::vector<CLI::App*> subs = app.get_subcommands(); !subs.empty(); subs = subs.back()->get_subcommands())
    at = subs.back();
  const std::string who = at == &app ? "vramtrace" : "vramtrace " + at->get_name();
  std::string what = e.what();
  while (!what.empty() && (what.back() == '\n' || what.back() == ' ')) what.pop_back();
  fmt::print(err, "{}: {}\nRun '{} --help' for the options.\n", who, what, who);
  return 2;
}

bool parse_finite(const std::string& text, double& out) {
  if (text.empty()) return false;
  double v = 0;
  const char* end = text.data() + text.size();
  const auto [p, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || p != end || !std::isfinite(v)) return false;
  out = v;
  return true;
}

CLI::Validator number_check(double min, bool min_open, double max, bool max_open, std::string range_words,
                            std::string name) {
  return CLI::Validator(
      [=](std::string& v) -> std::string {
        double x = 0;
        if (!parse_finite(v, x)) return "'" + v + "' is not a number (a finite decimal, e.g. 1.5)";
        const bool low = min_open ? !(x > min) : !(x >= min);
        const bool high = max_open ? !(x < max) : !(x <= max);
        if (low || high) return "'" + v + "' is out of range: " + range_words;
        return {};
      },
      name, name);
}

std::string existing_output_error(const std::string& path, bool force) {
  if (path.empty() || path == "-") return {};
  std::error_code ec;
  const auto st = std::filesystem::symlink_status(path, ec);
  if (ec || st.type() == std::filesystem::file_type::not_found) return {};
  if (std::filesystem::is_directory(path, ec)) return "output file " + path + " is a directory; give a file name";
  // Only a regular file (or a link to one) holds an earlier result: /dev/null, /dev/stdout, a
  // FIFO or a terminal is written to, not replaced.
  const auto target = std::filesystem::status(path, ec);
  if (!ec && target.type() != std::filesystem::file_type::regular) return {};
  if (force) return {};
  return "output file " + path + " already exists (--force overwrites it)";
}

}  // namespace vramtrace::cli
