#include "render/parquet_export.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <filesystem>
#include <iterator>
#include <optional>
#include <unordered_map>

#include <fmt/format.h>

#include "analyses/oom/oom_report.h"
#include "analyses/sites.h"
#include "model/trace_model.h"
#include "readers/read_progress.h"

namespace vramtrace {
namespace {

// The tables' columns. events and segments keep the trace's fields as the format defines them
// (addresses, sizes and streams unsigned 64-bit: UBIGINT); the figures of sites, summaries and
// ooms are BIGINT, so that differences between ranks and jobs may be negative. job and rank come
// first in every table: PARTITION_BY moves them from the
// files into the folder names (job=.../rank=...), where Hive-partitioned readers find them.
constexpr const char* kSchema = R"sql(
CREATE TABLE events (job VARCHAR, rank BIGINT, pid BIGINT, device INTEGER, seq UBIGINT, t_ns BIGINT,
  action VARCHAR, address UBIGINT, bytes UBIGINT, block_bytes UBIGINT, stream UBIGINT, thread_id UINTEGER,
  kind UTINYINT, site VARCHAR, name VARCHAR);
CREATE TABLE segments (job VARCHAR, rank BIGINT, pid BIGINT, device INTEGER, seq UBIGINT, t_ns BIGINT,
  action VARCHAR, address UBIGINT, bytes UBIGINT, stream UBIGINT, kind UTINYINT, site VARCHAR);
CREATE TABLE sites (job VARCHAR, rank BIGINT, pid BIGINT, device INTEGER, state VARCHAR, seq UBIGINT,
  t_ns BIGINT, site VARCHAR, bytes BIGINT, blocks BIGINT);
CREATE TABLE summaries (job VARCHAR, rank BIGINT, pid BIGINT, host VARCHAR, local_rank VARCHAR, trace VARCHAR,
  format VARCHAR, device INTEGER, device_total_bytes BIGINT, events BIGINT, first_t_ns BIGINT,
  last_t_ns BIGINT, peak_allocated_bytes BIGINT, peak_allocated_t_ns BIGINT, peak_reserved_bytes BIGINT,
  peak_active_bytes BIGINT, peak_requested_bytes BIGINT, allocated_end_bytes BIGINT, reserved_end_bytes BIGINT,
  num_allocs BIGINT, num_ooms BIGINT, num_alloc_retries BIGINT, incomplete BOOLEAN, lost_events BIGINT);
CREATE TABLE ooms (job VARCHAR, rank BIGINT, pid BIGINT, device INTEGER, seq UBIGINT, t_ns BIGINT,
  request_bytes BIGINT, diagnosis VARCHAR, headline VARCHAR, allocated_bytes BIGINT, reserved_bytes BIGINT,
  device_free_bytes BIGINT, device_total_bytes BIGINT, largest_free_block_bytes BIGINT, attempts INTEGER,
  site VARCHAR);
)sql";

// A rank as a number: the header's rank when it is a decimal integer, else none (NULL).
std::optional<std::int64_t> rank_of(const TraceHeader& h) {
  std::int64_t v = 0;
  const char* b = h.rank.data();
  const char* e = b + h.rank.size();
  if (h.rank.empty()) return std::nullopt;
  const auto [p, ec] = std::from_chars(b, e, v);
  if (ec != std::errc() || p != e) return std::nullopt;
  return v;
}

// SQL string literal.
std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += '\'';
    out += c;
  }
  return out + "'";
}

// Figures in BIGINT columns: bytes and counts of one trace, far below 2^63.
std::int64_t figure(std::uint64_t v) { return static_cast<std::int64_t>(std::min<std::uint64_t>(v, INT64_MAX)); }

template <class T>
void opt_i64(DuckDb::Appender& a, const std::optional<T>& v) {
  if (v)
    a.i64(figure(static_cast<std::uint64_t>(*v)));
  else
    a.null();
}

void key(DuckDb::Appender& a, const std::string& job, const std::optional<std::int64_t>& rank, std::int64_t pid) {
  a.text(job);
  if (rank)
    a.i64(*rank);
  else
    a.null();
  a.i64(pid);
}

bool is_segment_action(Action a) {
  return a == Action::segment_alloc || a == Action::segment_free || a == Action::segment_map ||
         a == Action::segment_unmap;
}

void add_sites(DuckDb::Appender& a, const std::string& job, const std::optional<std::int64_t>& rank, std::int64_t pid,
               std::int32_t device, const char* state, const StateAt& at, const SitesAt& s, std::uint64_t& rows) {
  auto row = [&](std::string_view site, std::uint64_t bytes, std::uint64_t blocks) {
    key(a, job, rank, pid);
    a.i32(device).text(state).u64(at.event_index).i64(at.time_ns).text_or_null(site).i64(figure(bytes));
    a.i64(figure(blocks));
    a.end_row();
    ++rows;
  };
  for (const SiteBytes& b : s.all) row(b.label, b.bytes, b.blocks);
  // Blocks whose allocation recorded no stack: a row of their own, so that a state's bytes sum to
  // its allocated bytes.
  if (s.no_stack_bytes != 0 || s.no_stack_blocks != 0) row({}, s.no_stack_bytes, s.no_stack_blocks);
}

}  // namespace

ParquetJobWriter::ParquetJobWriter(DuckDb& db, std::string dir, std::string job, std::uint64_t flush_events)
    : db_(db), dir_(std::move(dir)), job_(std::move(job)), flush_events_(flush_events) {
  // Row order within a file is the trace's order; DuckDB may otherwise reorder for speed, and
  // the memory of a COPY stays bounded either way.
  db_.execute("SET preserve_insertion_order = true;");
  db_.execute(kSchema);
}

void ParquetJobWriter::add_trace(const std::string& path, TraceReader& reader) {
  const TraceHeader& h = reader.header();
  const std::optional<std::int64_t> rank = rank_of(h);
  const std::int64_t pid = h.pid;
  ModelOptions options;
  options.ledger = false;
  options.timeline_buckets = 64;  // the tables have every event; the timeline is not exported
  TraceModelBuilder builder(h, options);

  // Note [appender, not a text file]: rows go into DuckDB's tables through its appender, typed
  // as they are (UBIGINT addresses and sizes, BIGINT nanoseconds), and DuckDB's COPY writes the
  // Parquet files. A temporary CSV or JSON file of our own would be a second format to get right
  // (quoting of site labels, which hold commas, quotes and any other character; sizes of 2^64 - 1
  // that JSON readers turn into doubles; DuckDB's type sniffing of each column), twice the disk
  // traffic, and its own cleanup on every failure path.
  std::uint64_t events = 0, segments = 0;
  {
    DuckDb::Appender ev(db_, "events");
    DuckDb::Appender seg(db_, "segments");
    std::unordered_map<std::uint32_t, std::string> site_of_stack;
    auto site = [&](std::uint32_t stack) -> const std::string& {
      auto it = site_of_stack.find(stack);
      if (it != site_of_stack.end()) return it->second;
      auto table = reader.stacks();
      return site_of_stack.emplace(stack, table ? stack_site_label(*table, stack) : std::string()).first->second;
    };
    static const std::string none;
    TraceRecord r;
    std::uint64_t seq = 0;
    while (reader.next(r)) {
      const std::string_view mark =
          r.action == Action::mark ? std::string_view(reader.mark_name()) : std::string_view{};
      builder.add(r, mark);
      tick_read_progress(reader);
      const std::string& s = r.stack_id != 0 ? site(r.stack_id) : none;
      key(ev, job_, rank, pid);
      ev.i32(r.device).u64(seq).i64(r.time_ns).text(action_name(r.action)).u64(r.addr).u64(r.size);
      if (r.block_size != 0)
        ev.u64(r.block_size);
      else
        ev.null();
      ev.u64(r.stream);
      if (r.thread_id != 0)
        ev.u32(r.thread_id);
      else
        ev.null();
      ev.u8(r.memory_kind).text_or_null(s).text_or_null(mark);
      ev.end_row();
      ++events;
      if (is_segment_action(r.action)) {
        key(seg, job_, rank, pid);
        seg.i32(r.device).u64(seq).i64(r.time_ns).text(action_name(r.action)).u64(r.addr).u64(r.size);
        seg.u64(r.stream).u8(r.memory_kind).text_or_null(s);
        seg.end_row();
        ++segments;
      }
      ++seq;
    }
    ev.close();
    seg.close();
  }

  TraceModel m = builder.finish(reader);
  if (m.header.path.empty()) m.header.path = path;

  DuckDb::Appender sites(db_, "sites");
  const std::vector<DeviceSites> by_device = trace_sites(m);
  for (const DeviceSites& ds : by_device) {
    const DeviceModel* d = nullptr;
    for (const DeviceModel& dm : m.devices)
      if (dm.device == ds.device) d = &dm;
    if (!d) continue;
    if (d->at_peak.captured)
      add_sites(sites, job_, rank, pid, ds.device, "peak", d->at_peak, ds.at_peak, counts_.sites);
    for (std::size_t i = 0; i < ds.at_oom.size() && i < d->ooms.size(); ++i)
      if (d->ooms[i].fate == OomFate::oom && d->ooms[i].state.captured)
        add_sites(sites, job_, rank, pid, ds.device, "oom", d->ooms[i].state, ds.at_oom[i], counts_.sites);
    add_sites(sites, job_, rank, pid, ds.device, "end", d->at_end, ds.at_end, counts_.sites);
  }
  sites.close();

  DuckDb::Appender sum(db_, "summaries");
  for (const DeviceModel& d : m.devices) {
    key(sum, job_, rank, pid);
    sum.text(h.host).text(h.local_rank).text(path).text(h.format).i32(d.device);
    if (const std::uint64_t total = m.header.total_bytes_of(d.device); total != 0)
      sum.i64(figure(total));
    else
      sum.null();
    const auto& st = d.stats;
    sum.i64(figure(d.events)).i64(d.first_time_ns).i64(d.last_time_ns);
    sum.i64(st.allocated_bytes[kStatAll].peak).i64(d.at_peak.time_ns).i64(st.reserved_bytes[kStatAll].peak);
    sum.i64(st.active_bytes[kStatAll].peak).i64(st.requested_bytes[kStatAll].peak);
    sum.i64(st.allocated_bytes[kStatAll].current).i64(st.reserved_bytes[kStatAll].current);
    sum.i64(st.allocation[kStatAll].allocated).i64(figure(d.oom_count.ooms));
    opt_i64(sum, d.oom_count.retries);
    sum.boolean(m.incomplete).i64(figure(m.lost_events));
    sum.end_row();
    ++counts_.summaries;
  }
  sum.close();

  DuckDb::Appender oo(db_, "ooms");
  for (const OomCase& c : oom_cases(m)) {
    if (c.last_state) continue;  // the abrupt end of an incomplete trace: no OOM
    std::int64_t first = 0;
    for (const DeviceModel& d : m.devices)
      if (d.device == c.device) first = d.first_time_ns;
    key(oo, job_, rank, pid);
    oo.i32(c.device);
    if (c.without_entry) {
      oo.null().null();  // an OOM the trace records without its moment
    } else {
      oo.u64(c.event_index).i64(first + c.time_ns);
    }
    opt_i64(oo, c.figures.request);
    oo.text(diagnosis_code_name(c.diagnosis.code)).text(c.diagnosis.headline);
    opt_i64(oo, c.figures.allocated);
    opt_i64(oo, c.figures.reserved);
    opt_i64(oo, c.figures.device_free);
    opt_i64(oo, c.figures.device_total);
    opt_i64(oo, c.figures.largest_free_block);
    oo.i32(static_cast<std::int32_t>(std::min<std::uint32_t>(c.attempts, INT32_MAX)));
    oo.text_or_null(m.stacks ? stack_site_label(*m.stacks, c.request_stack) : std::string());
    oo.end_row();
    ++counts_.ooms;
  }
  oo.close();

  ++counts_.traces;
  if (!rank) ++counts_.traces_without_rank;
  counts_.events += events;
  counts_.segments += segments;
  buffered_events_ += events;
  if (buffered_events_ >= flush_events_) copy_out();
}

void ParquetJobWriter::copy_out() {
  // APPEND: each copy adds files of new names (a UUID each) to the partitions' folders, so a job
  // is written in pieces of bounded memory.
  for (const char* table : kParquetTables) {
    db_.execute(fmt::format("COPY {0} TO {1} (FORMAT PARQUET, PARTITION_BY (job, rank), APPEND); DELETE FROM {0};",
                            table, quoted(dir_ + "/" + table)));
  }
  buffered_events_ = 0;
}

void ParquetJobWriter::finish() {
  copy_out();
  // A table without rows still gets a file, of no rows, so that a query of it finds its columns
  // rather than "no files found": in the folder of rank NULL, which it adds no row to.
  const std::uint64_t rows[] = {counts_.events, counts_.segments, counts_.sites, counts_.summaries, counts_.ooms};
  for (std::size_t i = 0; i < std::size(kParquetTables); ++i) {
    if (rows[i] != 0) continue;
    const std::string folder =
        fmt::format("{}/{}/job={}/rank=__HIVE_DEFAULT_PARTITION__", dir_, kParquetTables[i], job_);
    std::error_code ec;
    std::filesystem::create_directories(folder, ec);
    if (ec) throw DuckDbError(fmt::format("cannot create {}: {}", folder, ec.message()));
    db_.execute(fmt::format("COPY (SELECT * EXCLUDE (job, rank) FROM {}) TO {} (FORMAT PARQUET);", kParquetTables[i],
                            quoted(folder + "/empty.parquet")));
  }
}

}  // namespace vramtrace
