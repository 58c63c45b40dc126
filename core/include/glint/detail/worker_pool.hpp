#pragma once
// Persistent worker threads (the CPU finder, the CPU TV solver): created once, woken per batch, and
// synchronised inside a batch by a barrier that spins briefly before sleeping (phases of a frame
// last tens of microseconds; a futex round trip per phase would cost as much).
#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace glint::detail {

/// Spins, then yields, then sleeps on the atomic until `value` differs from `old`.
inline void wait_for_change(const std::atomic<uint32_t>& value, uint32_t old) {
  for (int k = 0; k < 4096; ++k) {
    if (value.load(std::memory_order_acquire) != old) return;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
  for (int k = 0; k < 64; ++k) {
    if (value.load(std::memory_order_acquire) != old) return;
    std::this_thread::yield();
  }
  while (value.load(std::memory_order_acquire) == old) value.wait(old, std::memory_order_acquire);
}

/// A reusable barrier for a fixed number of participants.
class SpinBarrier {
 public:
  explicit SpinBarrier(unsigned participants) : n_(participants) {}
  void arrive_and_wait() {
    if (n_ <= 1) return;
    const uint32_t gen = gen_.load(std::memory_order_acquire);
    if (count_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_) {
      count_.store(0, std::memory_order_relaxed);
      gen_.store(gen + 1, std::memory_order_release);
      gen_.notify_all();
      return;
    }
    wait_for_change(gen_, gen);
  }

 private:
  const unsigned n_;
  std::atomic<unsigned> count_{0};
  std::atomic<uint32_t> gen_{0};
};

/// `size()` participants: the calling thread (index 0) and size()-1 persistent workers.
class WorkerPool {
 public:
  explicit WorkerPool(unsigned participants)
      : n_(participants == 0 ? 1 : participants), barrier_(n_) {
    for (unsigned t = 1; t < n_; ++t)
      workers_.emplace_back([this, t](std::stop_token stop) { loop(t, stop); });
  }
  ~WorkerPool() {
    for (auto& w : workers_) w.request_stop();
    epoch_.fetch_add(1, std::memory_order_release);
    epoch_.notify_all();
    workers_.clear();  // joins
  }
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  unsigned size() const { return n_; }

  /// Runs job(t) on every participant t (the caller is 0) and returns when all have finished.
  /// The job must not throw.
  void run(const std::function<void(unsigned)>& job) {
    job_ = &job;
    epoch_.fetch_add(1, std::memory_order_release);
    epoch_.notify_all();
    job(0);
    barrier_.arrive_and_wait();
  }

  /// For use inside a job: every participant waits until all have arrived.
  void barrier() { barrier_.arrive_and_wait(); }

 private:
  void loop(unsigned t, std::stop_token stop) {
    uint32_t seen = 0;
    for (;;) {
      wait_for_change(epoch_, seen);
      seen = epoch_.load(std::memory_order_acquire);
      if (stop.stop_requested()) return;
      (*job_)(t);
      barrier_.arrive_and_wait();
    }
  }

  const unsigned n_;
  SpinBarrier barrier_;
  std::atomic<uint32_t> epoch_{0};
  const std::function<void(unsigned)>* job_ = nullptr;
  std::vector<std::jthread> workers_;
};

}  // namespace glint::detail
