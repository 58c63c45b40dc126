#include "glint/gpu/find_tuning.hpp"

#include <stdexcept>
#include <string>

namespace glint::gpu {

void validate(const FindTuning& t) {
  if (t.find_threads != 0 &&
      (t.find_threads < 128 || t.find_threads > 1024 || t.find_threads % 32 != 0))
    throw std::invalid_argument("GPU finder tuning: find_threads " +
                                std::to_string(t.find_threads) +
                                " (allowed: 0 for the defaults, or a multiple of 32 from 128 to "
                                "1024)");
  if (t.pack_regions < 1 || t.pack_regions > 1024)
    throw std::invalid_argument("GPU finder tuning: pack_regions " +
                                std::to_string(t.pack_regions) + " (allowed: 1 to 1024)");
  if (t.max_segments < 0)
    throw std::invalid_argument("GPU finder tuning: max_segments " +
                                std::to_string(t.max_segments) +
                                " (allowed: 0 for as many as fit, or a positive count)");
}

}  // namespace glint::gpu
