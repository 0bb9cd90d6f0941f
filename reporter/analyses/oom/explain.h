// `vramtrace explain`: a pasted OOM message read, diagnosed and printed for people or as JSON.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "analyses/oom/diagnosis.h"
#include "analyses/oom/oom_message.h"

namespace vramtrace {

/// The message read and its diagnosis.
struct Explanation {
  OomMessage message;
  Diagnosis diagnosis;
};

/// Reads and diagnoses `text` as one message (any text; never throws on content).
Explanation explain_message(std::string_view text);

/// Reads every message of `text` (parse_oom_messages) and diagnoses each from its own figures
/// only. Never empty: a text without a known message gives one Explanation of format unknown.
std::vector<Explanation> explain_messages(std::string_view text);

/// Text for people: what was read (each figure as printed and in bytes), the arithmetic, the
/// verdict and the next step. Ends with a newline.
std::string render_explain_text(const Explanation& e);
/// Several messages: a line saying how many, then each under "Message i of N", explained on its
/// own. One message: render_explain_text of it. Ends with a newline.
std::string render_explain_text(const std::vector<Explanation>& all);

/// JSON: {"format", "diagnosis", "headline", "figures": {name: bytes...}, "printed": {name: text},
/// "other_processes": [...], "derived": {name: bytes}, "arithmetic": [lines], "reasons", "next_step",
/// "notes", "findings", "truncated", ...}. Every figure read is present, in bytes; figures absent
/// from the message are absent from "figures" (never zero-filled).
nlohmann::json explain_json(const Explanation& e);
/// One message: explain_json of it. Several: {"messages": [explain_json of each, in order]}.
nlohmann::json explain_json(const std::vector<Explanation>& all);

}  // namespace vramtrace
