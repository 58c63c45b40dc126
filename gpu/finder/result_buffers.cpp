#include "result_buffers.hpp"

#include <algorithm>
#include <limits>

namespace glint::gpu::detail {

OutLayout out_layout(int batch, uint32_t segments, uint64_t capacity, int values, bool gains) {
  OutLayout l{};
  auto align = [](std::size_t v) { return (v + 255) / 256 * 256; };
  const std::size_t pieces = static_cast<std::size_t>(batch) * segments;
  l.capacity = capacity;
  l.segments = segments;
  l.has_gains = gains;
  l.counts = 256;
  l.gains = align(l.counts + sizeof(uint32_t) * batch);
  l.piece_counts = gains ? align(l.gains + 3 * sizeof(uint32_t) * batch) : l.gains;
  l.piece_first = align(l.piece_counts + sizeof(uint32_t) * pieces);
  l.x = align(l.piece_first + sizeof(uint32_t) * pieces);
  l.y = align(l.x + sizeof(uint16_t) * capacity);
  l.data = align(l.y + sizeof(uint16_t) * capacity);
  l.bytes = align(l.data + sizeof(int32_t) * capacity * values);
  return l;
}

void bind_output(FindLaunch& p, unsigned char* out, const OutLayout& l, bool narrow,
                 uint32_t chunk) {
  p.out_flags = reinterpret_cast<uint32_t*>(out) + kFlagsWord;
  p.out_alloc = reinterpret_cast<uint32_t*>(out) + kAllocWord;
  p.frame_totals = reinterpret_cast<uint32_t*>(out + l.counts);
  p.gain_counts = l.has_gains ? reinterpret_cast<uint32_t*>(out + l.gains) : nullptr;
  p.piece_counts = reinterpret_cast<uint32_t*>(out + l.piece_counts);
  p.piece_first = reinterpret_cast<uint32_t*>(out + l.piece_first);
  p.out_x = reinterpret_cast<uint16_t*>(out + l.x);
  p.out_y = reinterpret_cast<uint16_t*>(out + l.y);
  p.out_data = out + l.data;
  p.narrow = narrow;
  p.out_capacity = static_cast<uint32_t>(
      std::min<uint64_t>(l.capacity, std::numeric_limits<uint32_t>::max()));
  p.out_chunk = std::max<uint32_t>(chunk, 1);
}

void zero_output(unsigned char* out, const OutLayout& l, StreamView s) {
  GLINT_CUDA_CHECK(cudaMemsetAsync(out, 0, l.piece_counts, s.get()));
}

GpuBandView band_view(const unsigned char* out, const OutLayout& l, int n, uint64_t clusters,
                      int values, bool narrow) {
  const auto words = [&](std::size_t off, std::size_t count) {
    return std::span<const uint32_t>(reinterpret_cast<const uint32_t*>(out + off), count);
  };
  const std::size_t pieces = static_cast<std::size_t>(n) * l.segments;
  clusters = std::min(clusters, l.capacity);
  GpuBandView b;
  b.counts = words(l.counts, static_cast<std::size_t>(n));
  if (l.has_gains) b.gain_counts = words(l.gains, 3 * static_cast<std::size_t>(n));
  b.piece_counts = words(l.piece_counts, pieces);
  b.piece_first = words(l.piece_first, pieces);
  b.pieces_per_frame = l.segments;
  b.x = std::span<const uint16_t>(reinterpret_cast<const uint16_t*>(out + l.x), clusters);
  b.y = std::span<const uint16_t>(reinterpret_cast<const uint16_t*>(out + l.y), clusters);
  if (narrow)
    b.data16 = std::span<const int16_t>(reinterpret_cast<const int16_t*>(out + l.data),
                                        clusters * values);
  else
    b.data = std::span<const int32_t>(reinterpret_cast<const int32_t*>(out + l.data),
                                      clusters * values);
  return b;
}

bool ResultBuffers::reserve(int batch, uint32_t segments, int values, bool gains,
                            uint64_t capacity) {
  const bool same_shape =
      batch_ == batch && segments_ == segments && values_ == values && gains_ == gains;
  if (same_shape && capacity_ >= capacity) return false;
  batch_ = batch;
  segments_ = segments;
  values_ = values;
  gains_ = gains;
  capacity_ = std::max(capacity_, capacity);
  const std::size_t bytes = layout().bytes;
  out_ = PinnedBuffer<unsigned char>(bytes);
  dout_ = DeviceBuffer<unsigned char>(bytes);
  return true;
}

void ResultBuffers::bind(FindLaunch& p, bool narrow, uint32_t chunk) const {
  bind_output(p, dout_.get(), layout(), narrow, chunk);
}

void ResultBuffers::enqueue_copy(uint64_t clusters, bool narrow, StreamView s) {
  const OutLayout l = layout();
  clusters = std::min(clusters, capacity_);
  const auto range = [&](std::size_t from, std::size_t to) {
    if (to > from)
      GLINT_CUDA_CHECK(cudaMemcpyAsync(out_.get() + from, dout_.get() + from, to - from,
                                       cudaMemcpyDeviceToHost, s.get()));
  };
  const std::size_t value_bytes = narrow ? sizeof(int16_t) : sizeof(int32_t);
  range(0, l.x + sizeof(uint16_t) * clusters);  // header, counts, gain counts, directory, x
  range(l.y, l.y + sizeof(uint16_t) * clusters);
  range(l.data, l.data + value_bytes * values_ * clusters);
  copied = clusters;
  copied_narrow = narrow;
}

uint64_t ResultBuffers::total(int n) const {
  uint64_t t = 0;
  for (const uint32_t c : frame_counts(n)) t += c;
  return t;
}

std::span<const uint32_t> ResultBuffers::frame_counts(int n) const {
  return {reinterpret_cast<const uint32_t*>(out_.get() + layout().counts),
          static_cast<std::size_t>(n)};
}

}  // namespace glint::gpu::detail
