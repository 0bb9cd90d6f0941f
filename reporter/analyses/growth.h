// Growth detection for `vramtrace check --no-leaks / --max-growth`: allocated bytes at step
// boundaries, a warm-up that is ignored, and a least-squares slope per step over the rest.
//
// Note [growth detection] (the rules, in one place):
//  1. Samples. y[k] = allocated bytes at the k-th step boundary. Boundaries are the trace's `mark`
//     events when it has at least kMinSteps of them; otherwise they are found from the repeating
//     pattern of the allocated-bytes curve (detect_period + track_step_troughs below).
//  2. Warm-up. d[k] = y[k] - y[k-1]. Warm-up ends after the last k in the first half of the run
//     whose increment stands out of the increments after it: |d[k] - m| > tol, with m their
//     median and tol = max(floor, 4 * 1.4826 * MAD, 3 * SD) of them (floor =
//     GrowthOptions::tolerance_floor_bytes; the SD term because increments that take a few
//     values, +-16 MiB, have a MAD of 0). A model that builds its optimizer state and caches for
//     three steps and then stays flat has w = 3. It never covers more than half the samples, so
//     steady growth cannot hide in it. Runs of more than 4096 boundaries take m and tol once, from
//     the second half (O(n)).
//  3. Fit. Ordinary least squares of y on the step index over the steady part: slope b (bytes per
//     step), its standard error se, and R^2 (1 when the steady part is exactly flat).
//     When fewer than GrowthOptions::min_steady_steps samples are left after the warm-up, the fit
//     is "not evaluated" (the warm-up is never cut short to make room: a warm-up step left in a
//     fit of four samples reads as growth, R^2 0.6).
//  4. Verdict. The run grows when b > 0 and b - t * se > 0 (t = GrowthOptions::significance_t,
//     default 3) over at least min_steady_steps steady samples, and, when its residuals wander
//     (rule 5: rho > GrowthOptions::wander_autocorrelation, default 0.3), also the steady
//     increments' mean is above t of its standard errors. Without that many samples the fit is
//     "not evaluated" and a growth budget cannot be judged.
//  5. Wandering. Memory that goes up and down by chance from step to step (a cache that grows and
//     shrinks with the batch: a random walk) fits a line with a "significant" slope far more
//     often than t = 3 suggests, because its residuals are not independent (the spurious
//     regression of Granger & Newbold, 1974: in simulation a third of 40-step random walks).
//     rho = lag-1 autocorrelation of the fit's residuals tells such a run: then the increments
//     d[k] must themselves average above zero (a t test on them, which a random walk without
//     drift fails), as a leak's do. Measured by simulation (tests/reporter-check/test_growth.cpp):
//     random walks are called growing in under 1 % of runs at 40 steps, about 15 % at 10 or
//     fewer (too few steps tell a wander from a trend; the verdict's message says so); a leak of
//     one noise standard deviation per step is found in over 98 % of 10-step runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace vramtrace {

/// Allocated bytes at one step boundary.
struct StepSample {
  std::int64_t step = 0;             ///< step index (0-based, in trace order)
  std::int64_t allocated_bytes = 0;  ///< allocated bytes at the boundary
};

/// Parameters of Note [growth detection]; the defaults are what `vramtrace check` uses.
struct GrowthOptions {
  std::size_t min_steady_steps = 4;            ///< fewer steady samples: not evaluated
  double significance_t = 3.0;                 ///< growth must exceed t standard errors
  std::int64_t tolerance_floor_bytes = 65536;  ///< warm-up tolerance never below this
  double wander_autocorrelation = 0.3;         ///< residuals above this lag-1 correlation wander (rule 5)
};

/// The result of fit_growth.
struct GrowthFit {
  bool evaluated = false;               ///< false: too few samples (see `reason`)
  std::string reason;                   ///< why not evaluated; empty otherwise
  std::size_t samples = 0;              ///< step boundaries given
  std::size_t warmup_steps = 0;         ///< leading samples ignored
  std::size_t steady_steps = 0;         ///< samples fitted
  double slope_bytes_per_step = 0;      ///< least-squares slope over the steady part
  double slope_stderr = 0;              ///< its standard error (0 for an exact line)
  double intercept_bytes = 0;           ///< value of the fitted line at the first steady step
  double r_squared = 1;                 ///< fit quality in [0, 1]; 1 when the steady part is flat
  std::int64_t steady_first_bytes = 0;  ///< y at the first steady sample
  std::int64_t steady_last_bytes = 0;   ///< y at the last sample
  double residual_autocorrelation = 0;  ///< lag-1 autocorrelation of the fit's residuals (rule 5)
  bool wanders = false;                 ///< residual_autocorrelation above the option's threshold
  double increment_mean_bytes = 0;      ///< mean step-to-step change over the steady part, bytes
  double increment_stderr = 0;          ///< its standard error, bytes
  bool growing = false;                 ///< Note [growth detection], rule 4
};

/// Fits growth per Note [growth detection]. Pure function; never throws.
GrowthFit fit_growth(std::span<const StepSample> samples, const GrowthOptions& options = {});

/// Period of a curve sampled once per allocation (e.g. allocated bytes just before each alloc),
/// in samples, by the YIN method (de Cheveigné & Kawahara 2002): the difference function
/// d(tau) = sum_j (x[j] - x[j+tau])^2, normalised by its running mean,
/// d'(tau) = d(tau) * tau / sum_{k<=tau} d(k); the period is the first tau whose d' falls below
/// `threshold`, moved to the local minimum that follows. d is computed through an FFT
/// autocorrelation (O(n log n)), after removing the least-squares line. Only the last
/// `max_samples` values are used; when the whole curve gives no period, its last three quarters
/// and then its last half are tried (loading and warm-up at the start can dwarf the steps). A steady trend
/// (a leak) barely changes d at the true period: (growth per step)^2 against (step amplitude)^2.
/// Returns nullopt when no tau <= n/3 qualifies (fewer than three repetitions, or no repetition).
std::optional<std::size_t> detect_period(std::span<const std::int64_t> curve, double threshold = 0.25,
                                         std::size_t max_samples = std::size_t{1} << 20);

/// Step boundaries in a curve with period `period`: the first boundary is the first minimum of
/// the curve over its first period; each next one is the first minimum within half a period
/// either side of (previous + period), so the boundaries follow steps whose length jitters.
/// Returns indices into `curve`, increasing. Pure function.
std::vector<std::size_t> track_step_troughs(std::span<const std::int64_t> curve, std::size_t period);

}  // namespace vramtrace
