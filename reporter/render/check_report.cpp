// Output formats of `vramtrace check`. See check_report.h.
#include "render/check_report.h"

#include <filesystem>
#include <map>

#include <fmt/format.h>

namespace vramtrace {

namespace {

const char* tag(Verdict v) {
  switch (v) {
    case Verdict::pass:
      return "PASS";
    case Verdict::fail:
      return "FAIL";
    case Verdict::unknown:
      return "????";
  }
  return "????";
}

// A result about a whole trace (device -1: the complete-trace rule), not a budget of a device.
bool whole_trace(const BudgetResult& r) { return r.device < 0; }

// The last line: the traces that fail as a whole first (the runs that did not finish), then the
// budgets. Counts only what `results` hold, so that it says what the exit status says.
std::string verdict_line(const std::vector<BudgetResult>& results) {
  std::size_t traces = 0, budgets = 0, fail = 0, unknown = 0;
  for (const auto& r : results) {
    if (whole_trace(r)) {
      traces += r.verdict == Verdict::fail;
      continue;
    }
    ++budgets;
    fail += r.verdict == Verdict::fail;
    unknown += r.verdict == Verdict::unknown;
  }
  std::string out = "vramtrace check: ";
  if (traces) out += fmt::format("fails: {} trace{} did not finish; ", traces, traces == 1 ? "" : "s");
  if (budgets == 0) return out + "no budget was judged (no device with allocator activity)";
  if (fail) return out + fmt::format("{} of {} budgets exceeded", fail, budgets);
  if (unknown) return out + fmt::format("{} of {} budgets could not be checked", unknown, budgets);
  return out + fmt::format("all {} budgets hold", budgets);
}

// "device 0  " or, for a whole trace, "trace     " (the same width).
std::string place_of(const BudgetResult& r) {
  return whole_trace(r) ? std::string("trace     ") : fmt::format("device {:<3}", r.device);
}

std::string file_name(const std::string& path) {
  auto name = std::filesystem::path(path).filename().string();
  return name.empty() ? path : name;
}

}  // namespace

std::string render_check_text(const std::vector<BudgetResult>& results) {
  std::string out;
  for (const auto& r : results) {
    out += fmt::format("{}  {:<24} {} measured {:<18} allowed {}\n", tag(r.verdict), r.budget, place_of(r),
                       r.measured_text, r.allowed_text);
    out += fmt::format("      {}\n", r.message);
  }
  out += verdict_line(results) + "\n";
  return out;
}

nlohmann::json check_json(const std::vector<BudgetResult>& results, const std::vector<DeviceMeasures>& measures) {
  nlohmann::json rs = nlohmann::json::array();
  for (const auto& r : results) {
    nlohmann::json j = {{"budget", r.budget},
                        {"trace", r.trace},
                        {"device", whole_trace(r) ? nlohmann::json(nullptr) : nlohmann::json(r.device)},
                        {"verdict", verdict_name(r.verdict)},
                        {"unit", r.unit},
                        {"allowed", r.unit.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.allowed)},
                        {"measured_text", r.measured_text},
                        {"allowed_text", r.allowed_text},
                        {"message", r.message}};
    j["measured"] = (r.verdict == Verdict::unknown && r.measured_text == "unknown") || r.unit.empty()
                        ? nlohmann::json(nullptr)
                        : nlohmann::json(r.measured);
    if (!r.details.is_null()) j["details"] = r.details;
    rs.push_back(std::move(j));
  }
  nlohmann::json ms = nlohmann::json::array();
  auto opt = [](const auto& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  for (const auto& m : measures) {
    nlohmann::json j = {{"trace", m.trace},
                        {"device", m.device},
                        {"reserved_bytes.all.peak", opt(m.peak_reserved)},
                        {"allocated_bytes.all.peak", opt(m.peak_allocated)},
                        {"num_ooms", opt(m.num_ooms)},
                        {"num_alloc_retries", opt(m.num_alloc_retries)}};
    if (m.growth) {
      const auto& g = *m.growth;
      j["growth"] = {{"source", m.growth_source},
                     {"evaluated", g.evaluated},
                     {"samples", g.samples},
                     {"warmup_steps", g.warmup_steps},
                     {"steady_steps", g.steady_steps},
                     {"slope_bytes_per_step", g.slope_bytes_per_step},
                     {"slope_stderr_bytes", g.slope_stderr},
                     {"r_squared", g.r_squared},
                     {"growing", g.growing},
                     {"reason", g.reason.empty() ? m.growth_note : g.reason}};
    }
    ms.push_back(std::move(j));
  }
  int rc = check_exit_code(results);
  return {{"exit_code", rc},
          {"verdict", rc == 0   ? "pass"
                      : rc == 1 ? "fail"
                                : "unknown"},
          {"results", rs},
          {"measures", ms}};
}

std::string xml_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        if (u < 0x20 && c != '\t' && c != '\n' && c != '\r') break;  // not allowed in XML 1.0
        out += c;
    }
  }
  return out;
}

std::string render_check_junit(const std::vector<BudgetResult>& results) {
  // Group by trace, keeping first-seen order.
  std::vector<std::string> order;
  std::map<std::string, std::vector<const BudgetResult*>> by_trace;
  for (const auto& r : results) {
    if (!by_trace.count(r.trace)) order.push_back(r.trace);
    by_trace[r.trace].push_back(&r);
  }
  std::size_t fails = 0, errors = 0;
  for (const auto& r : results) {
    fails += r.verdict == Verdict::fail;
    errors += r.verdict == Verdict::unknown;
  }
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out += fmt::format("<testsuites name=\"vramtrace check\" tests=\"{}\" failures=\"{}\" errors=\"{}\">\n",
                     results.size(), fails, errors);
  for (const auto& trace : order) {
    const auto& rs = by_trace[trace];
    std::size_t f = 0, e = 0;
    for (const auto* r : rs) {
      f += r->verdict == Verdict::fail;
      e += r->verdict == Verdict::unknown;
    }
    out +=
        fmt::format("  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"0\" time=\"0\">\n",
                    xml_escape("vramtrace check " + trace), rs.size(), f, e);
    out += fmt::format("    <properties>\n      <property name=\"trace\" value=\"{}\"/>\n    </properties>\n",
                       xml_escape(trace));
    for (const auto* r : rs) {
      std::string classname = whole_trace(*r)
                                  ? fmt::format("vramtrace.check.{}", file_name(r->trace))
                                  : fmt::format("vramtrace.check.{}.device{}", file_name(r->trace), r->device);
      out += fmt::format("    <testcase classname=\"{}\" name=\"{}\" time=\"0\"", xml_escape(classname),
                         xml_escape(r->budget));
      if (r->verdict == Verdict::pass) {
        out += ">\n";
        out += fmt::format("      <system-out>{}</system-out>\n", xml_escape(r->message));
        out += "    </testcase>\n";
        continue;
      }
      const char* element = r->verdict == Verdict::fail ? "failure" : "error";
      const char* type = r->verdict != Verdict::fail ? "unusable-input"
                         : whole_trace(*r)           ? "run-did-not-finish"
                                                     : "budget-exceeded";
      out += ">\n";
      out += fmt::format("      <{} message=\"{}\" type=\"{}\">{}\nmeasured: {}\nallowed: {}</{}>\n", element,
                         xml_escape(r->message), type, xml_escape(r->message), xml_escape(r->measured_text),
                         xml_escape(r->allowed_text), element);
      out += "    </testcase>\n";
    }
    out += "  </testsuite>\n";
  }
  out += "</testsuites>\n";
  return out;
}

namespace {
// GitHub's workflow-command escaping (actions/toolkit, command.ts): '%', CR and LF everywhere, and
// ':' and ',' inside a property, where they separate properties.
std::string github_escape(std::string_view s, bool property) {
  std::string out;
  for (char c : s) {
    if (c == '%')
      out += "%25";
    else if (c == '\r')
      out += "%0D";
    else if (c == '\n')
      out += "%0A";
    else if (property && c == ':')
      out += "%3A";
    else if (property && c == ',')
      out += "%2C";
    else
      out += c;
  }
  return out;
}
}  // namespace

std::string github_escape_data(std::string_view s) { return github_escape(s, false); }

std::string github_escape_property(std::string_view s) { return github_escape(s, true); }

std::string render_check_github(const std::vector<BudgetResult>& results, const std::string& budget_file) {
  std::string out;
  for (const auto& r : results) {
    if (r.verdict == Verdict::pass) continue;
    std::string title = whole_trace(r) ? fmt::format("vramtrace check: {}: the run did not finish", r.budget)
                        : r.verdict == Verdict::fail
                            ? fmt::format("vramtrace check: {} exceeded on device {}", r.budget, r.device)
                            : fmt::format("vramtrace check: {} could not be checked on device {}", r.budget, r.device);
    // Each annotation names the budget file that set the budget, else the trace it was measured
    // on: never another trace's file. A budget that could not be checked is a warning. A trace
    // that fails as a whole is named itself: no budget file set that rule.
    const std::string& where = budget_file.empty() || whole_trace(r) ? r.trace : budget_file;
    out +=
        fmt::format("::{} file={},title={}::{}\n", r.verdict == Verdict::fail ? "error" : "warning",
                    github_escape_property(where), github_escape_property(title),
                    github_escape_data(r.message + "\nmeasured: " + r.measured_text + ", allowed: " + r.allowed_text));
  }
  out += verdict_line(results) + "\n";
  return out;
}

}  // namespace vramtrace
