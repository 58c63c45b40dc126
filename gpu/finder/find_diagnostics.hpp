#pragma once
// Diagnosis aids of the GPU finder (FindTuning::profile, ::timeline and ::trace), for the first GPU
// only: the find kernel's cycle counters, logged when the finder is destroyed, per-batch device
// and host times, and per-segment time stamps of every step of the kernel's frames, written as
// CSV. Internal to the GPU finder; off by default, and then they cost nothing but null pointers in
// the find launch.
#include <cstdint>
#include <string>
#include <vector>

#include "cuda_owners.hpp"
#include "find_kernels.hpp"
#include "glint/gpu/find_tuning.hpp"
#include "lane_plan.hpp"

namespace glint::gpu::detail {

/// One batch on the first GPU (microseconds since the finder was built).
struct TimelineRow {
  uint64_t seq = 0;
  int slot = 0, fb = 0, n = 0;
  uint64_t clusters = 0;
  float up0 = 0, up1 = 0, f0 = 0, f1 = 0, d0 = 0, d1 = 0;
  double h_submit = 0, h_wait0 = 0, h_wait1 = 0;
};

class FindDiagnostics {
 public:
  explicit FindDiagnostics(const FindTuning& tuning)
      : profile_on_(tuning.profile), timeline_path_(tuning.timeline),
        trace_path_(tuning.trace) {}
  /// Allocates the kernel counters (with the profile on) and the trace records (with a trace
  /// path) for the first lane's `blocks` find blocks and `segments` segments (its device
  /// current), cleared on `s`.
  void attach(uint32_t blocks, uint32_t segments, StreamView s);
  /// Points a find launch of the first lane at the counters and the trace records (null where
  /// off).
  void bind(FindLaunch& p) const;
  bool timeline() const { return !timeline_path_.empty(); }
  void add(const TimelineRow& row) { rows_.push_back(row); }
  /// The profile of `frames` frames on the first lane (its device current) into the log, the
  /// timeline and the trace into their files.
  void report(const LanePlan& lane, uint64_t frames) const;
  /// Frees the counters (with the first lane's device current).
  void release() {
    profile_ = {};
    release_ns_ = {};
    launch_ts_ = {};
    trace_ = {};
  }

 private:
  void report_profile(const LanePlan& lane, uint64_t frames) const;
  void report_timeline() const;
  void report_trace(const LanePlan& lane) const;

  bool profile_on_ = false;
  std::string timeline_path_;
  std::string trace_path_;
  std::vector<TimelineRow> rows_;
  DeviceBuffer<unsigned long long> profile_;     // cycles per band and phase
  DeviceBuffer<unsigned long long> release_ns_;  // release timestamps
  DeviceBuffer<unsigned long long> launch_ts_;   // block entry/exit times
  DeviceBuffer<unsigned long long> trace_;       // FindTrace records
};

}  // namespace glint::gpu::detail
