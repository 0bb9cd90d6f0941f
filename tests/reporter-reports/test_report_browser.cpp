// The HTML report in a real browser (Debian's chromium, headless): no console error, the plot is
// drawn (the screenshot is not blank), the values read at the peak's time equal the summary's, and
// a hostile trace's strings do not run. Exits with 77 (ctest: skipped) when chromium is absent.
#include <zlib.h>
#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "analyses/summary.h"
#include "model/load_models.h"
#include "render/report_html.h"
#include "vector_reader.h"

using namespace vramtrace;
namespace fs = std::filesystem;

namespace {

std::string chromium_path() {
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/lib/chromium/chromium"})
    if (fs::exists(p)) return p;
  return "";
}

void skip_without_chromium() {
  if (chromium_path().empty()) {
    std::fprintf(stderr, "SKIP: chromium is not installed (scripts/setup-deps.sh --with-browser)\n");
    std::exit(77);
  }
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// Runs chromium headless on `html`; returns stdout; stderr goes to `err_file`.
std::string run_chromium(const fs::path& html, const std::string& extra, const fs::path& err_file) {
  fs::path profile =
      fs::temp_directory_path() / ("vt-chromium-" + std::to_string(::getpid()) + "-" + std::to_string(std::rand()));
  fs::create_directories(profile);
  std::string cmd =
      "timeout 90 " + chromium_path() +
      " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking"
      " --disable-component-update --disable-sync --hide-scrollbars --user-data-dir=" +
      profile.string() + " --virtual-time-budget=5000 --window-size=1400,900 " + extra + " 'file://" + html.string() +
      "' 2>'" + err_file.string() + "'";
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p);
  std::array<char, 65536> buf;
  std::size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  pclose(p);
  std::error_code ec;
  fs::remove_all(profile, ec);
  return out;
}

std::string probe_of(const std::string& dom) {
  auto b = dom.find("id=\"vt-probe\"");
  REQUIRE(b != std::string::npos);
  b = dom.find('>', b) + 1;
  auto e = dom.find("</pre>", b);
  REQUIRE(e != std::string::npos);
  std::string s = dom.substr(b, e - b);
  // --dump-dom serialises text with HTML entities
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s.compare(i, 6, "&quot;") == 0) {
      out += '"';
      i += 5;
    } else if (s.compare(i, 5, "&amp;") == 0) {
      out += '&';
      i += 4;
    } else if (s.compare(i, 4, "&lt;") == 0) {
      out += '<';
      i += 3;
    } else if (s.compare(i, 4, "&gt;") == 0) {
      out += '>';
      i += 3;
    } else
      out += s[i];
  }
  return out;
}

/// Fraction of the PNG's decompressed scanline bytes that differ from the most common byte: 0
/// for a blank (uniform) image.
double png_variety(const std::string& png) {
  REQUIRE(png.size() > 8);
  REQUIRE(png.compare(1, 3, "PNG") == 0);
  std::string idat;
  std::size_t pos = 8;
  while (pos + 8 <= png.size()) {
    std::uint32_t len = (static_cast<unsigned char>(png[pos]) << 24) |
                        (static_cast<unsigned char>(png[pos + 1]) << 16) |
                        (static_cast<unsigned char>(png[pos + 2]) << 8) | static_cast<unsigned char>(png[pos + 3]);
    std::string type = png.substr(pos + 4, 4);
    if (type == "IDAT") idat += png.substr(pos + 8, len);
    pos += 12 + len;
  }
  std::string raw(64u << 20, '\0');
  uLongf raw_len = raw.size();
  REQUIRE(uncompress(reinterpret_cast<Bytef*>(raw.data()), &raw_len, reinterpret_cast<const Bytef*>(idat.data()),
                     idat.size()) == Z_OK);
  std::array<std::size_t, 256> hist{};
  for (uLongf i = 0; i < raw_len; ++i) ++hist[static_cast<unsigned char>(raw[i])];
  std::size_t mode = 0;
  for (auto h : hist) mode = std::max(mode, h);
  return 1.0 - static_cast<double>(mode) / static_cast<double>(raw_len);
}

}  // namespace

TEST_CASE("browser: the gpt2 report draws, reads back the summary's figures, logs no error", "[browser]") {
  skip_without_chromium();
  auto models = load_models({std::string(VRAMTRACE_TEST_DATA_DIR) + "/torch-h200/gpt2_train.torchtrace.jsonl.gz"});
  auto summary = summary_json(models);
  fs::path dir = fs::temp_directory_path() / ("vt-report-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::path html = dir / "report.html";
  std::ofstream(html, std::ios::binary) << render_report_html(models);

  std::string dom = run_chromium(html, "--enable-logging=stderr --v=0 --dump-dom", dir / "dom.err");
  std::string log = read_file(dir / "dom.err");
  INFO(log.substr(0, 4000));
  CHECK(log.find("CONSOLE") == std::string::npos);  // no console message at all (errors included)
  CHECK(log.find("Uncaught") == std::string::npos);
  auto probe = nlohmann::json::parse(probe_of(dom));
  CHECK(probe["errors"].empty());
  REQUIRE(probe["devices"].size() == 1);
  const auto& p = probe["devices"][0];
  const auto& sd = summary["traces"][0]["devices"][0];
  // The values under the cursor at the peak's time are the summary's peak figures.
  CHECK(p["at_peak"]["allocated"]["max"].get<std::int64_t>() ==
        sd["stats"]["allocated_bytes.all.peak"].get<std::int64_t>());
  CHECK(p["at_peak"]["allocated"]["max"].get<std::int64_t>() == sd["peak"]["allocated_bytes"].get<std::int64_t>());
  CHECK(p["at_peak"]["reserved"]["last"].get<std::int64_t>() == sd["peak"]["reserved_bytes"].get<std::int64_t>());
  CHECK(p["max_allocated"].get<std::int64_t>() == sd["stats"]["allocated_bytes.all.peak"].get<std::int64_t>());
  CHECK(p["end_reserved"].get<std::int64_t>() == sd["stats"]["reserved_bytes.all.current"].get<std::int64_t>());
  REQUIRE(probe["drawn_pixels"].size() == 1);
  CHECK(probe["drawn_pixels"][0].get<int>() > 5000);

  run_chromium(html, "--screenshot=" + (dir / "shot.png").string(), dir / "shot.err");
  std::string png = read_file(dir / "shot.png");
  REQUIRE(png.size() > 1000);
  CHECK(png_variety(png) > 0.005);
  std::error_code ec;
  fs::remove_all(dir, ec);
}

TEST_CASE("browser: a hostile trace's strings do not run", "[browser][escape]") {
  skip_without_chromium();
  testing::RecordList l;
  l.add(Action::segment_alloc, 0x10000000, 20u << 20).add(Action::alloc, 0x10000000, 3u << 20);
  TraceHeader h;
  h.path = "</script><script>document.body.setAttribute('data-pwned','1')</script>";
  h.workload = "<img src=x onerror=\"document.body.setAttribute('data-pwned','2')\">";
  h.settings = "\xff\xfe<b>bold</b>";
  testing::VectorReader r(l.records, h);
  std::vector<TraceModel> v;
  v.push_back(build_trace_model(r));
  fs::path dir = fs::temp_directory_path() / ("vt-report-evil-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::path html = dir / "evil.html";
  std::ofstream(html, std::ios::binary) << render_report_html(v);
  std::string dom = run_chromium(html, "--dump-dom", dir / "err");
  REQUIRE(dom.find("vt-probe") != std::string::npos);
  CHECK(dom.find("data-pwned=") == std::string::npos);
  CHECK(dom.find("<b>bold</b>") == std::string::npos);
  auto probe = nlohmann::json::parse(probe_of(dom));
  CHECK(probe["errors"].empty());
  std::error_code ec;
  fs::remove_all(dir, ec);
}
