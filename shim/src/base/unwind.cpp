// Native backtraces (Note [cached unwinding] in base/unwind.h).
#include "base/unwind.h"

#include <unwind.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "base/counters.h"
#include "base/log.h"

namespace vramtrace::shim {

namespace {

// --- the full walk: libgcc's unwinder ------------------------------------------------------

struct Walk {
  std::uint64_t* out;
  unsigned n;
  unsigned max;
  std::uintptr_t skip_lo;
  std::uintptr_t skip_hi;
};

_Unwind_Reason_Code on_frame(_Unwind_Context* context, void* arg) {
  auto* w = static_cast<Walk*>(arg);
  int exact = 0;
  std::uintptr_t pc = _Unwind_GetIPInfo(context, &exact);
  if (pc == 0) return _URC_END_OF_STACK;
  if (pc >= w->skip_lo && pc < w->skip_hi) return _URC_NO_REASON;  // the shim's own frame
  // A signal frame's pc is the interrupted instruction itself, every other one a return address.
  if (exact) ++pc;
  w->out[w->n++] = pc;
  return w->n >= w->max ? _URC_END_OF_STACK : _URC_NO_REASON;
}

unsigned full_backtrace(std::uint64_t* out, unsigned max, std::uintptr_t skip_lo, std::uintptr_t skip_hi) noexcept {
  Walk w{out, 0, max, skip_lo, skip_hi};
  _Unwind_Backtrace(on_frame, &w);
  return w.n;
}

#if defined(__x86_64__)

// --- rules: what a frame's CFA program says at one address ----------------------------------

// libgcc's FDE lookup (unwind-dw2-fde-dip.c), linked in with the static C++ runtime. `bases`
// receives the start of the function.
extern "C" {
struct dwarf_eh_bases {
  void* tbase;
  void* dbase;
  void* func;
};
const void* _Unwind_Find_FDE(void* pc, dwarf_eh_bases* bases);
}

constexpr unsigned kRbp = 6, kRsp = 7, kReturnAddress = 16;

// A rule packed into 64 bits (0 = not known yet):
//   bit 0 present, bit 1 use the full unwinder, bit 2 outermost frame (return address undefined),
//   bit 3 CFA from rbp (else rsp), bit 4 rbp saved, bits 8-31 CFA offset, bits 32-55 rbp offset
//   (both signed 24-bit).
using Rule = std::uint64_t;
constexpr Rule kPresent = 1, kFull = 2, kOutermost = 4, kCfaRbp = 8, kRbpSaved = 16;
constexpr std::int64_t kOffsetLimit = std::int64_t{1} << 23;

constexpr Rule full_rule() noexcept { return kPresent | kFull; }
std::int32_t cfa_offset(Rule r) noexcept {
  return static_cast<std::int32_t>(static_cast<std::uint32_t>(r) & 0xFFFFFF00u) >> 8;
}
std::int32_t rbp_offset(Rule r) noexcept {
  return static_cast<std::int32_t>(static_cast<std::uint32_t>(r >> 24) & 0xFFFFFF00u) >> 8;
}

// Readers of the CIE/FDE bytes. `end` bounds every read: a malformed entry gives the full walk.
struct Reader {
  const std::uint8_t* p;
  const std::uint8_t* end;
  bool bad = false;
  std::uint8_t u8() noexcept {
    if (p >= end) return bad = true, 0;
    return *p++;
  }
  std::uint64_t fixed(unsigned n) noexcept {
    if (static_cast<std::size_t>(end - p) < n) return bad = true, 0;
    std::uint64_t v = 0;
    std::memcpy(&v, p, n);
    p += n;
    return v;
  }
  std::uint64_t uleb() noexcept {
    std::uint64_t v = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
      const std::uint8_t b = u8();
      v |= std::uint64_t{b & 0x7fu} << shift;
      if ((b & 0x80) == 0 || bad) return v;
    }
    bad = true;
    return v;
  }
  std::int64_t sleb() noexcept {
    std::int64_t v = 0;
    unsigned shift = 0;
    std::uint8_t b = 0;
    do {
      b = u8();
      v |= static_cast<std::int64_t>(b & 0x7fu) << shift;
      shift += 7;
    } while ((b & 0x80) != 0 && shift < 64 && !bad);
    if (shift < 64 && (b & 0x40) != 0) v |= -(std::int64_t{1} << shift);
    return v;
  }
  // Skips a pointer of DWARF EH encoding `enc` (its application bits do not change its size).
  void skip_encoded(std::uint8_t enc) noexcept {
    if (enc == 0xff) return;  // DW_EH_PE_omit
    switch (enc & 0x0f) {
      case 0x00:  // absptr
      case 0x04:  // udata8
      case 0x0c:  // sdata8
        fixed(8);
        return;
      case 0x02:  // udata2
      case 0x0a:  // sdata2
        fixed(2);
        return;
      case 0x03:  // udata4
      case 0x0b:  // sdata4
        fixed(4);
        return;
      case 0x01:  // uleb128
        uleb();
        return;
      case 0x09:  // sleb128
        sleb();
        return;
      default:
        bad = true;
    }
  }
};

// The registers the walk needs, as a CFA program leaves them.
struct Row {
  unsigned cfa_reg = kRsp;
  std::int64_t cfa_offset = 8;
  bool cfa_ok = true;
  // per register: 0 unchanged, 1 saved at CFA + offset, 2 undefined, 3 anything else
  std::uint8_t how[2] = {0, 0};  // [0] rbp, [1] return address
  std::int64_t offset[2] = {0, 0};
};

int slot_of(std::uint64_t reg) noexcept { return reg == kRbp ? 0 : reg == kReturnAddress ? 1 : -1; }

// Runs CFA instructions [r.p, r.end) from `loc` while the location is at most `target`.
// Returns false for what the cache does not model (the walk then takes the full unwinder).
bool run_program(Reader r, std::uintptr_t loc, std::uintptr_t target, std::uint64_t code_align, std::int64_t data_align,
                 Row& row, const Row& initial) noexcept {
  Row stack[8];
  unsigned depth = 0;
  auto set = [&](std::uint64_t reg, std::uint8_t how, std::int64_t offset) {
    if (const int s = slot_of(reg); s >= 0) {
      row.how[s] = how;
      row.offset[s] = offset;
    }
  };
  while (r.p < r.end && loc <= target) {
    const std::uint8_t op = r.u8();
    const std::uint8_t low = op & 0x3f;
    switch (op & 0xc0) {
      case 0x40:  // DW_CFA_advance_loc
        loc += low * code_align;
        continue;
      case 0x80:  // DW_CFA_offset
        set(low, 1, static_cast<std::int64_t>(r.uleb()) * data_align);
        continue;
      case 0xc0:  // DW_CFA_restore
        if (const int s = slot_of(low); s >= 0) {
          row.how[s] = initial.how[s];
          row.offset[s] = initial.offset[s];
        }
        continue;
      default:
        break;
    }
    switch (op) {
      case 0x00:  // nop
        break;
      case 0x02:  // advance_loc1
        loc += r.fixed(1) * code_align;
        break;
      case 0x03:  // advance_loc2
        loc += r.fixed(2) * code_align;
        break;
      case 0x04:  // advance_loc4
        loc += r.fixed(4) * code_align;
        break;
      case 0x05: {  // offset_extended
        const std::uint64_t reg = r.uleb();
        set(reg, 1, static_cast<std::int64_t>(r.uleb()) * data_align);
        break;
      }
      case 0x06:  // restore_extended
        if (const int s = slot_of(r.uleb()); s >= 0) {
          row.how[s] = initial.how[s];
          row.offset[s] = initial.offset[s];
        }
        break;
      case 0x07:  // undefined
        set(r.uleb(), 2, 0);
        break;
      case 0x08:  // same_value
        set(r.uleb(), 0, 0);
        break;
      case 0x09: {  // register
        const std::uint64_t reg = r.uleb();
        r.uleb();
        set(reg, 3, 0);
        break;
      }
      case 0x0a:  // remember_state
        if (depth == 8) return false;
        stack[depth++] = row;
        break;
      case 0x0b: {  // restore_state (the CFA is restored too, as libgcc does)
        if (depth == 0) return false;
        row = stack[--depth];
        break;
      }
      case 0x0c:  // def_cfa
        row.cfa_reg = static_cast<unsigned>(r.uleb());
        row.cfa_offset = static_cast<std::int64_t>(r.uleb());
        row.cfa_ok = true;
        break;
      case 0x0d:  // def_cfa_register
        row.cfa_reg = static_cast<unsigned>(r.uleb());
        break;
      case 0x0e:  // def_cfa_offset
        row.cfa_offset = static_cast<std::int64_t>(r.uleb());
        break;
      case 0x0f: {  // def_cfa_expression
        const std::uint64_t n = r.uleb();
        if (n > static_cast<std::uint64_t>(r.end - r.p)) return false;
        r.p += n;
        row.cfa_ok = false;
        break;
      }
      case 0x10:    // expression
      case 0x16: {  // val_expression
        const std::uint64_t reg = r.uleb();
        const std::uint64_t n = r.uleb();
        if (n > static_cast<std::uint64_t>(r.end - r.p)) return false;
        r.p += n;
        set(reg, 3, 0);
        break;
      }
      case 0x11: {  // offset_extended_sf
        const std::uint64_t reg = r.uleb();
        set(reg, 1, r.sleb() * data_align);
        break;
      }
      case 0x12:  // def_cfa_sf
        row.cfa_reg = static_cast<unsigned>(r.uleb());
        row.cfa_offset = r.sleb() * data_align;
        row.cfa_ok = true;
        break;
      case 0x13:  // def_cfa_offset_sf
        row.cfa_offset = r.sleb() * data_align;
        break;
      case 0x14:    // val_offset
      case 0x15: {  // val_offset_sf
        const std::uint64_t reg = r.uleb();
        if (op == 0x14)
          r.uleb();
        else
          r.sleb();
        set(reg, 3, 0);
        break;
      }
      case 0x2e:  // GNU_args_size
        r.uleb();
        break;
      case 0x2f: {  // GNU_negative_offset_extended
        const std::uint64_t reg = r.uleb();
        set(reg, 1, -static_cast<std::int64_t>(r.uleb()) * data_align);
        break;
      }
      default:  // set_loc and anything newer: not modelled
        return false;
    }
    if (r.bad) return false;
  }
  return !r.bad;
}

// The rule at `address` (a return address minus one, or the walk's first instruction).
Rule compute_rule(std::uintptr_t address) noexcept {
  dwarf_eh_bases bases{};
  const auto* fde = static_cast<const std::uint8_t*>(_Unwind_Find_FDE(reinterpret_cast<void*>(address), &bases));
  if (fde == nullptr) return full_rule();  // libgcc may still know it (a signal trampoline)
  std::uint32_t length = 0;
  std::memcpy(&length, fde, 4);
  if (length == 0 || length == 0xffffffffu) return full_rule();
  Reader f{fde + 4, fde + 4 + length};
  const std::uint8_t* cie_pointer_at = f.p;
  const auto cie_offset = static_cast<std::uint32_t>(f.fixed(4));
  const std::uint8_t* cie = cie_pointer_at - cie_offset;
  std::uint32_t cie_length = 0;
  std::memcpy(&cie_length, cie, 4);
  if (cie_length == 0 || cie_length == 0xffffffffu) return full_rule();
  Reader c{cie + 4, cie + 4 + cie_length};
  if (c.fixed(4) != 0) return full_rule();  // not a CIE
  const std::uint8_t version = c.u8();
  if (version != 1 && version != 3) return full_rule();
  const char* augmentation = reinterpret_cast<const char*>(c.p);
  const std::size_t aug_length = strnlen(augmentation, static_cast<std::size_t>(c.end - c.p));
  c.p += aug_length + 1;
  if (c.p > c.end || std::strstr(augmentation, "eh") != nullptr) return full_rule();
  const std::uint64_t code_align = c.uleb();
  const std::int64_t data_align = c.sleb();
  const std::uint64_t ra = version == 1 ? c.u8() : c.uleb();
  if (ra != kReturnAddress || c.bad) return full_rule();
  std::uint8_t fde_encoding = 0;  // absptr
  const bool z = augmentation[0] == 'z';
  if (z) {
    const std::uint64_t n = c.uleb();
    if (c.bad || n > static_cast<std::uint64_t>(c.end - c.p)) return full_rule();
    Reader a{c.p, c.p + n};
    for (const char* l = augmentation + 1; *l != '\0'; ++l) {
      if (*l == 'R') {
        fde_encoding = a.u8();
      } else if (*l == 'L') {
        a.u8();
      } else if (*l == 'P') {
        const std::uint8_t enc = a.u8();
        if ((enc & 0x70) == 0x50) return full_rule();  // aligned: not worth it
        a.skip_encoded(enc);
      } else {
        return full_rule();  // 'S' (a signal frame), 'B', ...: the full unwinder
      }
    }
    if (a.bad) return full_rule();
    c.p += n;
  } else if (augmentation[0] != '\0') {
    return full_rule();
  }
  // The FDE: the function's start (bases.func), its range, augmentation data, instructions.
  f.skip_encoded(fde_encoding);
  f.skip_encoded(fde_encoding & 0x0f);
  if (z) {
    const std::uint64_t n = f.uleb();
    if (f.bad || n > static_cast<std::uint64_t>(f.end - f.p)) return full_rule();
    f.p += n;
  }
  if (f.bad || bases.func == nullptr) return full_rule();
  const auto start = reinterpret_cast<std::uintptr_t>(bases.func);
  Row row;
  const Row blank;
  if (!run_program(c, start, address, code_align, data_align, row, blank)) return full_rule();
  const Row initial = row;
  if (!run_program(f, start, address, code_align, data_align, row, initial)) return full_rule();
  if (!row.cfa_ok || (row.cfa_reg != kRsp && row.cfa_reg != kRbp)) return full_rule();
  Rule rule = kPresent;
  if (row.how[1] == 2) {
    rule |= kOutermost;
  } else if (row.how[1] != 1 || row.offset[1] != -8) {
    return full_rule();  // the return address elsewhere than at CFA - 8
  }
  if (row.how[0] == 1)
    rule |= kRbpSaved;
  else if (row.how[0] == 3)
    return full_rule();
  if (row.cfa_reg == kRbp) rule |= kCfaRbp;
  if (row.cfa_offset <= 0 || row.cfa_offset >= kOffsetLimit || row.offset[0] <= -kOffsetLimit ||
      row.offset[0] >= kOffsetLimit)
    return full_rule();
  rule |= (static_cast<Rule>(row.cfa_offset) & 0xFFFFFF) << 8;
  rule |= (static_cast<Rule>(row.offset[0]) & 0xFFFFFF) << 32;
  return rule;
}

// --- the cache: address -> rule, lock-free --------------------------------------------------
// A slot is claimed by compare-and-swap of its key from 0, its rule written, then its key
// published (release); a reader that sees the key sees the rule. Slots are never reused: a full
// table only stops caching.
constexpr std::uint32_t kSlots = std::uint32_t{1} << 15;
constexpr std::uint64_t kClaimed = 1;  // never an address
struct Slot {
  std::uint64_t key;
  Rule rule;
};
std::atomic<Slot*> g_slots{nullptr};
std::atomic<bool> g_cache_off{false};

Slot* slots() noexcept {
  Slot* s = g_slots.load(std::memory_order_acquire);
  if (s) return s;
  auto* fresh = static_cast<Slot*>(std::calloc(kSlots, sizeof(Slot)));
  if (!fresh) return nullptr;
  Slot* expected = nullptr;
  if (g_slots.compare_exchange_strong(expected, fresh, std::memory_order_acq_rel)) return fresh;
  std::free(fresh);
  return expected;
}

std::uint32_t home(std::uint64_t address) noexcept {
  return static_cast<std::uint32_t>((address * 0x9E3779B97F4A7C15ull) >> 49) & (kSlots - 1);
}

Rule rule_for(Slot* table, std::uintptr_t address) noexcept {
  const std::uint32_t h = home(address);
  for (std::uint32_t i = 0; i < 8; ++i) {
    Slot& s = table[(h + i) & (kSlots - 1)];
    const std::uint64_t key = std::atomic_ref<std::uint64_t>(s.key).load(std::memory_order_acquire);
    if (key == address) return std::atomic_ref<Rule>(s.rule).load(std::memory_order_relaxed);
    if (key == 0) break;
  }
  const Rule rule = compute_rule(address);
  for (std::uint32_t i = 0; i < 8; ++i) {
    Slot& s = table[(h + i) & (kSlots - 1)];
    std::uint64_t key = 0;
    if (std::atomic_ref<std::uint64_t>(s.key).compare_exchange_strong(key, kClaimed, std::memory_order_acquire)) {
      std::atomic_ref<Rule>(s.rule).store(rule, std::memory_order_relaxed);
      std::atomic_ref<std::uint64_t>(s.key).store(address, std::memory_order_release);
      break;
    }
    if (key == address) break;
  }
  return rule;
}

// The walk with cached rules; false when a frame needs the full unwinder.
__attribute__((noinline)) bool cached_backtrace(std::uint64_t* out, unsigned max, std::uintptr_t skip_lo,
                                                std::uintptr_t skip_hi, unsigned* count) noexcept {
  Slot* table = slots();
  if (!table) return false;
  std::uintptr_t rip, rsp, rbp;
  // This function's own frame first: the instruction after the lea, with rsp and rbp as they
  // are there (one asm statement, so that nothing moves between the three).
  __asm__ volatile("leaq 0(%%rip), %0\n\tmovq %%rsp, %1\n\tmovq %%rbp, %2" : "=r"(rip), "=r"(rsp), "=r"(rbp));
  bool first = true;
  unsigned n = 0;
  for (unsigned frames = 0; frames < 4096; ++frames) {
    const Rule rule = rule_for(table, first ? rip : rip - 1);
    if ((rule & kFull) != 0) return false;
    if (rip < skip_lo || rip >= skip_hi) {
      out[n++] = rip;
      if (n >= max) break;
    }
    if ((rule & kOutermost) != 0) break;
    const std::uintptr_t cfa = ((rule & kCfaRbp) != 0 ? rbp : rsp) + static_cast<std::intptr_t>(cfa_offset(rule));
    if (cfa <= rsp || (cfa & 7) != 0) return false;  // not a frame of this stack: let libgcc judge
    const std::uintptr_t next = *reinterpret_cast<const std::uintptr_t*>(cfa - 8);
    if ((rule & kRbpSaved) != 0) rbp = *reinterpret_cast<const std::uintptr_t*>(cfa + rbp_offset(rule));
    rsp = cfa;
    rip = next;
    first = false;
    if (rip == 0) break;
  }
  *count = n;
  return true;
}

// Note [cached unwinding]: how many captures are taken both ways at the start of a process.
constexpr std::uint64_t kCheckedCaptures = 32;
std::atomic<std::uint64_t> g_captures{0};
std::atomic<int> g_check_all{-1};  // VRAMTRACE_TEST_UNWIND_CHECK, read once

bool check_this_one() noexcept {
  int all = g_check_all.load(std::memory_order_relaxed);
  if (all < 0) {
    const char* v = std::getenv("VRAMTRACE_TEST_UNWIND_CHECK");
    all = v && v[0] == '1' ? 1 : 0;
    g_check_all.store(all, std::memory_order_relaxed);
  }
  return all == 1 || g_captures.fetch_add(1, std::memory_order_relaxed) < kCheckedCaptures;
}

#endif  // __x86_64__

}  // namespace

unsigned native_backtrace(std::uint64_t* out, unsigned max, std::uintptr_t skip_lo, std::uintptr_t skip_hi) noexcept {
#if defined(__x86_64__)
  if (!g_cache_off.load(std::memory_order_relaxed)) {
    unsigned n = 0;
    if (cached_backtrace(out, max, skip_lo, skip_hi, &n)) {
      if (check_this_one()) {
        std::uint64_t full[256];
        const unsigned m = full_backtrace(full, max < 256 ? max : 256, skip_lo, skip_hi);
        if (m != n || std::memcmp(full, out, n * sizeof(std::uint64_t)) != 0) {
          bump(g_counters.unwind_mismatches);
          if (!g_cache_off.exchange(true))
            log_line(LogLevel::debug,
                     "the cached unwinder disagreed with libgcc's ({} frames against {}): every stack takes "
                     "libgcc's from now on",
                     n, m);
          std::memcpy(out, full, m * sizeof(std::uint64_t));
          bump(g_counters.unwind_full);
          return m;
        }
      }
      bump(g_counters.unwind_cached);
      return n;
    }
  }
#endif
  bump(g_counters.unwind_full);
  return full_backtrace(out, max, skip_lo, skip_hi);
}

}  // namespace vramtrace::shim
