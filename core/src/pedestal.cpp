#include "glint/pedestal.hpp"

#include <algorithm>

#include "glint/cluster_math.hpp"

namespace glint {

PedestalState::PedestalState(FrameShape s, uint32_t window_length)
    : shape(s), window(window_length), sum(s.pixels(), 0.0), sum2(s.pixels(), 0.0),
      count(s.pixels(), 0u) {}

double PedestalState::mean(std::size_t i) const { return cluster_math::mean_of(sum[i], count[i]); }

double PedestalState::noise(std::size_t i) const {
  return cluster_math::noise_of(sum2[i], count[i], mean(i));
}

std::vector<double> PedestalState::means() const {
  std::vector<double> out(sum.size());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = mean(i);
  return out;
}

std::vector<double> PedestalState::noises() const {
  std::vector<double> out(sum.size());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = noise(i);
  return out;
}

uint32_t PedestalState::min_count() const {
  return count.empty() ? 0u : *std::min_element(count.begin(), count.end());
}

}  // namespace glint
