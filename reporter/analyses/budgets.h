// Memory budgets for `vramtrace check`: what a run may use, read from the command line or from a
// budget file kept beside the tests, evaluated against a run's figures (figures.h: from its trace
// model, or from a `vramtrace summary --json` document) and the growth fit (growth.h). pytest-memray's limit_memory /
// --fail-on-increase are the model.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "analyses/figures.h"
#include "analyses/growth.h"
#include "vramtrace/size_rules.h"
#include "vramtrace/units.h"

namespace vramtrace {

/// Unusable budgets or measurements (bad size, unknown key, malformed summary). The message names
/// the file and line where there is one. Commands print it and exit with code 2.
class BudgetError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Parses a budget size with the size grammar of every option (vramtrace/units.h parse_size:
/// a number and an optional unit, binary KiB..TiB (and K, M, G, T) or SI KB..TB (as
/// pytest-memray's "24 MB"), or a GPU card name such as T4), with a budget's bounds: a plain
/// number of bytes may have a fraction, fractions round to the nearest byte, and anything up to
/// 2^63 bytes is allowed. Returns nullopt on anything else.
std::optional<std::uint64_t> parse_size(std::string_view text);

/// Those bounds (parse_size above): budgets are limits, not allocations, so any amount below
/// 2^63 bytes, to the nearest byte. The command line checks budget options with them too.
inline constexpr SizeBounds kBudgetSizeBounds{(std::uint64_t{1} << 63) - 1, /*round_to_nearest=*/true,
                                              /*fractional_bytes=*/true};

/// Every budget; unset ones are not checked. Names are the command-line options without "--".
struct Budgets {
  std::optional<std::uint64_t> max_peak_reserved;   ///< bytes; reserved_bytes.all.peak
  std::optional<std::uint64_t> max_peak_allocated;  ///< bytes; allocated_bytes.all.peak
  std::optional<double> max_reserved_ratio;         ///< reserved_bytes.all.peak / allocated_bytes.all.peak
  std::optional<std::int64_t> max_ooms;             ///< num_ooms
  std::optional<std::int64_t> max_retries;          ///< num_alloc_retries
  bool no_leaks = false;                            ///< no significant growth per step
  std::optional<std::uint64_t> max_growth;          ///< bytes per step, fitted slope
  std::optional<std::string> baseline;              ///< path of an earlier `summary --json`
  std::optional<double> max_increase;               ///< percent over the baseline's peaks
  /// Absolute slack added to a baseline comparison, bytes: one 2 MiB segment (PyTorch's
  /// kSmallBuffer, the smallest amount reserved memory moves by), so that a run which happens to
  /// round differently does not fail a 0 % budget.
  std::optional<std::uint64_t> noise_margin;
  std::optional<std::int32_t> device;  ///< only this device

  static constexpr std::uint64_t kDefaultNoiseMargin = kSmallBuffer;

  /// Fields set in `over` replace those here (command line over file); no_leaks is or-ed.
  void merge(const Budgets& over);
  /// True when no budget at all is set (device and noise margin alone are not budgets).
  bool empty() const;
};

/// Reads a budget file: one `key = value` per line, '#' starts a comment, keys as the options
/// (max-peak-reserved, max_peak_reserved, ...), values as on the command line, optionally in
/// double quotes; no-leaks takes true/false. `baseline` is relative to the file's directory.
/// Throws BudgetError naming the file and line for an unknown key, a bad value, or a duplicate.
Budgets parse_budget_file(const std::string& path);

/// What check measures for one device of one trace.
struct DeviceMeasures {
  std::string trace;            ///< path as the summary names it
  std::size_t trace_index = 0;  ///< position among the checked traces
  std::int32_t device = 0;
  std::optional<std::int64_t> peak_reserved;   ///< bytes
  std::optional<std::int64_t> peak_allocated;  ///< bytes
  std::optional<std::int64_t> num_ooms;
  std::optional<std::int64_t> num_alloc_retries;  ///< unknown when the trace does not record it
  std::optional<GrowthFit> growth;                ///< absent when the input was a summary
  std::string growth_source;                      ///< "marks", "pattern", "none", "" (no trace)
  std::string growth_note;                        ///< why growth cannot be judged, if so
};

/// The measures of every device of `traces`, in order (trace_index = position in `traces`):
/// peak reserved and allocated, num_ooms (else the trace's oom events) and num_alloc_retries.
/// Growth is left for the caller (it needs the events). Never throws.
std::vector<DeviceMeasures> measures_from_figures(const std::vector<TraceFigures>& traces);

/// measures_from_figures of a `vramtrace summary --json` document, read by
/// figures_from_summary_json: throws BudgetError naming `what` on a document of another shape.
std::vector<DeviceMeasures> measures_from_summary(const nlohmann::json& summary, const std::string& what);

enum class Verdict { pass, fail, unknown };
const char* verdict_name(Verdict v) noexcept;

/// The outcome of one budget on one device.
struct BudgetResult {
  std::string budget;  ///< option name, e.g. "max-peak-reserved"; "max-increase:reserved"
  std::string trace;
  std::int32_t device = 0;
  Verdict verdict = Verdict::unknown;
  std::string unit;           ///< "bytes", "bytes/step", "ratio", "count"
  double measured = 0;        ///< measured value in `unit` (unset when unknown)
  double allowed = 0;         ///< the budget's limit in `unit`
  std::string measured_text;  ///< e.g. "1.20 GiB"
  std::string allowed_text;   ///< e.g. "1.00 GiB"
  std::string message;        ///< one sentence: budget, measured, allowed (and why, if unknown)
  nlohmann::json details;     ///< extra figures (growth fit, baseline values)
};

/// Evaluates every set budget on every device (or on `budgets.device` only). `baseline` are the
/// baseline's measures, matched by trace position when it has as many traces, else by device of
/// its only trace. Throws BudgetError when budgets.device names a device absent from every trace,
/// or a baseline comparison is asked without a baseline.
std::vector<BudgetResult> evaluate_budgets(const Budgets& budgets, const std::vector<DeviceMeasures>& measures,
                                           const std::vector<DeviceMeasures>* baseline);

/// 0 every budget holds, 1 one failed, 2 none failed but one could not be judged (unusable input).
int check_exit_code(const std::vector<BudgetResult>& results) noexcept;

}  // namespace vramtrace
