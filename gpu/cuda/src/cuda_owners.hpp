#pragma once
// Move-only owners of CUDA resources, and the timing of a bulk copy with them. Internal to
// glint::gpu (includes the CUDA runtime header); public headers never include this. Constructors
// throw CudaError, destructors only log.
#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "check.cuh"
#include "stream_view.hpp"

namespace glint::gpu::detail {

/// Makes `device` current for the lifetime of the guard and restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    GLINT_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) GLINT_CUDA_CHECK(cudaSetDevice(device));
    changed_ = previous_ != device;
  }
  ~DeviceGuard() {
    if (changed_) GLINT_CUDA_LOG(cudaSetDevice(previous_));
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool changed_ = false;
};

/// Scheduling priority of a stream's kernels. CUDA's default is the lowest priority, so cluster
/// finding runs on `high` streams and background work (reconstruction) on `low` ones: when both
/// have blocks waiting, the finder's are scheduled first.
enum class StreamPriority { normal, high, low };

class Stream {
 public:
  explicit Stream(StreamPriority priority = StreamPriority::normal) {
    if (priority == StreamPriority::normal) {
      GLINT_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking));
      return;
    }
    int least = 0, greatest = 0;
    GLINT_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    GLINT_CUDA_CHECK(cudaStreamCreateWithPriority(
        &s_, cudaStreamNonBlocking, priority == StreamPriority::high ? greatest : least));
  }
  ~Stream() { reset(); }
  Stream(Stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  Stream& operator=(Stream&& o) noexcept {
    if (this != &o) {
      reset();
      s_ = std::exchange(o.s_, nullptr);
    }
    return *this;
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }
  StreamView view() const { return StreamView(s_); }
  operator StreamView() const { return view(); }  // NOLINT: a stream lends itself as a view
  void synchronize() const { GLINT_CUDA_CHECK(cudaStreamSynchronize(s_)); }

 private:
  void reset() noexcept {
    if (s_) GLINT_CUDA_LOG(cudaStreamDestroy(s_));
    s_ = nullptr;
  }
  cudaStream_t s_ = nullptr;
};

class Event {
 public:
  /// timing: an event that can be used with cudaEventElapsedTime.
  explicit Event(bool timing = false) {
    GLINT_CUDA_CHECK(cudaEventCreateWithFlags(&e_, timing ? cudaEventDefault
                                                          : cudaEventDisableTiming));
  }
  ~Event() { reset(); }
  Event(Event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  Event& operator=(Event&& o) noexcept {
    if (this != &o) {
      reset();
      e_ = std::exchange(o.e_, nullptr);
    }
    return *this;
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return e_; }
  void record(StreamView s) const { GLINT_CUDA_CHECK(cudaEventRecord(e_, s.get())); }
  void synchronize() const { GLINT_CUDA_CHECK(cudaEventSynchronize(e_)); }

 private:
  void reset() noexcept {
    if (e_) GLINT_CUDA_LOG(cudaEventDestroy(e_));
    e_ = nullptr;
  }
  cudaEvent_t e_ = nullptr;
};

/// Device memory of `n` elements of T (uninitialised).
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t n) : n_(n) {
    if (n > 0) GLINT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p_), n * sizeof(T)));
  }
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() const { return p_; }
  std::size_t size() const { return n_; }
  std::size_t bytes() const { return n_ * sizeof(T); }
  void zero(StreamView s) const {
    if (n_) GLINT_CUDA_CHECK(cudaMemsetAsync(p_, 0, bytes(), s.get()));
  }

 private:
  void reset() noexcept {
    if (p_) GLINT_CUDA_LOG(cudaFree(p_));
    p_ = nullptr;
    n_ = 0;
  }
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

/// Page-locked host memory, mapped into the device address space (unified addressing), so
/// kernels may write results straight into it.
template <class T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(std::size_t n) : n_(n) {
    if (n > 0)
      GLINT_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&p_), n * sizeof(T),
                                     cudaHostAllocMapped | cudaHostAllocPortable));
  }
  ~PinnedBuffer() { reset(); }
  PinnedBuffer(PinnedBuffer&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  T* get() const { return p_; }
  std::size_t size() const { return n_; }
  std::size_t bytes() const { return n_ * sizeof(T); }

 private:
  void reset() noexcept {
    if (p_) GLINT_CUDA_LOG(cudaFreeHost(p_));
    p_ = nullptr;
    n_ = 0;
  }
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

/// An instantiated graph (the captured template is destroyed once instantiated).
class GraphExec {
 public:
  GraphExec() = default;
  explicit GraphExec(cudaGraph_t graph) {
    const cudaError_t e = cudaGraphInstantiate(&g_, graph, 0);
    GLINT_CUDA_LOG(cudaGraphDestroy(graph));
    if (e != cudaSuccess) throw_cuda(e, "cudaGraphInstantiate", __FILE__, __LINE__);
  }
  ~GraphExec() { reset(); }
  GraphExec(GraphExec&& o) noexcept : g_(std::exchange(o.g_, nullptr)) {}
  GraphExec& operator=(GraphExec&& o) noexcept {
    if (this != &o) {
      reset();
      g_ = std::exchange(o.g_, nullptr);
    }
    return *this;
  }
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;
  explicit operator bool() const { return g_ != nullptr; }
  void launch(StreamView s) const { GLINT_CUDA_CHECK(cudaGraphLaunch(g_, s.get())); }

 private:
  void reset() noexcept {
    if (g_) GLINT_CUDA_LOG(cudaGraphExecDestroy(g_));
    g_ = nullptr;
  }
  cudaGraphExec_t g_ = nullptr;
};

/// Milliseconds one cudaMemcpyAsync of `bytes` from `src` to `dst` takes on stream `s`, timed
/// with events around each copy: the median (glint/detail/median.hpp) of `repeats` copies (at
/// least one) after `warmups` uncounted ones. Work already queued on `s` runs first; returns with
/// the copies done. Defined in transfer.cpp; the bandwidth floors use it.
double median_copy_ms(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                      StreamView s, int repeats, int warmups);

}  // namespace glint::gpu::detail
