// Names of common GPUs, for every option that takes a size (`run --limit T4`, `replay --capacity
// A100-80GB`, ...), mapped to the memory a CUDA program sees on them: PyTorch's
// torch.cuda.get_device_properties(i).total_memory, which is the CUDA runtime's
// cudaDeviceProp::totalGlobalMem and the "total capacity" of PyTorch's OOM message. It is less than
// the marketed size (ECC and the driver's reserved memory are already taken out). The CUDA
// context of the program is NOT taken out: on the real card it comes out of this figure, under
// the shim it does not (see docs/configuration.md "Memory cap").
//
// Each figure is the total PyTorch reported on that card in a public report or log, in bytes
// where the report gave bytes (deviceQuery's "Total amount of global memory", a trace header),
// else from the MiB of `_CudaDeviceProperties(..., total_memory=NMB)` or the two-decimal GiB of
// the OOM message (within 5 MiB of the card's real total). The same card reports slightly
// different totals on other drivers and ECC settings (a T4 prints 14.56 to 14.76 GiB); pass a
// size for an exact one. docs/configuration.md, "Card names", lists each figure's source and the
// range seen.
#pragma once

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace vramtrace::cli {

struct GpuCard {
  const char* name;     ///< what a size option accepts (case-insensitive; '-', '_' and ' ' ignored)
  std::uint64_t bytes;  ///< total_memory as PyTorch reports it on the card
  const char* printed;  ///< that total as PyTorch's OOM message printed it in the source ("14.58 GiB")
  const char* source;   ///< where the figure was seen
};

/// The table. Docs: docs/configuration.md, "Card names" (keep the two in step); tests check that
/// `bytes` prints as `printed` in PyTorch's format.
inline constexpr GpuCard kGpuCards[] = {
    {"T4", 14930ull << 20, "14.58 GiB", "Tesla T4, driver 535 (mbzuai-oryx/GeoPixel#5)"},
    {"V100-16GB", 16945512448ull, "15.78 GiB", "Tesla V100-SXM2-16GB (kchengiva/Shift-GCN#34; deviceQuery bytes)"},
    {"V100-32GB", 32501ull << 20, "31.74 GiB", "Tesla V100 32 GB (haotian-liu/LLaVA#812, QwenAudio/SenseVoice#28)"},
    {"A10", 23609475072ull, "21.99 GiB", "NVIDIA A10, driver 535 (deviceQuery bytes in aalanwyr/face2cuda)"},
    {"A10G", 22587ull << 20, "22.06 GiB", "NVIDIA A10G, AWS g5 (_CudaDeviceProperties total_memory=22587MB)"},
    {"L4", 22558ull << 20, "22.03 GiB", "NVIDIA L4 (ArcInstitute/evo2#190)"},
    {"A100-40GB", 42405855232ull, "39.49 GiB", "NVIDIA A100 40GB SXM4 (deviceQuery bytes, Paderborn PC2 wiki)"},
    {"A100-80GB", 81152ull << 20, "79.25 GiB", "A100 80 GB (levihsu/OOTDiffusion#235, HiDream-ai/VAREdit#6)"},
    {"H100-80GB", 81082ull << 20, "79.18 GiB", "NVIDIA H100 80GB HBM3 (SXM), driver 580 (docs/benchmarks.md)"},
    {"H100-NVL", 95232ull << 20, "93.00 GiB", "H100 NVL 94 GB (ali-vilab/VACE#56)"},
    {"L40", 45465ull << 20, "44.40 GiB", "NVIDIA L40 (NVlabs/Eagle#68)"},
    {"RTX3090", 24268ull << 20, "23.70 GiB", "GeForce RTX 3090 24 GB (GaoLii/DSP#10; total_memory=24268MB)"},
    {"RTX4090", 24207ull << 20, "23.64 GiB", "GeForce RTX 4090 (3DTopia/Phidias-Diffusion#8)"},
    {"RTX5090", 32122ull << 20, "31.37 GiB", "GeForce RTX 5090 (Wan-Video/Wan2.1#465)"},
    {"H200", 150109880320ull, "139.80 GiB", "NVIDIA H200, driver 580 (tests/data/torch-h200 trace headers)"},
};

/// Lower-case, without '-', '_', ' ': "a100-80gb" == "A100_80GB" == "A100 80GB".
inline std::string gpu_card_key(std::string_view s) {
  std::string k;
  for (char c : s)
    if (c != '-' && c != '_' && c != ' ') k.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  return k;
}

/// Other spellings of one card, as keys: the names NVIDIA and PyTorch print ("Tesla T4",
/// "GeForce RTX 3090") and the marketed size ("T4-16GB"). A name that fits two cards ("V100",
/// "A100", "H100") is none of them: it is refused with both (gpu_card_suggestions).
inline constexpr struct {
  std::string_view key;
  std::string_view card;
} kGpuCardAliases[] = {
    {"t416gb", "T4"},
    {"teslat4", "T4"},
    {"teslav10016gb", "V100-16GB"},
    {"teslav10032gb", "V100-32GB"},
    {"geforcertx3090", "RTX3090"},
    {"geforcertx4090", "RTX4090"},
    {"geforcertx5090", "RTX5090"},
    // torch.cuda.get_device_name() and nvidia-smi, "NVIDIA " dropped (find_gpu_card).
    {"h10080gbhbm3", "H100-80GB"},
    {"h100sxm580gb", "H100-80GB"},
    {"h100nvl", "H100-NVL"},
    {"a100sxm440gb", "A100-40GB"},
    {"a100pcie40gb", "A100-40GB"},
    {"a100sxm480gb", "A100-80GB"},
    {"a10080gbpcie", "A100-80GB"},
    {"l40", "L40"},
};

/// The card `name` stands for (its name or an alias), or nullptr.
inline const GpuCard* find_gpu_card(std::string_view name) {
  std::string k = gpu_card_key(name);
  // The vendor's name before the card's, as PyTorch and nvidia-smi print it ("NVIDIA H200").
  if (k.size() > 6 && k.compare(0, 6, "nvidia") == 0) k.erase(0, 6);
  for (const auto& a : kGpuCardAliases)
    if (a.key == k) k = gpu_card_key(a.card);
  for (const GpuCard& c : kGpuCards)
    if (gpu_card_key(c.name) == k) return &c;
  return nullptr;
}

/// Bytes for a card name, 0 if unknown ("T4-16GB" and "T4" name the same card).
inline std::uint64_t gpu_card_bytes(std::string_view name) {
  const GpuCard* c = find_gpu_card(name);
  return c != nullptr ? c->bytes : 0;
}

/// "T4, V100-16GB, ..." for error messages.
inline std::string gpu_card_names() {
  std::string s;
  for (const GpuCard& c : kGpuCards) {
    if (!s.empty()) s += ", ";
    s += c.name;
  }
  return s;
}

namespace detail {
// Levenshtein distance (insert, delete, substitute: 1 each).
inline std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}
}  // namespace detail

/// The cards an unknown name may have meant, in table order: every card whose name begins with
/// it ("H100": H100-80GB and H100-NVL; "A100", "V100", "RTX" likewise), else the card whose name
/// it begins with ("A100-80GB-PCIe": A100-80GB), else the nearest by edit distance when that is
/// at most a third of the name's length, at least 1 ("T5", "A100-40G", "RTX4080": every card at
/// that distance). Empty for a known name and for one far from every card ("lots"). Names are
/// compared as gpu_card_key writes them. Thread-safe (pure).
inline std::vector<std::string> gpu_card_suggestions(std::string_view name) {
  const std::string k = gpu_card_key(name);
  std::vector<std::string> out;
  if (k.empty() || find_gpu_card(name) != nullptr) return out;
  for (const GpuCard& c : kGpuCards)
    if (gpu_card_key(c.name).rfind(k, 0) == 0) out.emplace_back(c.name);
  if (!out.empty()) return out;
  std::size_t longest = 0;
  for (const GpuCard& c : kGpuCards) {
    const std::string ck = gpu_card_key(c.name);
    if (ck.size() > longest && k.rfind(ck, 0) == 0) {
      longest = ck.size();
      out.assign(1, c.name);
    }
  }
  if (!out.empty()) return out;
  std::size_t best = std::max<std::size_t>(1, k.size() / 3);
  for (const GpuCard& c : kGpuCards) {
    const std::size_t d = detail::edit_distance(k, gpu_card_key(c.name));
    if (d < best) out.clear();
    if (d <= best) {
      best = d;
      out.emplace_back(c.name);
    }
  }
  return out;
}

}  // namespace vramtrace::cli
