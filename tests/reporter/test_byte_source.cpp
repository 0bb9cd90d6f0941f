// LineSource / ByteSource: plain, gzip and zstd input, line splitting, truncation, errors.
#include <catch2/catch.hpp>

#include <vector>

#include "readers/open_trace.h"
#include "test_util.h"
#include "vramtrace/trace/byte_source.h"

using namespace vramtrace;
using vramtrace::test::write_file;

namespace {

std::vector<std::string> all_lines(const std::string& path, LineSource** keep = nullptr) {
  auto src = LineSource::open(path);
  std::vector<std::string> out;
  std::string_view line;
  while (src->next_line(line)) out.emplace_back(line);
  return out;
}

std::string numbered_lines(int n) {
  std::string s;
  for (int i = 0; i < n; ++i)
    s += "line " + std::to_string(i) + " " + std::string(static_cast<std::size_t>(i % 97), 'x') + "\n";
  return s;
}

}  // namespace

TEST_CASE("LineSource reads the same lines from plain, gzip and zstd files", "[byte_source]") {
  std::string text = numbered_lines(50000);  // several MiB: crosses buffer boundaries
  auto expected = all_lines(write_file("plain.txt", text));
  REQUIRE(expected.size() == 50000);
  CHECK(expected[12345] == "line 12345 " + std::string(12345 % 97, 'x'));
  for (const auto& [name, bytes, comp] : {std::tuple{"a.gz", test::gzip(text), Compression::gzip},
                                          std::tuple{"a.zst", test::zstd(text), Compression::zstd}}) {
    auto path = write_file(name, bytes);
    auto src = LineSource::open(path);
    CHECK(src->compression() == comp);
    std::string_view line;
    std::size_t i = 0;
    while (src->next_line(line)) {
      REQUIRE(i < expected.size());
      REQUIRE(line == expected[i]);
      ++i;
      CHECK(src->line_number() == i);
    }
    CHECK(i == expected.size());
    CHECK_FALSE(src->truncated());
    CHECK(src->bytes_read() == bytes.size());
    CHECK(src->bytes_total() == bytes.size());
  }
}

TEST_CASE("LineSource handles CRLF, empty lines, a missing final newline and concatenated gzip members",
          "[byte_source]") {
  auto path = write_file("crlf.txt", "a\r\n\r\nb\nlast");
  auto src = LineSource::open(path);
  std::string_view line;
  std::vector<std::string> got;
  while (src->next_line(line)) got.emplace_back(line);
  CHECK(got == std::vector<std::string>{"a", "", "b", "last"});
  CHECK(src->truncated());  // the last line had no '\n'
  CHECK_FALSE(src->stream_truncated());

  auto two = write_file("two.gz", test::gzip("one\ntwo\n") + test::gzip("three\n"));
  CHECK(all_lines(two) == std::vector<std::string>{"one", "two", "three"});
  auto zz = write_file("two.zst", test::zstd("one\n") + test::zstd("two\n"));
  CHECK(all_lines(zz) == std::vector<std::string>{"one", "two"});
}

TEST_CASE("LineSource reports a cut gzip or zstd stream as truncated", "[byte_source]") {
  std::string text = numbered_lines(20000);
  for (auto comp : {Compression::gzip, Compression::zstd}) {
    std::string full = comp == Compression::gzip ? test::gzip(text) : test::zstd(text);
    auto path = write_file("cut", full.substr(0, full.size() / 2));
    auto src = LineSource::open(path);
    std::string_view line;
    std::size_t n = 0;
    while (src->next_line(line)) ++n;
    CHECK(n > 0);
    CHECK(n < 20000);
    CHECK(src->stream_truncated());
    CHECK(src->truncated());
  }
}

TEST_CASE("LineSource gives clear errors for missing files, directories and corrupt gzip", "[byte_source]") {
  try {
    LineSource::open("/nonexistent/trace.jsonl");
    FAIL("no error");
  } catch (const TraceError& e) {
    CHECK_THAT(e.what(), Catch::Contains("/nonexistent/trace.jsonl") && Catch::Contains("cannot open"));
  }
  CHECK_THROWS_WITH(LineSource::open("/tmp"), Catch::Contains("is a directory"));

  std::string gz = test::gzip(numbered_lines(1000));
  for (std::size_t i = 20; i < 60; ++i) gz[i] = static_cast<char>(gz[i] ^ 0x5a);
  auto src = LineSource::open(write_file("bad.gz", gz));
  std::string_view line;
  try {
    while (src->next_line(line)) {
    }
    FAIL("no error");
  } catch (const TraceError& e) {
    CHECK_THAT(e.what(), Catch::Contains("gzip data error at compressed offset"));
  }
}

TEST_CASE("LineSource refuses lines over 64 MiB without holding more", "[byte_source]") {
  // 65 MiB of 'x' without a newline, compressed (small on disk).
  std::string big(65u << 20, 'x');
  auto path = write_file("long.gz", test::gzip(big));
  big.clear();
  big.shrink_to_fit();
  auto src = LineSource::open(path);
  std::string_view line;
  CHECK_THROWS_WITH(src->next_line(line), Catch::Contains("line 1 is longer than 64 MiB"));
}

namespace {
// Reads every record of `path` with the reader its format selects; the error's text, or "".
std::string read_error(const std::string& path) {
  try {
    auto r = open_trace(path);
    TraceRecord rec;
    while (r->next(rec)) {
    }
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// `bytes` with two bytes at `at` changed.
std::string damaged_at(std::string bytes, std::size_t at) {
  bytes[at] = static_cast<char>(bytes[at] ^ 0xff);
  bytes[at + 1] = static_cast<char>(bytes[at + 1] ^ 0x55);
  return bytes;
}
}  // namespace

TEST_CASE("a damaged gzip trace is reported as damaged, not as content that does not parse", "[byte_source]") {
  // A changed byte in a deflate stream decodes to wrong bytes long before the member's CRC is
  // checked, and a reader may meet content that does not parse first. Wherever the damage is,
  // the error must name it (the CRC or deflate error found when the rest is read); where the
  // content failed first, it still says where.
  const std::string torch = test::read_file(test::data_path("torch-h200/gpt2_train.torchtrace.jsonl.gz"));
  const std::string pickle = test::gzip(test::read_file(test::data_path("torch-h200/encoder_varlen.snapshot.pickle")));
  for (const auto& [name, bytes] :
       {std::pair{"damaged.torchtrace.jsonl.gz", torch}, std::pair{"damaged.snapshot.pickle.gz", pickle}}) {
    std::size_t content_first = 0;
    for (std::size_t k = 1; k <= 10; ++k) {
      const std::string path = write_file(name, damaged_at(bytes, bytes.size() * k / 11));
      const std::string error = read_error(path);
      INFO(error);
      CHECK_THAT(error, Catch::Contains(path + ": gzip data error at compressed offset"));
      content_first += error.find("the file is damaged, so") != std::string::npos;
    }
    // The history's text meets a line that does not parse first at some of these places (the
    // pickle's deflate data, denser, fails in the decoder or the CRC first).
    INFO(name);
    if (bytes == torch) CHECK(content_first > 0);
    // The same bytes intact read to the end.
    CHECK(read_error(write_file(std::string("intact.") + name, bytes)).empty());
  }
}
