#include "analyses/oom/explain.h"
#include "analyses/oom/form_diagnosis.h"

#include <fmt/format.h>
#include <algorithm>

namespace vramtrace {

namespace {

/// Each figure a message can carry: JSON key, label for people, pointer to the field.
struct FigureField {
  const char* key;
  const char* label;
  std::optional<PrintedSize> OomMessage::*field;
};

constexpr FigureField kFields[] = {
    {"requested_bytes", "request", &OomMessage::requested},
    {"rounded_bytes", "request rounded", &OomMessage::rounded},
    {"device_total_bytes", "device total", &OomMessage::device_total},
    {"device_free_bytes", "device free", &OomMessage::device_free},
    {"allocated_bytes", "allocated", &OomMessage::allocated},
    {"reserved_bytes", "reserved", &OomMessage::reserved},
    {"reserved_unallocated_bytes", "reserved but unallocated", &OomMessage::reserved_unallocated},
    {"allowed_bytes", "allowed (cap)", &OomMessage::allowed},
    {"process_in_use_bytes", "in use by this process", &OomMessage::process_in_use},
    {"private_pools_bytes", "in private pools", &OomMessage::private_pools},
    {"mps_other_bytes", "other allocations (MPS)", &OomMessage::mps_other},
    {"allocated_so_far_bytes", "allocated so far (pool)", &OomMessage::pool_allocated_so_far},
    {"space_used_bytes", "used (compiled program)", &OomMessage::space_used},
    {"space_limit_bytes", "capacity (memory space)", &OomMessage::space_limit},
    {"space_exceeded_by_bytes", "exceeded by", &OomMessage::space_exceeded_by},
    {"bfc_limit_bytes", "BFC limit", &OomMessage::bfc_limit},
    {"bfc_in_use_bytes", "BFC in use", &OomMessage::bfc_in_use},
    {"bfc_max_in_use_bytes", "BFC max in use", &OomMessage::bfc_max_in_use},
    {"bfc_region_bytes", "BFC regions", &OomMessage::bfc_region_bytes},
    {"bfc_largest_free_chunk_bytes", "BFC largest free chunk", &OomMessage::bfc_largest_free_chunk},
    {"bfc_free_chunks_bytes", "BFC free chunks", &OomMessage::bfc_free_chunks_bytes},
};

/// The name for people of a figure's JSON key (kFields' labels; the shape and the type).
std::string label_of(std::string_view key) {
  for (const auto& f : kFields)
    if (key == f.key) return f.label;
  if (key == "tensor_shape") return "tensor shape";
  if (key == "dtype") return "tensor type";
  return std::string(key);
}

}  // namespace

namespace {

Explanation explain_one(OomMessage m) {
  Explanation e;
  e.message = std::move(m);
  if (auto by_form = diagnose_form(e.message)) {
    e.diagnosis = std::move(*by_form);
  } else {
    e.diagnosis = diagnose(figures_from_message(e.message));
  }
  // A figure printed but cut from its unit (a wrap, an edit): say that restoring it gives a verdict.
  for (const UnreadableFigure& u : e.message.unreadable)
    e.diagnosis.notes.push_back(fmt::format(
        "the message prints the {} as \"{}\", which does not read as {} (a line wrap or an edit may have cut it): "
        "the diagnosis does without it; paste that part as printed to use it",
        label_of(u.key), u.printed, u.key == "tensor_shape" ? "a shape" : "a size with its unit"));
  if (e.message.format == OomMessageFormat::pytorch_thc) {
    // The request is not missing from a cut message here: this generation never printed it.
    e.diagnosis.headline = "PyTorch 0.4 and older print no figures with this error, so no verdict is possible";
    e.diagnosis.next_step =
        "Rerun with a newer PyTorch (1.0 and later print the request, the device total and free memory, and the "
        "allocator's figures), or record a trace (vramtrace run) and use `vramtrace oom`. Meanwhile "
        "torch.cuda.memory_allocated() and max_memory_allocated() before the failing step show how close it was.";
  }
  return e;
}

}  // namespace

namespace {

/// The words a form prints in place of figures: a tensor's shape and type, a memory space, a
/// library's status, TF2's count of root errors. `any` says whether the figures' heading is out.
std::string render_form_words(const OomMessage& m, bool any) {
  std::string out;
  auto line = [&](const char* label, const std::string& value) {
    if (!any) out += "\nRead from the message:\n";
    any = true;
    out += fmt::format("  {:<26} {:>14}\n", label, value);
  };
  if (!m.tensor_shape_text.empty()) line("tensor shape", m.tensor_shape_text);
  if (!m.dtype.empty()) line("tensor type", m.dtype);
  if (!m.memory_space.empty()) line("memory space", m.memory_space);
  if (!m.library_status.empty()) line(fmt::format("{} status", m.library).c_str(), m.library_status);
  if (!m.library_call.empty()) line("in the call", m.library_call);
  if (m.no_memory_fraction) line("PyTorch limit", "none set");
  if (m.root_errors > 1) line("root errors listed", std::to_string(m.root_errors));
  return out;
}

/// The figures its form always prints that could not be read, and those printed unreadably.
std::string render_missing(const OomMessage& m) {
  if (m.missing.empty() && m.unreadable.empty()) return {};
  std::string out = "\nNot read (its form prints these; the diagnosis does without them):\n";
  auto unreadable_line = [](const UnreadableFigure& u) {
    return fmt::format("  {:<26} printed as \"{}\", which does not read as {}\n", label_of(u.key), u.printed,
                       u.key == "tensor_shape" ? "a list of whole numbers" : "a size with its unit");
  };
  for (const auto& key : m.missing) {
    auto u =
        std::find_if(m.unreadable.begin(), m.unreadable.end(), [&](const UnreadableFigure& f) { return f.key == key; });
    out += u == m.unreadable.end() ? fmt::format("  {:<26} not in the message\n", label_of(key)) : unreadable_line(*u);
  }
  for (const auto& u : m.unreadable)
    if (std::find(m.missing.begin(), m.missing.end(), u.key) == m.missing.end()) out += unreadable_line(u);
  return out;
}

}  // namespace

Explanation explain_message(std::string_view text) { return explain_one(parse_oom_message(text)); }

std::vector<Explanation> explain_messages(std::string_view text) {
  std::vector<Explanation> out;
  for (OomMessage& m : parse_oom_messages(text)) out.push_back(explain_one(std::move(m)));
  return out;
}

std::string render_explain_text(const Explanation& e) {
  const OomMessage& m = e.message;
  const Diagnosis& d = e.diagnosis;
  std::string out;
  out += fmt::format("Message: {}\n", oom_message_format_description(m.format));
  if (m.platform == GpuPlatform::rocm) out += "Platform: ROCm (HIP)\n";
  if (m.platform == GpuPlatform::tpu) out += "Platform: TPU\n";
  if (m.device) out += fmt::format("Device: {}\n", *m.device);
  if (!m.allocator_name.empty()) out += fmt::format("Allocator: {}\n", m.allocator_name);
  bool any = false;
  for (const auto& f : kFields) {
    const auto& v = m.*(f.field);
    if (!v) continue;
    if (!any) out += "\nRead from the message:\n";
    any = true;
    out += fmt::format("  {:<26} {:>14}  = {} bytes\n", f.label, v->text, v->bytes);
  }
  for (const auto& p : m.other_processes) {
    if (!any) out += "\nRead from the message:\n";
    any = true;
    out += fmt::format("  {:<26} {:>14}  = {} bytes\n", fmt::format("process {} in use", p.pid), p.in_use.text,
                       p.in_use.bytes);
  }
  if (m.bfc_free_chunks) out += fmt::format("  {:<26} {:>14}\n", "BFC free chunks listed", m.bfc_free_chunks);
  out += render_form_words(m, any);
  if (!any && !m.exceeds_1eb && m.tensor_shape_text.empty() && m.library_status.empty())
    out += "\nNo figures could be read.\n";
  out += render_missing(m);
  if (m.truncated)
    out += fmt::format("\nThe message is cut off after \"{}\": figures after that point are unknown.\n",
                       m.truncated_after);
  if (m.format == OomMessageFormat::unknown) {
    out += "\n";
    for (const auto& f : m.findings) out += fmt::format("{}\n", f);
  }
  if (!d.arithmetic.empty()) {
    out += "\nArithmetic:\n";
    for (const auto& a : d.arithmetic) out += fmt::format("  {}\n", a.formula);
  }
  out += fmt::format("\nDiagnosis: {} - {}\n", diagnosis_code_name(d.code), d.headline);
  for (const auto& r : d.reasons) out += fmt::format("  because {}\n", r);
  out += fmt::format("\nNext step: {}\n", d.next_step);
  std::vector<std::string> notes = d.notes;
  if (m.expandable_hint)
    notes.push_back(
        "the message's expandable_segments hint is printed whether or not the setting is on (pytorch/pytorch#173049)");
  if (m.capacity_typo) notes.push_back("\"capacty\" dates the message to PyTorch 2.1");
  if (!notes.empty()) {
    out += "\nNotes:\n";
    for (const auto& n : notes) out += fmt::format("  - {}\n", n);
  }
  return out;
}

std::string render_explain_text(const std::vector<Explanation>& all) {
  if (all.size() == 1) return render_explain_text(all.front());
  std::string out =
      fmt::format("{} out-of-memory messages in this text; each is explained from its own figures.\n", all.size());
  for (std::size_t i = 0; i < all.size(); ++i) {
    out += fmt::format("\n=== Message {} of {} ===\n", i + 1, all.size());
    out += render_explain_text(all[i]);
  }
  return out;
}

nlohmann::json explain_json(const std::vector<Explanation>& all) {
  if (all.size() == 1) return explain_json(all.front());
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& e : all) arr.push_back(explain_json(e));
  return nlohmann::json{{"messages", arr}};
}

nlohmann::json explain_json(const Explanation& e) {
  const OomMessage& m = e.message;
  const Diagnosis& d = e.diagnosis;
  nlohmann::json j;
  j["format"] = oom_message_format_name(m.format);
  j["platform"] = gpu_platform_name(m.platform);
  j["diagnosis"] = diagnosis_code_name(d.code);
  j["headline"] = d.headline;
  if (m.device) j["device"] = *m.device;
  if (!m.allocator_name.empty()) j["allocator"] = m.allocator_name;
  nlohmann::json figures = nlohmann::json::object();
  nlohmann::json printed = nlohmann::json::object();
  for (const auto& f : kFields) {
    const auto& v = m.*(f.field);
    if (!v) continue;
    figures[f.key] = v->bytes;
    printed[f.key] = v->text;
  }
  j["figures"] = figures;
  j["printed"] = printed;
  nlohmann::json procs = nlohmann::json::array();
  for (const auto& p : m.other_processes)
    procs.push_back({{"pid", p.pid}, {"in_use_bytes", p.in_use.bytes}, {"printed", p.in_use.text}});
  j["other_processes"] = procs;
  if (m.bfc_free_chunks) j["bfc_free_chunks"] = m.bfc_free_chunks;
  nlohmann::json derived = nlohmann::json::object();
  nlohmann::json lines = nlohmann::json::array();
  for (const auto& a : d.arithmetic) {
    derived[a.name + "_bytes"] = a.bytes;
    lines.push_back(a.formula);
  }
  j["derived"] = derived;
  j["arithmetic"] = lines;
  j["reasons"] = d.reasons;
  j["next_step"] = d.next_step;
  j["notes"] = d.notes;
  j["findings"] = m.findings;
  j["missing"] = m.missing;
  nlohmann::json unread = nlohmann::json::object();
  for (const auto& u : m.unreadable) unread[u.key] = u.printed;
  j["unreadable"] = unread;
  if (!m.tensor_shape_text.empty() || !m.dtype.empty()) {
    nlohmann::json t = nlohmann::json::object();
    t["shape_printed"] = m.tensor_shape_text;
    if (!m.tensor_shape.empty() || m.tensor_shape_text == "[]") t["shape"] = m.tensor_shape;
    t["dtype"] = m.dtype;
    j["tensor"] = t;
  }
  if (m.root_errors > 0) j["root_errors"] = m.root_errors;
  if (!m.memory_space.empty()) j["memory_space"] = m.memory_space;
  if (!m.library_status.empty()) {
    nlohmann::json l = {{"name", m.library}, {"status", m.library_status}};
    if (!m.library_call.empty()) l["call"] = m.library_call;
    j["library"] = l;
  }
  if (m.format == OomMessageFormat::pytorch_async) j["memory_fraction_set"] = !m.no_memory_fraction;
  j["truncated"] = m.truncated;
  if (m.truncated) j["truncated_after"] = m.truncated_after;
  j["exceeds_1eb"] = m.exceeds_1eb;
  j["expandable_segments_hint"] = m.expandable_hint;
  return j;
}

}  // namespace vramtrace
