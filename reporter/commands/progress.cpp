#include "commands/progress.h"

#include <unistd.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <utility>

#include <fmt/format.h>

#include "readers/read_progress.h"
#include "vramtrace/units.h"

namespace vramtrace::cli {
namespace {

std::atomic<bool> g_quiet{false};

// The line of the ReadProgressScope alive now (one at a time), and when it began.
struct ActiveRead {
  std::unique_ptr<ProgressLine> line;
  std::chrono::steady_clock::time_point start;
};
std::unique_ptr<ActiveRead> g_active;

// Several traces may be read at once (model/parallel_map.h): one reader at a time updates the
// line, the others skip their tick.
std::mutex g_line_mu;
void on_read(const TraceReader& reader) {
  std::unique_lock<std::mutex> lock(g_line_mu, std::try_to_lock);
  if (!lock.owns_lock() || g_active == nullptr) return;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - g_active->start).count();
  g_active->line->update(elapsed, reader.bytes_read(), reader.bytes_total());
}

}  // namespace

void add_quiet_flags(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands({}))
    sub->add_flag_callback(
        "-q,--quiet", [] { g_quiet.store(true); }, "No progress line on standard error");
}

bool quiet() { return g_quiet.load(); }

ProgressLine::ProgressLine(std::string label, std::FILE* out, bool terminal, bool silenced, double delay_s,
                           double every_s)
    : label_(std::move(label)), out_(out), enabled_(terminal && !silenced), delay_s_(delay_s), every_s_(every_s) {}

ProgressLine::~ProgressLine() { finish(); }

void ProgressLine::update(double elapsed_s, std::uint64_t done, std::uint64_t total) {
  if (!enabled_ || elapsed_s < delay_s_) return;
  if (shown_ && elapsed_s - last_s_ < every_s_) return;
  last_s_ = elapsed_s;
  std::string text = label_;
  if (total > 0 && done <= total)
    text += fmt::format(" {:3.0f}% ({} of {})", 100.0 * static_cast<double>(done) / static_cast<double>(total),
                        format_size(done), format_size(total));
  else
    text += fmt::format(" {}", format_size(done));
  fmt::print(out_, "\r{}\033[K", text);
  std::fflush(out_);
  shown_ = true;
}

void ProgressLine::finish() {
  if (!shown_) return;
  fmt::print(out_, "\r\033[K");
  std::fflush(out_);
  shown_ = false;
}

ReadProgressScope::ReadProgressScope(const std::string& command) {
  g_active = std::make_unique<ActiveRead>(
      ActiveRead{std::make_unique<ProgressLine>("vramtrace " + command + ": reading", stderr,
                                                ::isatty(STDERR_FILENO) == 1, quiet()),
                 std::chrono::steady_clock::now()});
  set_read_progress_hook(on_read);
}

ReadProgressScope::~ReadProgressScope() {
  set_read_progress_hook(nullptr);
  g_active.reset();
}

}  // namespace vramtrace::cli
