// Growth detection: Note [growth detection] in growth.h.
#include "analyses/growth.h"

#include <algorithm>
#include <cmath>
#include <complex>
#include <numbers>

namespace vramtrace {

namespace {

// Runs of at most this many step boundaries get the exact warm-up rule (O(n^2)).
constexpr std::size_t kExactWarmupSamples = 4096;

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  double hi = *mid;
  if (v.size() % 2 == 1) return hi;
  double lo = *std::max_element(v.begin(), mid);
  return (lo + hi) / 2;
}

// In-place iterative radix-2 FFT; `a.size()` must be a power of two. inverse: unscaled.
void fft(std::vector<std::complex<double>>& a, bool inverse) {
  const std::size_t n = a.size();
  for (std::size_t i = 1, j = 0; i < n; ++i) {
    std::size_t bit = n >> 1;
    for (; j & bit; bit >>= 1) j ^= bit;
    j ^= bit;
    if (i < j) std::swap(a[i], a[j]);
  }
  for (std::size_t len = 2; len <= n; len <<= 1) {
    double ang = 2 * std::numbers::pi / static_cast<double>(len) * (inverse ? 1 : -1);
    std::complex<double> wl(std::cos(ang), std::sin(ang));
    for (std::size_t i = 0; i < n; i += len) {
      std::complex<double> w(1);
      for (std::size_t k = 0; k < len / 2; ++k) {
        auto u = a[i + k];
        auto v = a[i + k + len / 2] * w;
        a[i + k] = u + v;
        a[i + k + len / 2] = u - v;
        w *= wl;
      }
    }
  }
}

}  // namespace

GrowthFit fit_growth(std::span<const StepSample> samples, const GrowthOptions& options) {
  GrowthFit fit;
  const std::size_t n = samples.size();
  fit.samples = n;
  const std::size_t min_steady = std::max<std::size_t>(options.min_steady_steps, 2);
  if (n < min_steady) {
    fit.reason = "only " + std::to_string(n) + " step boundaries; at least " + std::to_string(min_steady) +
                 " are needed to fit growth";
    return fit;
  }

  // Rule 2: warm-up from the increments.
  std::vector<double> d(n, 0.0);
  for (std::size_t k = 1; k < n; ++k)
    d[k] = static_cast<double>(samples[k].allocated_bytes) - static_cast<double>(samples[k - 1].allocated_bytes);
  const std::size_t half = n / 2;
  // The steady increment and the tolerance around it, from the increments d[from..n).
  const auto steady_of = [&](std::size_t from, double& m, double& tol) {
    std::vector<double> rest(d.begin() + static_cast<std::ptrdiff_t>(from), d.end());
    m = median(rest);
    std::vector<double> dev;
    dev.reserve(rest.size());
    double mean = 0;
    for (double x : rest) {
      dev.push_back(std::abs(x - m));
      mean += x;
    }
    mean /= static_cast<double>(rest.size());
    double var = 0;
    for (double x : rest) var += (x - mean) * (x - mean);
    // The spread too: increments that take a few values (a cache that grows or shrinks by one
    // block a step) have a MAD of 0, and every step would look like warm-up.
    const double sd = rest.size() > 1 ? std::sqrt(var / static_cast<double>(rest.size() - 1)) : 0.0;
    tol = std::max({static_cast<double>(options.tolerance_floor_bytes), 4 * 1.4826 * median(dev), 3 * sd});
  };
  std::size_t warmup = 0;
  if (n <= kExactWarmupSamples) {
    // The last step in the first half whose increment stands out of all the increments after it.
    for (std::size_t k = half; k >= 1 && warmup == 0; --k) {
      if (k + 1 >= n) continue;
      double m = 0, tol = 0;
      steady_of(k + 1, m, tol);
      if (std::abs(d[k] - m) > tol) warmup = k;
    }
  } else {
    // Long runs: the second half is steady; O(n) instead of O(n^2).
    double m = 0, tol = 0;
    steady_of(half, m, tol);
    for (std::size_t k = 1; k <= half; ++k)
      if (std::abs(d[k] - m) > tol) warmup = k;
  }
  fit.warmup_steps = warmup;
  fit.steady_steps = n - warmup;
  if (fit.steady_steps < min_steady) {
    // The warm-up is not shortened to make room for a fit: a warm-up step left in the fit reads
    // as growth (a step function fitted by a line).
    fit.reason = "after a warm-up of " + std::to_string(warmup) + " step boundaries (their increments differ from " +
                 "the steady one), only " + std::to_string(fit.steady_steps) + " steady ones are left; at least " +
                 std::to_string(min_steady) + " are needed to fit growth";
    return fit;
  }

  // Rule 3: least squares over the steady part, x measured from its first step.
  const auto steady = samples.subspan(warmup);
  const double cnt = static_cast<double>(steady.size());
  const double x0 = static_cast<double>(steady.front().step);
  double sx = 0, sy = 0;
  for (const auto& s : steady) {
    sx += static_cast<double>(s.step) - x0;
    sy += static_cast<double>(s.allocated_bytes);
  }
  const double mx = sx / cnt, my = sy / cnt;
  double sxx = 0, sxy = 0, syy = 0;
  for (const auto& s : steady) {
    double dx = static_cast<double>(s.step) - x0 - mx;
    double dy = static_cast<double>(s.allocated_bytes) - my;
    sxx += dx * dx;
    sxy += dx * dy;
    syy += dy * dy;
  }
  fit.steady_first_bytes = steady.front().allocated_bytes;
  fit.steady_last_bytes = steady.back().allocated_bytes;
  if (sxx <= 0) {
    fit.reason = "all steady step boundaries have the same step index";
    return fit;
  }
  fit.slope_bytes_per_step = sxy / sxx;
  fit.intercept_bytes = my - fit.slope_bytes_per_step * mx;
  const double ss_res = std::max(0.0, syy - fit.slope_bytes_per_step * sxy);
  fit.r_squared = syy > 0 ? std::clamp(1 - ss_res / syy, 0.0, 1.0) : 1.0;
  fit.slope_stderr = cnt > 2 ? std::sqrt(ss_res / (cnt - 2) / sxx) : 0.0;
  fit.evaluated = true;

  // Rule 5: lag-1 autocorrelation of the residuals, and the steady increments' mean and its
  // standard error.
  double lag = 0;
  for (std::size_t k = 1; k < steady.size(); ++k) {
    const auto resid = [&](std::size_t j) {
      const double x = static_cast<double>(steady[j].step) - x0;
      return static_cast<double>(steady[j].allocated_bytes) - (fit.intercept_bytes + fit.slope_bytes_per_step * x);
    };
    lag += resid(k) * resid(k - 1);
  }
  fit.residual_autocorrelation = ss_res > 0 ? lag / ss_res : 0.0;
  const std::size_t inc = steady.size() - 1;
  double sum_d = 0;
  for (std::size_t k = 1; k < steady.size(); ++k)
    sum_d += static_cast<double>(steady[k].allocated_bytes) - static_cast<double>(steady[k - 1].allocated_bytes);
  fit.increment_mean_bytes = sum_d / static_cast<double>(inc);
  double var_d = 0;
  for (std::size_t k = 1; k < steady.size(); ++k) {
    const double dk =
        static_cast<double>(steady[k].allocated_bytes) - static_cast<double>(steady[k - 1].allocated_bytes);
    var_d += (dk - fit.increment_mean_bytes) * (dk - fit.increment_mean_bytes);
  }
  fit.increment_stderr = inc > 1 ? std::sqrt(var_d / static_cast<double>(inc - 1) / static_cast<double>(inc)) : 0.0;

  // Rule 4.
  const double t = options.significance_t;
  const bool trend = fit.slope_bytes_per_step > 0 && fit.slope_bytes_per_step - t * fit.slope_stderr > 0;
  fit.wanders = fit.residual_autocorrelation > options.wander_autocorrelation;
  const bool drifts = fit.increment_mean_bytes > 0 && fit.increment_mean_bytes - t * fit.increment_stderr > 0;
  fit.growing = trend && (!fit.wanders || drifts);
  return fit;
}

namespace {

std::optional<std::size_t> yin_period(std::span<const std::int64_t> curve, double threshold) {
  const std::size_t n = curve.size();
  if (n < 6) return std::nullopt;

  // Remove the least-squares line (a steady leak) and scale to unit variance so that the sums
  // below stay far from double's cancellation limits.
  double mx = (static_cast<double>(n) - 1) / 2, my = 0;
  for (auto v : curve) my += static_cast<double>(v);
  my /= static_cast<double>(n);
  double sxx = 0, sxy = 0;
  for (std::size_t j = 0; j < n; ++j) {
    double dx = static_cast<double>(j) - mx;
    sxx += dx * dx;
    sxy += dx * (static_cast<double>(curve[j]) - my);
  }
  const double slope = sxx > 0 ? sxy / sxx : 0;
  std::vector<double> x(n);
  double var = 0;
  for (std::size_t j = 0; j < n; ++j) {
    x[j] = static_cast<double>(curve[j]) - my - slope * (static_cast<double>(j) - mx);
    var += x[j] * x[j];
  }
  var /= static_cast<double>(n);
  if (var <= 0) return std::nullopt;
  const double scale = 1 / std::sqrt(var);
  for (auto& v : x) v *= scale;

  // Autocorrelation r(tau) = sum_{j < n - tau} x[j] x[j + tau] through a zero-padded FFT.
  std::size_t size = 1;
  while (size < 2 * n) size <<= 1;
  std::vector<std::complex<double>> a(size);
  for (std::size_t j = 0; j < n; ++j) a[j] = x[j];
  fft(a, false);
  for (auto& c : a) c = std::norm(c);
  fft(a, true);
  std::vector<double> prefix(n + 1, 0.0);  // prefix[k] = sum_{j<k} x[j]^2
  for (std::size_t j = 0; j < n; ++j) prefix[j + 1] = prefix[j] + x[j] * x[j];

  const std::size_t max_tau = n / 3;
  if (max_tau < 2) return std::nullopt;
  // Mean squared difference at each lag (the overlap shrinks with tau, so use the mean), then
  // YIN's cumulative mean normalisation.
  std::vector<double> dn(max_tau + 2, 1.0);
  double running = 0;
  for (std::size_t tau = 1; tau <= max_tau + 1 && tau < n; ++tau) {
    double r = a[tau].real() / static_cast<double>(size);
    double m0 = prefix[n - tau];
    double m1 = prefix[n] - prefix[tau];
    double dtau = std::max(0.0, (m0 + m1 - 2 * r) / static_cast<double>(n - tau));
    running += dtau;
    dn[tau] = running > 0 ? dtau * static_cast<double>(tau) / running : 1.0;
  }
  for (std::size_t tau = 2; tau <= max_tau; ++tau) {
    if (dn[tau] < threshold) {
      while (tau + 1 <= max_tau && dn[tau + 1] < dn[tau]) ++tau;
      return tau;
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::size_t> detect_period(std::span<const std::int64_t> curve, double threshold,
                                         std::size_t max_samples) {
  if (curve.size() > max_samples) curve = curve.subspan(curve.size() - max_samples);
  // Loading and warm-up sit at the start and can dwarf the steps' own swing: try the whole
  // curve, then its last three quarters, then its last half.
  for (std::size_t quarters : {4, 3, 2}) {
    auto tail = curve.subspan(curve.size() - curve.size() * quarters / 4);
    if (auto p = yin_period(tail, threshold)) return p;
  }
  return std::nullopt;
}

std::vector<std::size_t> track_step_troughs(std::span<const std::int64_t> curve, std::size_t period) {
  std::vector<std::size_t> out;
  const std::size_t n = curve.size();
  if (period == 0 || n == 0) return out;
  auto first_min = [&](std::size_t lo, std::size_t hi) {  // [lo, hi)
    std::size_t best = lo;
    for (std::size_t j = lo + 1; j < hi; ++j)
      if (curve[j] < curve[best]) best = j;
    return best;
  };
  std::size_t b = first_min(0, std::min(period, n));
  out.push_back(b);
  const std::size_t half = std::max<std::size_t>(period / 2, 1);
  for (;;) {
    std::size_t expect = b + period;
    if (expect >= n) break;
    std::size_t lo = std::max(expect - half, b + 1);
    std::size_t hi = std::min(expect + half, n);
    // A window cut by the end of the trace still holds the expected boundary; within an
    // unfinished step the curve only rises from its trough, so the minimum is that trough.
    b = first_min(lo, hi);
    out.push_back(b);
  }
  return out;
}

}  // namespace vramtrace
