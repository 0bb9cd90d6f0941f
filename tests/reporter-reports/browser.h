// Headless chromium for the report's browser tests and its browser benchmark: the DevTools
// protocol over a pipe, a report written and opened in one step, screenshots, and the page's
// byte and time formats for the texts the tests compare.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>
#include <catch2/catch.hpp>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "model/load_models.h"
#include "model/trace_model.h"
#include "render/report_html.h"

namespace vramtrace::testing {

namespace fs = std::filesystem;

inline std::string chromium_path() {
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/lib/chromium/chromium"})
    if (fs::exists(p)) return p;
  return "";
}

inline void skip_without_chromium() {
  if (chromium_path().empty()) {
    std::fprintf(stderr, "SKIP: chromium is not installed (scripts/setup-deps.sh --with-browser)\n");
    std::exit(77);
  }
}

inline std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// Fraction of the PNG's decompressed scanline bytes that differ from the most common byte: 0
/// for a blank (uniform) image.
inline double png_variety(const std::string& png) {
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

/// Headless chromium driven through the DevTools protocol over a pipe (--remote-debugging-pipe:
/// the browser reads commands from fd 3 and writes replies to fd 4, each message JSON ended by a
/// NUL byte), so that the test moves the mouse, presses keys and clicks as a user does: input
/// goes through the browser's own event pipeline, not through script in the page.
class Browser {
 public:
  Browser(const fs::path& html, const fs::path& err_file) {
    ::signal(SIGPIPE, SIG_IGN);  // a browser that died answers with EPIPE, not with a signal
    profile_ = fs::temp_directory_path() / ("vt-cdp-" + std::to_string(::getpid()) + "-" + std::to_string(std::rand()));
    fs::create_directories(profile_);
    int to[2], from[2];
    REQUIRE(::pipe(to) == 0);
    REQUIRE(::pipe(from) == 0);
    const std::string exe = chromium_path(), profile_arg = "--user-data-dir=" + profile_.string();
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      const int err = ::open(err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int null = ::open("/dev/null", O_RDWR);
      ::dup2(null, 0);
      ::dup2(null, 1);
      if (err >= 0) ::dup2(err, 2);
      // Out of the way of 3 and 4 first: the pipes may be those numbers already.
      const int r = ::fcntl(to[0], F_DUPFD, 10), w = ::fcntl(from[1], F_DUPFD, 10);
      ::dup2(r, 3);
      ::dup2(w, 4);
      for (int fd = 5; fd < 1024; ++fd) ::close(fd);
      ::execl(exe.c_str(), exe.c_str(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
              "--window-size=1400,900", "--remote-debugging-pipe", profile_arg.c_str(), "about:blank",
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(to[0]);
    ::close(from[1]);
    out_ = to[1];
    in_ = from[0];
    const auto target = call("Target.createTarget", {{"url", "file://" + html.string()}}, false);
    const auto attached = call("Target.attachToTarget", {{"targetId", target["targetId"]}, {"flatten", true}}, false);
    session_ = attached["sessionId"].get<std::string>();
  }
  Browser(const Browser&) = delete;
  Browser& operator=(const Browser&) = delete;
  ~Browser() {
    nlohmann::json close = {{"id", ++id_}, {"method", "Browser.close"}, {"params", nlohmann::json::object()}};
    const std::string msg = close.dump() + '\0';
    [[maybe_unused]] auto n = ::write(out_, msg.data(), msg.size());
    ::close(out_);
    ::close(in_);
    int status = 0;
    for (int i = 0; i < 100 && ::waitpid(pid_, &status, WNOHANG) == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (::waitpid(pid_, &status, WNOHANG) == 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
    }
    std::error_code ec;
    fs::remove_all(profile_, ec);
  }

  /// Sends one command (to the page's session unless `to_page` is false) and returns its
  /// "result"; fails the test on an error reply or after 30 s without one.
  nlohmann::json call(const std::string& method, nlohmann::json params = nlohmann::json::object(),
                      bool to_page = true) {
    nlohmann::json m = {{"id", ++id_}, {"method", method}, {"params", std::move(params)}};
    if (to_page) m["sessionId"] = session_;
    const std::string msg = m.dump() + '\0';
    REQUIRE(::write(out_, msg.data(), msg.size()) == static_cast<ssize_t>(msg.size()));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (;;) {
      for (auto nul = buf_.find('\0'); nul != std::string::npos; nul = buf_.find('\0')) {
        auto reply = nlohmann::json::parse(buf_.substr(0, nul), nullptr, false);
        buf_.erase(0, nul + 1);
        if (!reply.is_object() || reply.value("id", -1) != id_) continue;  // events, other replies
        INFO(method << ": " << reply.dump());
        REQUIRE_FALSE(reply.contains("error"));
        return reply["result"];
      }
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      INFO(method << ": no reply from the browser");
      REQUIRE(left.count() > 0);
      pollfd p{in_, POLLIN, 0};
      REQUIRE(::poll(&p, 1, static_cast<int>(left.count())) >= 0);
      if (!(p.revents & (POLLIN | POLLHUP))) continue;
      char chunk[65536];
      const ssize_t n = ::read(in_, chunk, sizeof chunk);
      INFO(method << ": the browser closed the pipe");
      REQUIRE(n > 0);
      buf_.append(chunk, static_cast<std::size_t>(n));
    }
  }

  /// The value of a script expression in the page (JSON-serialisable).
  nlohmann::json eval(const std::string& expression) {
    auto r = call("Runtime.evaluate", {{"expression", expression}, {"returnByValue", true}});
    INFO(expression << " -> " << r.dump());
    REQUIRE_FALSE(r.contains("exceptionDetails"));
    return r["result"].value("value", nlohmann::json());
  }

  void move_mouse(double x, double y) {
    call("Input.dispatchMouseEvent", {{"type", "mouseMoved"}, {"x", x}, {"y", y}});
  }
  void click(double x, double y) {
    move_mouse(x, y);
    for (const char* type : {"mousePressed", "mouseReleased"})
      call("Input.dispatchMouseEvent",
           {{"type", type}, {"x", x}, {"y", y}, {"button", "left"}, {"buttons", 1}, {"clickCount", 1}});
  }
  /// Presses the left button at (x0, y), moves to (x1, y) with it held and releases it there.
  void drag(double x0, double x1, double y) {
    move_mouse(x0, y);
    call("Input.dispatchMouseEvent",
         {{"type", "mousePressed"}, {"x", x0}, {"y", y}, {"button", "left"}, {"buttons", 1}, {"clickCount", 1}});
    for (int k = 1; k <= 8; ++k)
      call("Input.dispatchMouseEvent",
           {{"type", "mouseMoved"}, {"x", x0 + (x1 - x0) * k / 8}, {"y", y}, {"button", "left"}, {"buttons", 1}});
    call("Input.dispatchMouseEvent",
         {{"type", "mouseReleased"}, {"x", x1}, {"y", y}, {"button", "left"}, {"buttons", 0}, {"clickCount", 1}});
  }
  void key(const std::string& key, int code) {
    for (const char* type : {"rawKeyDown", "keyUp"})
      call("Input.dispatchKeyEvent", {{"type", type},
                                      {"key", key},
                                      {"code", key},
                                      {"windowsVirtualKeyCode", code},
                                      {"nativeVirtualKeyCode", code}});
  }

 private:
  fs::path profile_;
  pid_t pid_ = -1;
  int out_ = -1, in_ = -1;
  int id_ = 0;
  std::string session_, buf_;
};

// Waits until the page's script has run (it fills the probe last); fails after 60 s (a large
// page on a loaded 2-core CI machine takes many times its few seconds alone).
inline void wait_for_page(Browser& b) {
  const char* ready = "(function(){var p=document.getElementById('vt-probe');return !!p&&p.textContent.length>0;})()";
  bool done = false;
  for (int i = 0; i < 1200 && !done; ++i) {
    done = b.eval(ready).get<bool>();
    if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  REQUIRE(done);
}

/// The bytes of standard base64 text (RFC 4648; the DevTools protocol's binary fields). Padding
/// and characters outside the alphabet end the data.
inline std::string from_base64(const std::string& text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
  };
  std::string out;
  unsigned acc = 0;
  int bits = 0;
  for (char c : text) {
    const int v = value(c);
    if (v < 0) break;
    acc = (acc << 6) | static_cast<unsigned>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return out;
}

/// Saves what the page shows now as VRAMTRACE_BROWSER_ARTIFACTS/<name>.png (the build's
/// test-artifacts/report/, which CI keeps) and checks that it is not blank.
inline void screenshot(Browser& b, const std::string& name) {
  const std::string png = from_base64(b.call("Page.captureScreenshot", {{"format", "png"}})["data"].get<std::string>());
  REQUIRE(png.size() > 1000);
  CHECK(png_variety(png) > 0.005);
  const fs::path dir = VRAMTRACE_BROWSER_ARTIFACTS;
  std::error_code ec;
  fs::create_directories(dir, ec);
  std::ofstream(dir / (name + ".png"), std::ios::binary) << png;
}

// The page's byte and time formats (common.js: fmtB, fmtT), for the texts it must show.
inline std::string fmt_b(double b) {
  const double n = std::abs(b);
  const char* sign = b < 0 ? "-" : "";
  char buf[64];
  if (n <= 1024)
    std::snprintf(buf, sizeof buf, "%s%.0f bytes", sign, n);
  else if (n <= 1048576)
    std::snprintf(buf, sizeof buf, "%s%.2f KiB", sign, n / 1024);
  else if (n <= 1073741824)
    std::snprintf(buf, sizeof buf, "%s%.2f MiB", sign, n / 1048576);
  else
    std::snprintf(buf, sizeof buf, "%s%.2f GiB", sign, n / 1073741824);
  return buf;
}
inline std::string fmt_t(double ms) {
  char buf[64];
  const double a = std::abs(ms);
  if (ms == 0) return "0";
  if (a >= 1000)
    std::snprintf(buf, sizeof buf, "%.3f s", ms / 1000);
  else if (a >= 1)
    std::snprintf(buf, sizeof buf, "%.3f ms", ms);
  else
    std::snprintf(buf, sizeof buf, "%.1f us", ms * 1000);
  return buf;
}
inline double ms_since(std::int64_t ns, std::int64_t t0) { return static_cast<double>(ns - t0) / 1e6; }
/// A report opened in the browser: its page, the file it was written to (in a directory of its
/// own, removed with this object) and the browser showing it.
struct OpenReport {
  fs::path dir, html;
  std::string page;
  std::unique_ptr<Browser> browser;
  OpenReport() = default;
  OpenReport(OpenReport&&) = default;
  OpenReport& operator=(OpenReport&&) = default;
  ~OpenReport() {
    browser.reset();  // the browser first: it holds the file open
    std::error_code ec;
    if (!dir.empty()) fs::remove_all(dir, ec);
  }
  Browser& b() { return *browser; }
  /// The script errors the page's probe collected (an empty array when none).
  nlohmann::json errors() {
    return browser->eval("JSON.parse(document.getElementById('vt-probe').textContent).errors");
  }
};

/// Writes `page` into a temporary directory named after `case_name`, opens it in the browser,
/// waits until its script has run and checks that it logged no script error.
inline OpenReport open_page(const std::string& page, const std::string& case_name) {
  OpenReport r;
  r.dir = fs::temp_directory_path() / ("vt-report-" + case_name + "-" + std::to_string(::getpid()));
  fs::create_directories(r.dir);
  r.html = r.dir / "report.html";
  r.page = page;
  std::ofstream(r.html, std::ios::binary) << r.page;
  r.browser = std::make_unique<Browser>(r.html, r.dir / "browser.err");
  wait_for_page(*r.browser);
  CHECK(r.errors() == nlohmann::json::array());
  return r;
}

/// The report of `models` (render_report_html), opened as open_page does.
inline OpenReport open_report(const std::vector<TraceModel>& models, const std::string& case_name) {
  return open_page(render_report_html(models), case_name);
}

#ifdef VRAMTRACE_TEST_DATA_DIR
/// A trace of tests/data (`rel_path` under it) loaded as `vramtrace report` loads it
/// (report_model_options), with its report opened as open_report does.
struct DataReport {
  std::vector<TraceModel> models;
  OpenReport report;
  Browser& b() { return report.b(); }
};
inline DataReport report_of(const std::string& rel_path, const std::string& case_name) {
  DataReport r;
  r.models = load_models({std::string(VRAMTRACE_TEST_DATA_DIR) + "/" + rel_path}, report_model_options());
  r.report = open_report(r.models, case_name);
  return r;
}
#endif

}  // namespace vramtrace::testing
