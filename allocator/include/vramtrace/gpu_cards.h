// Names of common GPUs for `vramtrace run --limit NAME`, mapped to the memory a CUDA program sees
// on them: the total of cudaMemGetInfo / cudaGetDeviceProperties().totalGlobalMem, i.e. the
// "total capacity" of PyTorch's OOM message, which is less than the marketed size (ECC and the
// driver's reserved memory are already taken out). The CUDA context of the program is NOT taken
// out: on the real card it comes out of this figure, under the shim it does not (see
// docs/configuration.md "Memory cap", which lists where each figure comes from).
//
// Each figure is the two-decimal GiB value PyTorch printed on that card in a public OOM report,
// converted to bytes (rounded down to a 2 MiB multiple, the granularity of device allocations),
// so it is within 5 MiB of the card's real total. The same card can print slightly different
// totals on other drivers (a T4 shows 14.56 to 14.76 GiB); pass a size to --limit for an exact one.
#pragma once

#include <cctype>
#include <cstdint>
#include <string>
#include <string_view>

namespace vramtrace::cli {

struct GpuCard {
  const char* name;    ///< what --limit accepts (case-insensitive; '-', '_' and ' ' ignored)
  double gib;          ///< "total capacity" printed by PyTorch, GiB
  const char* source;  ///< where the figure was seen
};

/// The table. Docs: docs/configuration.md, "Card names for --limit" (keep the two in step).
inline constexpr GpuCard kGpuCards[] = {
    {"T4", 14.58, "Tesla T4, driver 535 (mbzuai-oryx/GeoPixel#5); 14.56-14.76 on others"},
    {"V100-16GB", 15.78, "Tesla V100 16 GB (kchengiva/Shift-GCN#34)"},
    {"V100-32GB", 31.74, "Tesla V100 32 GB (haotian-liu/LLaVA#812)"},
    {"A10", 21.99, "A10 24 GB (zai-org/CogVLM#236)"},
    {"A10G", 21.99, "same 24 GB GDDR6 part as the A10 (AWS g5); no A10G-specific figure found"},
    {"L4", 22.03, "L4 (ArcInstitute/evo2#190)"},
    {"A100-40GB", 39.50, "A100 40 GB (TianheWu/CoSeR#10)"},
    {"A100-80GB", 79.25, "A100 80 GB (levihsu/OOTDiffusion#235, HiDream-ai/VAREdit#6)"},
    {"H100-80GB", 79.11, "H100 80 GB (vllm-project/vllm#27508)"},
    {"H100-NVL", 93.00, "H100 NVL 94 GB (ali-vilab/VACE#56)"},
    {"L40", 44.40, "L40 (NVlabs/Eagle#68)"},
    {"RTX3090", 23.70, "GeForce RTX 3090 24 GB (GaoLii/DSP#10, xiaoxiangAQ/GAS-Net#7)"},
    {"RTX4090", 23.64, "GeForce RTX 4090 (3DTopia/Phidias-Diffusion#8); 23.68 in zai-org/CogVideo#36"},
    {"RTX5090", 31.37, "GeForce RTX 5090 (Wan-Video/Wan2.1#465)"},
    {"H200", 140.40, "H200 141 GB: 143771 MiB measured on our GPU machine (docs/h200.md)"},
};

/// Lower-case, without '-', '_', ' ': "a100-80gb" == "A100_80GB" == "A100 80GB".
inline std::string gpu_card_key(std::string_view s) {
  std::string k;
  for (char c : s)
    if (c != '-' && c != '_' && c != ' ') k.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  return k;
}

/// Bytes for a card name, 0 if unknown. "T4-16GB" and "T4" name the same card; so do "V100"
/// and "V100-16GB" (the 16 GB part is the original V100).
inline std::uint64_t gpu_card_bytes(std::string_view name) {
  std::string k = gpu_card_key(name);
  if (k == "t416gb" || k == "teslat4") k = "t4";
  if (k == "v100" || k == "teslav100") k = "v10016gb";
  if (k == "rtx3090" || k == "3090" || k == "geforcertx3090") k = "rtx3090";
  if (k == "4090" || k == "geforcertx4090") k = "rtx4090";
  for (const GpuCard& c : kGpuCards) {
    if (gpu_card_key(c.name) != k) continue;
    const std::uint64_t bytes = static_cast<std::uint64_t>(c.gib * 1073741824.0);
    return bytes / (2ull << 20) * (2ull << 20);
  }
  return 0;
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

}  // namespace vramtrace::cli
