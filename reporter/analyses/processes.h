// Several traces of one job (one per process: DDP, torchrun, mpirun), merged into the process x
// device view: who holds how much on which device, how unevenly the devices are loaded, and which
// process holds memory on a device other than its own (a frequent cause of OOMs on device 0:
// case C10 of docs/cases.md). Used by `summary`, `report` and `oom` when given several
// traces; docs/reports.md, "Several processes and devices", states the rules.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "model/trace_model.h"

namespace vramtrace {

/// One traced process (one trace file).
struct ProcessInfo {
  std::string label;  ///< "rank 1", "pid 4711", or the file name; unique within the view
  std::string path;
  std::int64_t pid = 0;                ///< 0 = unknown
  std::string host, rank, local_rank;  ///< "" = unknown
  /// The process's own device (a key of ProcessDeviceView::devices), when known, and the rule
  /// that gave it: "CUDA_VISIBLE_DEVICES", "LOCAL_RANK", "RANK", "most memory".
  std::optional<std::int32_t> own_device;
  std::string own_device_rule;
  /// Devices other than its own where it held memory (peak reserved or allocated > 0).
  std::vector<std::int32_t> foreign_devices;
};

/// One process on one device: PyTorch's peaks, in bytes.
struct ProcessDeviceCell {
  std::size_t process = 0;          ///< index into ProcessDeviceView::processes
  std::int32_t device = 0;          ///< device key (ProcessDeviceView::devices)
  std::int32_t ordinal = 0;         ///< the device ordinal as the process saw it (its trace's device)
  std::int64_t peak_allocated = 0;  ///< allocated_bytes.all.peak
  std::int64_t peak_reserved = 0;   ///< reserved_bytes.all.peak
  std::int64_t end_reserved = 0;    ///< reserved_bytes.all.current at the end of the trace
  /// The process's memory ledger at its end on this device (model/ledger.h), when its trace has
  /// one: PyTorch reserved, outside PyTorch's allocator, the context's share and the rest, and the
  /// device's used memory as the process read it (other processes' memory included). Unknown
  /// rows are unset.
  struct LedgerEnd {
    std::int64_t reserved = 0;
    std::optional<std::int64_t> outside, context, rest, used;
  };
  std::optional<LedgerEnd> ledger_end;
  /// The process initialised CUDA on this device without PyTorch memory there (its ledger names
  /// the device: a CUDA context at least, perhaps memory outside PyTorch's allocator).
  bool context_only = false;
};

/// One device over all processes.
struct DeviceLoad {
  std::int32_t device = 0;
  std::string label;  ///< "device 0", or "HOST device 0" when the traces come from several hosts
  /// Sums over the processes of each one's own peak: the most the device can have held at once
  /// (the processes' peaks need not coincide).
  std::int64_t peak_allocated_sum = 0;
  std::int64_t peak_reserved_sum = 0;
  std::size_t processes = 0;  ///< processes holding memory on it
};

/// The merged view of several traces.
struct ProcessDeviceView {
  std::vector<ProcessInfo> processes;    ///< in the order of the traces
  std::vector<DeviceLoad> devices;       ///< sorted by key
  std::vector<ProcessDeviceCell> cells;  ///< only (process, device) pairs with a trace record
  /// Imbalance of peak_reserved_sum over the devices holding memory: max / min (1.0 when even);
  /// absent with fewer than two such devices.
  std::optional<double> imbalance;
  std::int32_t most_loaded = 0, least_loaded = 0;  ///< device keys
  bool others_equal = false;                       ///< every device but the most loaded holds the same (to 1%)
  /// Devices whose processes ran one after another (their traces' times on it do not overlap; a
  /// note says so): their sums were never held, so no imbalance is computed when there are any.
  std::vector<std::int32_t> apart_devices;
  std::vector<std::string> notes;
};

/// Builds the view. Device keys: the ordinal each process used, mapped through the process's
/// CUDA_VISIBLE_DEVICES when it recorded one made of integers (so that two processes that each
/// see one GPU as device 0 are told apart), plus 1000 x the host's index when the traces come
/// from several hosts. Own device, first rule that applies:
///  1. CUDA_VISIBLE_DEVICES names exactly one device: that one;
///  2. LOCAL_RANK (or OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID) is known: the
///     device with that ordinal;
///  3. the launcher's rank is known and every trace comes from the same host: that ordinal;
///  4. otherwise the device where the process held the most (peak reserved; ties: lowest key).
/// Pure; deterministic.
ProcessDeviceView process_device_view(const std::vector<TraceModel>& models);

/// The text section ("Processes x devices", the imbalance line, the flags, and when a process has
/// both levels the table of its memory ledger at the end). Ends with a newline.
std::string render_process_device_text(const ProcessDeviceView& view);

/// JSON: {"processes": [{"label", "path", "pid", "host", "rank", "local_rank", "own_device",
/// "own_device_rule", "foreign_devices", "cross_device"}], "devices": [{"device", "label",
/// "allocated_bytes.all.peak" (sum), "reserved_bytes.all.peak" (sum), "processes"}],
/// "cells": [{"process", "device", "allocated_bytes.all.peak", "reserved_bytes.all.peak",
/// "reserved_bytes.all.current", "context_only", and with a ledger "ledger_end": {"reserved_bytes",
/// "outside_bytes", "context_bytes", "rest_bytes", "used_bytes"}}], "imbalance": {"ratio",
/// "most_loaded", "least_loaded", "others_equal"} | null, "cross_device": [labels], "notes"}.
nlohmann::json process_device_json(const ProcessDeviceView& view);

/// The view's imbalance as process_device_json writes it: {"ratio", "most_loaded",
/// "least_loaded", "others_equal"}, or null without one. Pure.
nlohmann::json imbalance_json(const ProcessDeviceView& view);

/// For the HTML report: per device, a common time axis (ms since the earliest event of any
/// trace) and per process its reserved and allocated bytes (the maximum over each interval of
/// the axis, from the processes' timelines), for stacked bands. At most `max_points` points plus
/// each process's first and last moment, which are always points (a process that has ended holds
/// nothing).
nlohmann::json process_device_timelines_json(const std::vector<TraceModel>& models, const ProcessDeviceView& view,
                                             std::size_t max_points = 1500);

}  // namespace vramtrace
