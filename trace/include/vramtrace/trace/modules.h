// The loaded modules of this process (the executable, shared objects, the vDSO), so that a
// native frame's return address can be written with the module it lies in: the reports turn
// (module, pc - load bias) into a function and a line on another machine (docs/trace-format.md,
// "module").
//
// Used by the trace writer's background thread only, when it writes a stack record for the first
// time; not thread-safe. A pc outside every known module makes the map read the loader's list
// again (dl_iterate_phdr), at most once per change of that list (dlopen or dlclose since the last
// read): a pc in no module at all (code generated at run time) costs one cheap check, not a walk
// of every module. A module unloaded between the event and the writing of its stack (within the
// flush interval) is not found; its frames are written without a module.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vramtrace::trace {

/// One loaded module as the `module` record describes it (schema.def).
struct ModuleInfo {
  std::uint32_t id = 0;     ///< dense from 1 in order of first use by a stack; 0 = not yet written
  std::string path;         ///< as the loader names it; the executable's from /proc/self/exe
  std::uint64_t bias = 0;   ///< load bias (dlpi_addr): link-time address = pc - bias
  std::uint64_t start = 0;  ///< first mapped byte of its loadable segments
  std::uint64_t size = 0;   ///< from `start` to the end of its last loadable segment
  std::string build_id;     ///< GNU build-id (NT_GNU_BUILD_ID of its loaded PT_NOTE), hex; "" if none
};

class ModuleMap {
 public:
  /// The module whose loadable segments span `pc`, reading the loader's list again when `pc` is
  /// outside every known module and the list changed since it was last read. Null when none.
  /// The pointer stays valid until the next call of find.
  ModuleInfo* find(std::uint64_t pc);
  /// Gives `m` (from find) the next id when it has none; true when it did, so that its record is
  /// due before the stack that uses it.
  bool assign_id(ModuleInfo& m) noexcept;
  /// Forgets every id (a fork child's file numbers its modules from 1 again).
  void reset_ids() noexcept;

 private:
  void read_loader_list();
  std::vector<ModuleInfo> modules_;               // sorted by start, non-overlapping
  std::uint64_t loads_seen_ = ~std::uint64_t{0};  // dlpi_adds + dlpi_subs at the last read
  std::uint32_t next_id_ = 1;
};

/// The hex GNU build-id of the module whose note segments are `notes` (address, size pairs in
/// memory), "" when none has one. Exposed for tests.
std::string read_build_id(const std::vector<std::pair<const unsigned char*, std::size_t>>& notes,
                          std::size_t alignment);

}  // namespace vramtrace::trace
