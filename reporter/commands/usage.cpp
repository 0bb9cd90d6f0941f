#include "commands/usage.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace vramtrace::cli {

std::string command_list(const CLI::App& app) {
  std::size_t width = 0;
  const std::vector<const CLI::App*> subs = app.get_subcommands([](const CLI::App*) { return true; });
  for (const CLI::App* s : subs) width = std::max(width, s->get_name().size());
  std::string out = "usage: vramtrace COMMAND [OPTIONS] (vramtrace COMMAND --help for a command's options)\n\ncommands:\n";
  for (const CLI::App* s : subs) out += fmt::format("  {:<{}}  {}\n", s->get_name(), width, s->get_description());
  return out;
}

int check_command_word(const CLI::App& app, int argc, char** argv, std::FILE* err) {
  if (argc < 2) {
    fmt::print(err, "vramtrace: give a command\n{}", command_list(app));
    return 2;
  }
  const std::string word = argv[1];
  if (!word.empty() && word.front() == '-') return -1;  // --help, --version, or an option CLI11 refuses
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

}  // namespace vramtrace::cli
