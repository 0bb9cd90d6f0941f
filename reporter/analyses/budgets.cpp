// Budgets for `vramtrace check`: parsing, the budget file, evaluation. See budgets.h.
#include "analyses/budgets.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include <fmt/format.h>

namespace vramtrace {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::optional<double> parse_number(std::string_view s) {
  s = trim(s);
  if (s.empty()) return std::nullopt;
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::optional<std::int64_t> parse_count(std::string_view s) {
  s = trim(s);
  std::int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc{} || p != s.data() + s.size() || v < 0) return std::nullopt;
  return v;
}

std::optional<double> parse_percent(std::string_view s) {
  s = trim(s);
  if (!s.empty() && s.back() == '%') s.remove_suffix(1);
  auto v = parse_number(s);
  if (!v || *v < 0) return std::nullopt;
  return v;
}

}  // namespace

std::optional<std::uint64_t> parse_size(std::string_view text) {
  std::uint64_t bytes = 0;
  std::string error;
  if (!parse_size(text, bytes, error, kBudgetSizeBounds)) return std::nullopt;
  return bytes;
}

void Budgets::merge(const Budgets& over) {
  auto take = [](auto& mine, const auto& theirs) {
    if (theirs) mine = theirs;
  };
  take(max_peak_reserved, over.max_peak_reserved);
  take(max_peak_allocated, over.max_peak_allocated);
  take(max_reserved_ratio, over.max_reserved_ratio);
  take(max_ooms, over.max_ooms);
  take(max_retries, over.max_retries);
  no_leaks = no_leaks || over.no_leaks;
  take(max_growth, over.max_growth);
  take(baseline, over.baseline);
  take(max_increase, over.max_increase);
  take(noise_margin, over.noise_margin);
  take(device, over.device);
}

bool Budgets::empty() const {
  return !max_peak_reserved && !max_peak_allocated && !max_reserved_ratio && !max_ooms && !max_retries && !no_leaks &&
         !max_growth && !baseline && !max_increase;
}

Budgets parse_budget_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw BudgetError(fmt::format("{}: cannot open the budget file", path));
  Budgets b;
  std::set<std::string> seen;
  std::string raw;
  int lineno = 0;
  while (std::getline(in, raw)) {
    ++lineno;
    auto fail = [&](const std::string& what) { throw BudgetError(fmt::format("{}: line {}: {}", path, lineno, what)); };
    std::string_view line = raw;
    // Strip a comment, but not a '#' inside a quoted value.
    bool quoted = false;
    for (std::size_t i = 0; i < line.size(); ++i) {
      if (line[i] == '"') quoted = !quoted;
      if (line[i] == '#' && !quoted) {
        line = line.substr(0, i);
        break;
      }
    }
    line = trim(line);
    if (line.empty()) continue;
    auto eq = line.find('=');
    if (eq == std::string_view::npos) fail(fmt::format("expected `key = value`, got \"{}\"", line));
    std::string key = lower(trim(line.substr(0, eq)));
    std::replace(key.begin(), key.end(), '_', '-');
    std::string_view value = trim(line.substr(eq + 1));
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"') value = value.substr(1, value.size() - 2);
    if (!seen.insert(key).second) fail(fmt::format("\"{}\" is set twice", key));
    auto size = [&]() {
      auto v = parse_size(value);
      if (!v) fail(fmt::format("{}: \"{}\" is not a size (e.g. 20GiB, 512MiB, 24 MB)", key, value));
      return *v;
    };
    auto count = [&]() {
      auto v = parse_count(value);
      if (!v) fail(fmt::format("{}: \"{}\" is not a non-negative integer", key, value));
      return *v;
    };
    if (key == "max-peak-reserved") {
      b.max_peak_reserved = size();
    } else if (key == "max-peak-allocated") {
      b.max_peak_allocated = size();
    } else if (key == "max-reserved-ratio") {
      auto v = parse_number(value);
      // Reserved memory is never below allocated memory: a ratio below 1 could never hold.
      if (!v || *v < 1) fail(fmt::format("{}: \"{}\" is not a ratio of at least 1", key, value));
      b.max_reserved_ratio = *v;
    } else if (key == "max-ooms") {
      b.max_ooms = count();
    } else if (key == "max-retries") {
      b.max_retries = count();
    } else if (key == "no-leaks") {
      std::string v = lower(value);
      if (v == "true" || v == "1" || v == "yes")
        b.no_leaks = true;
      else if (v == "false" || v == "0" || v == "no")
        b.no_leaks = false;
      else
        fail(fmt::format("no-leaks: \"{}\" is not true or false", value));
    } else if (key == "max-growth") {
      b.max_growth = size();
    } else if (key == "baseline") {
      if (value.empty()) fail("baseline: empty path");
      std::filesystem::path p(value);
      if (p.is_relative()) p = std::filesystem::path(path).parent_path() / p;
      b.baseline = p.lexically_normal().string();
    } else if (key == "max-increase") {
      auto v = parse_percent(value);
      if (!v) fail(fmt::format("max-increase: \"{}\" is not a percentage (e.g. 5 or 5%)", value));
      b.max_increase = *v;
    } else if (key == "noise-margin") {
      b.noise_margin = size();
    } else if (key == "device") {
      auto v = count();
      if (v > 1023) fail(fmt::format("device: {} is not a device index 0..1023", v));
      b.device = static_cast<std::int32_t>(v);
    } else {
      fail(
          fmt::format("unknown budget \"{}\" (known: max-peak-reserved, max-peak-allocated, max-reserved-ratio, "
                      "max-ooms, max-retries, no-leaks, max-growth, baseline, max-increase, noise-margin, device)",
                      key));
    }
  }
  return b;
}

std::vector<DeviceMeasures> measures_from_figures(const std::vector<TraceFigures>& traces) {
  std::vector<DeviceMeasures> out;
  for (std::size_t ti = 0; ti < traces.size(); ++ti) {
    for (const DeviceFigures& d : traces[ti].devices) {
      DeviceMeasures m;
      m.trace = traces[ti].path.value_or(std::string{});
      m.trace_index = ti;
      m.device = d.device;
      m.peak_reserved = d.reserved_bytes_peak;
      m.peak_allocated = d.allocated_bytes_peak;
      m.num_ooms = d.num_ooms ? d.num_ooms : d.oom_events;
      m.num_alloc_retries = d.num_alloc_retries;
      out.push_back(std::move(m));
    }
  }
  return out;
}

std::vector<DeviceMeasures> measures_from_summary(const nlohmann::json& summary, const std::string& what) {
  return measures_from_figures(figures_from_summary_json(summary, what));
}

const char* verdict_name(Verdict v) noexcept {
  switch (v) {
    case Verdict::pass:
      return "pass";
    case Verdict::fail:
      return "fail";
    case Verdict::unknown:
      return "unknown";
  }
  return "unknown";
}

namespace {

std::string where(const DeviceMeasures& m) { return fmt::format("{} device {}", m.trace, m.device); }

BudgetResult base_result(const char* budget, const DeviceMeasures& m, const char* unit) {
  BudgetResult r;
  r.budget = budget;
  r.trace = m.trace;
  r.device = m.device;
  r.unit = unit;
  return r;
}

// A measured <= allowed budget.
BudgetResult limit(const char* budget, const char* what, const DeviceMeasures& m, std::optional<double> measured,
                   double allowed, const char* unit, const char* missing_reason) {
  BudgetResult r = base_result(budget, m, unit);
  r.allowed = allowed;
  auto text = [&](double v) {
    if (std::string_view(unit) == "bytes") return format_bytes(v, ByteStyle::binary);
    if (std::string_view(unit) == "ratio") return fmt::format("{:.3f}", v);
    return fmt::format("{:.0f}", v);
  };
  r.allowed_text = text(allowed);
  if (!measured) {
    r.verdict = Verdict::unknown;
    r.measured_text = "unknown";
    r.message = fmt::format("{}: {} cannot be checked: {} ({})", budget, what, missing_reason, where(m));
    return r;
  }
  r.measured = *measured;
  r.measured_text = text(*measured);
  r.verdict = *measured <= allowed ? Verdict::pass : Verdict::fail;
  r.message =
      fmt::format("{}: {} is {}, {} {} ({})", budget, what, r.measured_text,
                  r.verdict == Verdict::pass ? "within the budget of" : "over the budget of", r.allowed_text, where(m));
  return r;
}

std::optional<double> as_double(std::optional<std::int64_t> v) {
  if (!v) return std::nullopt;
  return static_cast<double>(*v);
}

nlohmann::json growth_json(const GrowthFit& g, const DeviceMeasures& m) {
  return {{"source", m.growth_source},
          {"samples", g.samples},
          {"warmup_steps", g.warmup_steps},
          {"steady_steps", g.steady_steps},
          {"slope_bytes_per_step", g.slope_bytes_per_step},
          {"slope_stderr_bytes", g.slope_stderr},
          {"r_squared", g.r_squared},
          {"steady_first_bytes", g.steady_first_bytes},
          {"steady_last_bytes", g.steady_last_bytes},
          {"residual_autocorrelation", g.residual_autocorrelation},
          {"wanders", g.wanders},
          {"increment_mean_bytes", g.increment_mean_bytes},
          {"increment_stderr_bytes", g.increment_stderr},
          {"growing", g.growing}};
}

// Growth budgets: --no-leaks (allowed 0, significant growth fails) and --max-growth.
BudgetResult growth_budget(const char* budget, const DeviceMeasures& m, double allowed) {
  BudgetResult r = base_result(budget, m, "bytes/step");
  r.allowed = allowed;
  r.allowed_text = format_bytes(allowed, ByteStyle::binary) + "/step";
  if (!m.growth || !m.growth->evaluated) {
    r.verdict = Verdict::unknown;
    r.measured_text = "unknown";
    std::string why = !m.growth_note.empty()                  ? m.growth_note
                      : m.growth && !m.growth->reason.empty() ? m.growth->reason
                                                              : "no step boundaries (the input has no trace events)";
    r.message = fmt::format(
        "{}: growth per step cannot be checked: {} ({}). Write a mark per step "
        "(vramtrace_mark) or run more steps.",
        budget, why, where(m));
    return r;
  }
  const GrowthFit& g = *m.growth;
  r.measured = g.slope_bytes_per_step;
  r.details = growth_json(g, m);
  // Growth counts only when it is significant (Note [growth detection], rules 4 and 5): the
  // measured column says so instead of printing a slope the verdict does not count.
  bool over = g.growing && g.slope_bytes_per_step > allowed;
  r.verdict = over ? Verdict::fail : Verdict::pass;
  const auto mib = [](double v) { return format_bytes(v, ByteStyle::binary); };
  r.measured_text = g.growing                    ? mib(g.slope_bytes_per_step) + "/step"
                    : g.slope_bytes_per_step > 0 ? std::string("not significant")
                                                 : std::string("no growth");
  std::string fit = fmt::format("fitted slope {}/step +/- {}, R^2 {:.3f}, over steps {}..{} after {} warm-up step{}",
                                mib(g.slope_bytes_per_step), mib(g.slope_stderr), g.r_squared, g.warmup_steps,
                                g.samples - 1, g.warmup_steps, g.warmup_steps == 1 ? "" : "s");
  if (g.wanders)
    fit += fmt::format(
        "; the memory wanders from step to step (residual autocorrelation {:.2f}), its increments "
        "average {}/step +/- {}",
        g.residual_autocorrelation, mib(g.increment_mean_bytes), mib(g.increment_stderr));
  const std::string few = g.steady_steps < 20 && g.wanders
                              ? fmt::format(
                                    "; from {} steady steps a wandering run cannot be told from a growing one "
                                    "for sure: 20 or more give a firm verdict",
                                    g.steady_steps)
                              : std::string();
  if (over) {
    r.message = fmt::format("{}: allocated memory grows by {} per step ({}{}), over the budget of {} ({})", budget,
                            mib(g.slope_bytes_per_step), fit, few, r.allowed_text, where(m));
  } else if (g.growing) {
    r.message = fmt::format("{}: allocated memory grows by {} per step ({}{}), within the budget of {} ({})", budget,
                            mib(g.slope_bytes_per_step), fit, few, r.allowed_text, where(m));
  } else {
    const double t = GrowthOptions{}.significance_t;
    const bool trend = g.slope_bytes_per_step - t * g.slope_stderr > 0;
    r.message = fmt::format(
        "{}: no significant growth per step ({}{}): {}; within the budget of {} ({})", budget, fit, few,
        trend && g.wanders
            ? fmt::format("the memory wanders, and growth counts only when its increments average more than {} "
                          "standard errors above zero",
                          t)
            : fmt::format("growth counts only when it stands out of the steps' noise by {} standard errors", t),
        r.allowed_text, where(m));
  }
  return r;
}

const DeviceMeasures* match_baseline(const DeviceMeasures& m, const std::vector<DeviceMeasures>& base,
                                     std::size_t traces) {
  std::size_t base_traces = 0;
  for (const auto& b : base) base_traces = std::max(base_traces, b.trace_index + 1);
  for (const auto& b : base) {
    bool same_trace = base_traces == traces ? b.trace_index == m.trace_index : b.trace_index == 0;
    if (same_trace && b.device == m.device) return &b;
  }
  return nullptr;
}

BudgetResult increase(const char* budget, const char* stat, const DeviceMeasures& m, std::optional<std::int64_t> now,
                      const DeviceMeasures* base, std::optional<std::int64_t> then, double pct, double margin) {
  BudgetResult r = base_result(budget, m, "bytes");
  if (!base || !then) {
    r.verdict = Verdict::unknown;
    r.measured_text = now ? format_bytes(static_cast<double>(*now), ByteStyle::binary) : "unknown";
    r.allowed_text = "unknown";
    r.message = fmt::format("{}: the baseline has no {} for device {} ({})", budget, stat, m.device, where(m));
    return r;
  }
  r.allowed = static_cast<double>(*then) * (1 + pct / 100) + margin;
  r.allowed_text = format_bytes(r.allowed, ByteStyle::binary);
  r.details = {{"stat", stat}, {"baseline", *then}, {"max_increase_percent", pct}, {"noise_margin_bytes", margin}};
  if (!now) {
    r.verdict = Verdict::unknown;
    r.measured_text = "unknown";
    r.message = fmt::format("{}: {} is not in the checked run ({})", budget, stat, where(m));
    return r;
  }
  r.measured = static_cast<double>(*now);
  r.measured_text = format_bytes(r.measured, ByteStyle::binary);
  double change = *then > 0 ? (r.measured - static_cast<double>(*then)) / static_cast<double>(*then) * 100 : 0;
  r.details["change_percent"] = change;
  r.verdict = r.measured <= r.allowed ? Verdict::pass : Verdict::fail;
  r.message =
      fmt::format("{}: {} is {}, {:+.1f}% against the baseline's {}; allowed {} (+{}% + {} noise margin) ({})", budget,
                  stat, r.measured_text, change, format_bytes(static_cast<double>(*then), ByteStyle::binary),
                  r.allowed_text, pct, format_bytes(margin, ByteStyle::binary), where(m));
  return r;
}

}  // namespace

std::vector<BudgetResult> evaluate_budgets(const Budgets& b, const std::vector<DeviceMeasures>& measures,
                                           const std::vector<DeviceMeasures>* baseline) {
  if ((b.baseline || b.max_increase) && !baseline)
    throw BudgetError("--max-increase needs --baseline FILE (an earlier `vramtrace summary --json`)");
  std::vector<const DeviceMeasures*> chosen;
  std::size_t traces = 0;
  for (const auto& m : measures) {
    traces = std::max(traces, m.trace_index + 1);
    if (!b.device || m.device == *b.device) chosen.push_back(&m);
  }
  if (b.device && chosen.empty()) throw BudgetError(fmt::format("--device {}: no such device in the trace", *b.device));
  if (chosen.empty()) throw BudgetError("the input has no device with allocator activity");

  std::vector<BudgetResult> out;
  for (const DeviceMeasures* mp : chosen) {
    const DeviceMeasures& m = *mp;
    if (b.max_peak_reserved)
      out.push_back(limit("max-peak-reserved", "peak reserved (reserved_bytes.all.peak)", m, as_double(m.peak_reserved),
                          static_cast<double>(*b.max_peak_reserved), "bytes", "not in the input"));
    if (b.max_peak_allocated)
      out.push_back(limit("max-peak-allocated", "peak allocated (allocated_bytes.all.peak)", m,
                          as_double(m.peak_allocated), static_cast<double>(*b.max_peak_allocated), "bytes",
                          "not in the input"));
    if (b.max_reserved_ratio) {
      std::optional<double> ratio;
      if (m.peak_reserved && m.peak_allocated && *m.peak_allocated > 0)
        ratio = static_cast<double>(*m.peak_reserved) / static_cast<double>(*m.peak_allocated);
      else if (m.peak_reserved && *m.peak_reserved == 0)
        ratio = 0;
      out.push_back(limit("max-reserved-ratio", "peak reserved / peak allocated", m, ratio, *b.max_reserved_ratio,
                          "ratio", "nothing was allocated"));
    }
    if (b.max_ooms)
      out.push_back(limit("max-ooms", "OOMs (num_ooms)", m, as_double(m.num_ooms), static_cast<double>(*b.max_ooms),
                          "count", "not in the input"));
    if (b.max_retries)
      out.push_back(limit("max-retries", "cudaMalloc retries (num_alloc_retries)", m, as_double(m.num_alloc_retries),
                          static_cast<double>(*b.max_retries), "count",
                          "the trace does not record num_alloc_retries (PyTorch's history has no retry event)"));
    if (b.no_leaks) out.push_back(growth_budget("no-leaks", m, 0));
    if (b.max_growth) out.push_back(growth_budget("max-growth", m, static_cast<double>(*b.max_growth)));
    if (baseline) {
      double pct = b.max_increase.value_or(0);
      double margin = static_cast<double>(b.noise_margin.value_or(Budgets::kDefaultNoiseMargin));
      const DeviceMeasures* base = match_baseline(m, *baseline, traces);
      out.push_back(increase("max-increase:allocated", "allocated_bytes.all.peak", m, m.peak_allocated, base,
                             base ? base->peak_allocated : std::nullopt, pct, margin));
      out.push_back(increase("max-increase:reserved", "reserved_bytes.all.peak", m, m.peak_reserved, base,
                             base ? base->peak_reserved : std::nullopt, pct, margin));
    }
  }
  return out;
}

int check_exit_code(const std::vector<BudgetResult>& results) noexcept {
  bool unknown = false;
  for (const auto& r : results) {
    if (r.verdict == Verdict::fail) return 1;
    if (r.verdict == Verdict::unknown) unknown = true;
  }
  return unknown ? 2 : 0;
}

}  // namespace vramtrace
