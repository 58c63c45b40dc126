#pragma once
// The cluster-finder interface. Every backend (the sequential reference, the multi-threaded CPU
// backend, the GPU engine) produces byte-identical clusters and pedestal state for the same
// frames (docs/cluster-finding.md).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "glint/cluster_table.hpp"
#include "glint/frame.hpp"
#include "glint/pedestal.hpp"

namespace glint {

struct FinderParams {
  FrameShape shape{};
  int cluster_size = 3;        ///< odd: 3, 5, 7 or 9
  double n_sigma = 5.0;
  uint32_t pedestal_window = 1000;
};

/// Throws std::invalid_argument naming the bad parameter (unsupported cluster size, empty shape,
/// a frame larger than 65536 pixels in x or y, non-positive n_sigma or window).
void validate(const FinderParams& params);

/// Checks frames handed to ClusterFinder::push_dark: a whole number of frames of `params.shape`.
/// Returns the number of frames; throws std::invalid_argument saying what does not fit.
std::size_t check_dark_frames(const FinderParams& params, std::span<const uint16_t> frames);

/// Checks the arguments of ClusterFinder::find: `frames` holds frame_numbers.size() whole frames
/// and `out` has the finder's cluster size. Throws std::invalid_argument saying what does not fit.
void check_find_arguments(const FinderParams& params, std::span<const uint16_t> frames,
                          std::span<const uint64_t> frame_numbers, const ClusterTable& out);

class ClusterFinder {
 public:
  virtual ~ClusterFinder() = default;

  virtual const FinderParams& params() const = 0;

  /// Accumulates dark (pedestal) frames: `frames` holds whole frames back to back.
  virtual void push_dark(std::span<const uint16_t> frames) = 0;

  /// Finds clusters in data frames, in order, updating the pedestal as the reference does.
  /// `frames` holds frame_numbers.size() whole frames back to back; one record per frame is
  /// appended to `out`, in order.
  virtual void find(std::span<const uint16_t> frames, std::span<const uint64_t> frame_numbers,
                    ClusterTable& out) = 0;

  /// Snapshot of the current pedestal (waits for work in flight).
  virtual PedestalState pedestal() const = 0;
  /// Replaces the pedestal (e.g. the one kept from the previous run). Shape and window must match.
  virtual void load_pedestal(const PedestalState& state) = 0;

  /// "cpu reference", "cpu (16 threads)", "gpu (NVIDIA H200)", ...
  virtual std::string description() const = 0;
};

/// The single-threaded reference semantics, written for clarity; the oracle for every backend.
std::unique_ptr<ClusterFinder> make_reference_finder(const FinderParams& params);

/// The fast exact CPU backend: each frame is split into row bands over `threads` persistent
/// threads (0: all hardware threads; capped at the number of rows); frames stay in order. Output
/// and pedestal are bit-identical to the reference finder's at any thread count.
std::unique_ptr<ClusterFinder> make_cpu_finder(const FinderParams& params, unsigned threads);

}  // namespace glint
