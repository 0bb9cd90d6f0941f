// Diagnoses that a message's form decides rather than the caching allocator's figures: a bare
// CUDA error, a CUDA library's status, CuPy's pool, XLA's compile-time plan, PyTorch's
// cudaMallocAsync backend, and a TensorFlow tensor whose size cannot be computed. They use the
// codes of diagnosis.h; the caching-allocator rules (diagnose) decide every other form.
#pragma once

#include <optional>

#include "analyses/oom/diagnosis.h"
#include "analyses/oom/oom_message.h"

namespace vramtrace {

/// The diagnosis of `m` when its form decides it, from the figures it prints only:
///  - cuda_error: `undetermined`, with the causes of a CUDA out-of-memory error that has no
///    allocator figures (an asynchronous error reported at a later call, an allocation outside the
///    caching allocator, other processes, a context created on a full GPU) and how to tell them;
///  - cuda_library: `outside_allocator` (a library's handle or workspace could not get device
///    memory outside PyTorch's caching allocator), with what to check; for the NOT_INITIALIZED and
///    INTERNAL_ERROR statuses also a driver and library mismatch;
///  - cupy: `exceeds_device` or `capacity` against the pool's limit; without a limit `undetermined`
///    (the device's size is not printed), with the pool's figures;
///  - xla_memory_space: `capacity` (the compiled program needs more of that memory than there is),
///    with the overshoot computed and compared with the printed one;
///  - pytorch_async: `exceeds_device`, `capacity` (of the memory fraction's limit, or of what the
///    device had left), `unexplained` or `undetermined`;
///  - tensorflow_tensor and tensorflow_bfc whose request cannot be computed (an unknown type, an
///    unreadable shape): `undetermined`, saying which part is missing.
/// nullopt for every other form. Pure; thread-safe.
std::optional<Diagnosis> diagnose_form(const OomMessage& m);

}  // namespace vramtrace
