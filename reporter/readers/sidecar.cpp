// The sidecar of a tensor-level snapshot (sidecar.h; the writer is python/vramtrace/torch_level.py).
#include "readers/sidecar.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace vramtrace {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kFormat = "vramtrace-torch-sidecar";
constexpr int kVersion = 1;
constexpr std::uintmax_t kMaxBytes = 64u << 20;  // a sidecar holds at most 1000 OOMs' statistics

/// A field of the wrong type: the whole sidecar is left out (BadSidecar names the field).
struct BadSidecar {
  std::string what;
};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

const json* member(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

std::int64_t need_int(const json& j, const char* key, const std::string& at) {
  const json* v = member(j, key);
  if (!v || !v->is_number_integer()) throw BadSidecar{fmt::format("{}\"{}\" is not an integer", at, key)};
  return v->get<std::int64_t>();
}

std::uint64_t need_size(const json& j, const char* key, const std::string& at) {
  const json* v = member(j, key);
  if (!v || !v->is_number_integer() || (!v->is_number_unsigned() && v->get<std::int64_t>() < 0))
    throw BadSidecar{fmt::format("{}\"{}\" is not a byte count", at, key)};
  return v->get<std::uint64_t>();
}

/// Unix seconds (integer or fraction) as nanoseconds.
std::int64_t need_unix_ns(const json& j, const char* key, const std::string& at) {
  const json* v = member(j, key);
  if (!v || !v->is_number()) throw BadSidecar{fmt::format("{}\"{}\" is not a time", at, key)};
  const double s = v->get<double>();
  if (!std::isfinite(s) || s <= 0 || s > 9.2e9) throw BadSidecar{fmt::format("{}\"{}\" is not a Unix time", at, key)};
  // Whole seconds and the fraction apart: s * 1e9 would round to 256 ns at today's times.
  const double whole = std::floor(s);
  return static_cast<std::int64_t>(whole) * 1'000'000'000 + std::llround((s - whole) * 1e9);
}

/// A string, or "" for null or absent; another type is refused.
std::string text_or_empty(const json& j, const char* key, const std::string& at) {
  const json* v = member(j, key);
  if (!v || v->is_null()) return {};
  if (v->is_string()) return v->get<std::string>();
  if (v->is_number_integer()) return std::to_string(v->get<std::int64_t>());  // a rank written as a number
  throw BadSidecar{fmt::format("{}\"{}\" is not a string", at, key)};
}

/// memory_stats(): integer values; other values (PyTorch has none) are skipped.
FlatStatList flat_stats(const json& j, const char* key, const std::string& at) {
  FlatStatList out;
  const json* v = member(j, key);
  if (!v || v->is_null()) return out;
  if (!v->is_object()) throw BadSidecar{fmt::format("{}\"{}\" is not an object", at, key)};
  for (auto it = v->begin(); it != v->end(); ++it)
    if (it->is_number_integer()) out.emplace_back(it.key(), it->get<std::int64_t>());
  return out;
}

/// The allocator settings the snapshot ran under (TorchSidecar::allocator_settings).
std::string settings_of(const json& sidecar) {
  const json* a = member(sidecar, "allocator");
  if (!a || !a->is_object()) return {};
  auto conf_in = [](const json* holder, const char* key) -> std::string {
    if (!holder || !holder->is_object()) return {};
    const json* v = member(*holder, key);
    return v && v->is_string() ? v->get<std::string>() : std::string();
  };
  if (std::string s = conf_in(member(*a, "snapshot_settings"), "PYTORCH_CUDA_ALLOC_CONF"); !s.empty()) return s;
  if (std::string s = conf_in(member(*a, "env"), "PYTORCH_CUDA_ALLOC_CONF"); !s.empty()) return s;
  return conf_in(member(*a, "env"), "PYTORCH_ALLOC_CONF");
}

TorchSidecar parse(const json& j, const std::string& path, const std::string& snapshot_name) {
  if (!j.is_object()) throw BadSidecar{"not a JSON object"};
  const json* format = member(j, "format");
  if (!format || !format->is_string() || format->get<std::string>() != kFormat)
    throw BadSidecar{fmt::format("not a vramtrace sidecar (\"format\" is not \"{}\")", kFormat)};
  const json* version = member(j, "version");
  if (!version || !version->is_number_integer()) throw BadSidecar{"\"version\" is not an integer"};
  if (version->get<std::int64_t>() != kVersion)
    throw BadSidecar{fmt::format("sidecar version {} (this vramtrace reads version {})", version->dump(), kVersion)};
  const json* snap = member(j, "snapshot");
  if (!snap || !snap->is_string()) throw BadSidecar{"\"snapshot\" names no pickle (the write had none)"};
  if (snap->get<std::string>() != snapshot_name)
    throw BadSidecar{fmt::format("it describes {}, not {}", snap->get<std::string>(), snapshot_name)};

  TorchSidecar s;
  s.path = path;
  s.pid = need_int(j, "pid", "");
  if (s.pid <= 0) throw BadSidecar{"\"pid\" is not a process id"};
  s.host = text_or_empty(j, "host", "");
  s.rank = text_or_empty(j, "rank", "");
  s.torch_version = text_or_empty(j, "torch_version", "");
  s.reason = text_or_empty(j, "reason", "");
  const json* final = member(j, "final");
  if (!final || !final->is_boolean()) throw BadSidecar{"\"final\" is not true or false"};
  s.final = final->get<bool>();
  s.written_at_ns = need_unix_ns(j, "written_at", "");
  s.allocator_settings = settings_of(j);

  if (const json* devices = member(j, "devices"); devices && !devices->is_null()) {
    if (!devices->is_array()) throw BadSidecar{"\"devices\" is not a list"};
    for (std::size_t i = 0; i < devices->size(); ++i) {
      const json& d = (*devices)[i];
      const std::string at = fmt::format("devices[{}]: ", i);
      if (!d.is_object()) throw BadSidecar{at + "not an object"};
      TorchSidecar::Device dev;
      const std::int64_t id = need_int(d, "device", at);
      if (id < 0 || id > 1 << 20) throw BadSidecar{at + "\"device\" is not a device ordinal"};
      dev.device = static_cast<std::int32_t>(id);
      if (s.device(dev.device)) throw BadSidecar{fmt::format("{}device {} is listed twice", at, id)};
      dev.memory_stats = flat_stats(d, "memory_stats", at);
      if (const json* info = member(d, "mem_get_info"); info && !info->is_null()) {
        if (!info->is_array() || info->size() != 2) throw BadSidecar{at + "\"mem_get_info\" is not [free, total]"};
        const json pair = {{"free", (*info)[0]}, {"total", (*info)[1]}};
        const std::uint64_t free_b = need_size(pair, "free", at + "mem_get_info ");
        const std::uint64_t total_b = need_size(pair, "total", at + "mem_get_info ");
        if (total_b == 0 || free_b > total_b)
          throw BadSidecar{fmt::format("{}mem_get_info says {} B free of {} B", at, free_b, total_b)};
        dev.free_bytes = free_b;
        dev.total_bytes = total_b;
      }
      s.devices.push_back(std::move(dev));
    }
  }
  if (const json* ooms = member(j, "ooms"); ooms && !ooms->is_null()) {
    if (!ooms->is_array()) throw BadSidecar{"\"ooms\" is not a list"};
    for (std::size_t i = 0; i < ooms->size(); ++i) {
      const json& o = (*ooms)[i];
      const std::string at = fmt::format("ooms[{}]: ", i);
      if (!o.is_object()) throw BadSidecar{at + "not an object"};
      TorchSidecar::Oom x;
      x.time_ns = need_unix_ns(o, "time", at);
      const std::int64_t id = need_int(o, "device", at);
      if (id < 0 || id > 1 << 20) throw BadSidecar{at + "\"device\" is not a device ordinal"};
      x.device = static_cast<std::int32_t>(id);
      x.alloc_bytes = need_size(o, "alloc_bytes", at);
      x.device_allocated_bytes = need_size(o, "device_allocated", at);
      x.device_free_bytes = need_size(o, "device_free", at);
      x.stats = flat_stats(o, "stats", at);
      s.ooms.push_back(std::move(x));
    }
  }
  if (const json* dropped = member(j, "ooms_dropped"); dropped && !dropped->is_null())
    s.ooms_dropped = need_size(j, "ooms_dropped", "");
  return s;
}

}  // namespace

std::optional<std::int64_t> flat_stat(const FlatStatList& stats, std::string_view key) noexcept {
  for (const auto& [k, v] : stats)
    if (k == key) return v;
  return std::nullopt;
}

SidecarRead read_sidecar(const std::string& snapshot) {
  SidecarRead out;
  std::string stem = snapshot;
  for (const char* c : {".gz", ".zst"})
    if (ends_with(stem, c)) {
      stem.resize(stem.size() - std::char_traits<char>::length(c));
      break;
    }
  std::error_code ec;
  std::string path;
  for (const std::string& candidate : {snapshot + ".json", stem + ".json"})
    if (fs::is_regular_file(candidate, ec)) {
      path = candidate;
      break;
    }
  if (path.empty()) return out;
  const std::string snapshot_name = fs::path(stem).filename().string();
  try {
    if (fs::file_size(path, ec) > kMaxBytes || ec) throw BadSidecar{"larger than any sidecar (64 MiB)"};
    std::ifstream in(path, std::ios::binary);
    if (!in) throw BadSidecar{"cannot be read"};
    std::stringstream text;
    text << in.rdbuf();
    const json j = json::parse(text.str(), nullptr, false);
    if (j.is_discarded()) throw BadSidecar{"not valid JSON (cut or damaged)"};
    out.sidecar = parse(j, path, snapshot_name);
  } catch (const BadSidecar& bad) {
    out.problem = fmt::format("{}: not used: {}; the reports read the snapshot alone", path, bad.what);
  } catch (const std::exception& e) {  // nlohmann's type errors and allocation failures alike
    out.sidecar.reset();
    out.problem = fmt::format("{}: not used: {}; the reports read the snapshot alone", path, e.what());
  }
  return out;
}

}  // namespace vramtrace
