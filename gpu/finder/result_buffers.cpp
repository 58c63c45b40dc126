#include "result_buffers.hpp"

namespace glint::gpu::detail {

OutLayout out_layout(int batch, uint64_t capacity, int values, bool gains) {
  OutLayout l{};
  auto align = [](std::size_t v) { return (v + 255) / 256 * 256; };
  l.counts = 256;
  l.gains = align(l.counts + sizeof(uint32_t) * batch);
  l.has_gains = gains;
  l.x = gains ? align(l.gains + 3 * sizeof(uint32_t) * batch) : l.gains;
  l.y = align(l.x + sizeof(uint16_t) * capacity);
  l.data = align(l.y + sizeof(uint16_t) * capacity);
  l.bytes = align(l.data + sizeof(int32_t) * capacity * values);
  return l;
}

GpuBandView band_view(const unsigned char* out, const OutLayout& l, int n, int values,
                      bool narrow) {
  const auto* counts = reinterpret_cast<const uint32_t*>(out + l.counts);
  uint64_t here = 0;
  for (int i = 0; i < n; ++i) here += counts[i];
  GpuBandView b;
  b.counts = std::span<const uint32_t>(counts, n);
  if (l.has_gains)
    b.gain_counts = std::span<const uint32_t>(reinterpret_cast<const uint32_t*>(out + l.gains),
                                              3 * static_cast<std::size_t>(n));
  b.x = std::span<const uint16_t>(reinterpret_cast<const uint16_t*>(out + l.x), here);
  b.y = std::span<const uint16_t>(reinterpret_cast<const uint16_t*>(out + l.y), here);
  if (narrow)
    b.data16 = std::span<const int16_t>(reinterpret_cast<const int16_t*>(out + l.data),
                                        here * values);
  else
    b.data = std::span<const int32_t>(reinterpret_cast<const int32_t*>(out + l.data),
                                      here * values);
  return b;
}

RegionBuffers::RegionBuffers(std::size_t batch, uint32_t blocks, uint32_t capacity, int values,
                             bool gains)
    : counts_(batch * blocks), xy_(batch * blocks * capacity), totals_(batch),
      data_(batch * blocks * capacity * values), capacity_(capacity) {
  if (gains) gains_ = DeviceBuffer<uint32_t>(3 * batch);
}

void RegionBuffers::zero(int n, StreamView s) const {
  GLINT_CUDA_CHECK(cudaMemsetAsync(totals_.get(), 0, sizeof(uint32_t) * n, s.get()));
  if (gains_.get())
    GLINT_CUDA_CHECK(cudaMemsetAsync(gains_.get(), 0, 3 * sizeof(uint32_t) * n, s.get()));
}

void RegionBuffers::bind(FindLaunch& p) const {
  p.region_counts = counts_.get();
  p.region_xy = xy_.get();
  p.region_data = data_.get();
  p.region_capacity = capacity_;
  p.frame_totals = totals_.get();
  p.gain_counts = gains_.get();
}

PackLaunch RegionBuffers::pack(int n, uint32_t blocks, int values, const OutLayout& l,
                               unsigned char* out, uint64_t out_capacity) const {
  PackLaunch p;
  p.n_frames = static_cast<uint32_t>(n);
  p.blocks = blocks;
  p.region_capacity = capacity_;
  p.values = values;
  p.region_counts = counts_.get();
  p.region_xy = xy_.get();
  p.region_data = data_.get();
  p.frame_totals = totals_.get();
  p.gain_counts = gains_.get();
  p.out_counts = reinterpret_cast<uint32_t*>(out + l.counts);
  p.out_gains = reinterpret_cast<uint32_t*>(out + l.gains);
  p.out_x = reinterpret_cast<uint16_t*>(out + l.x);
  p.out_y = reinterpret_cast<uint16_t*>(out + l.y);
  p.out_data = reinterpret_cast<int32_t*>(out + l.data);
  p.out_capacity = out_capacity;
  p.out_overflow = reinterpret_cast<uint32_t*>(out);
  p.out_max_region = reinterpret_cast<uint32_t*>(out) + 1;
  return p;
}

bool ResultBuffers::reserve(int batch, uint32_t blocks, int values, bool gains,
                            uint32_t region_capacity, uint64_t out_capacity) {
  batch_ = batch;
  values_ = values;
  gains_ = gains;
  bool changed = false;
  if (regions_.capacity() < region_capacity) {
    regions_ =
        RegionBuffers(static_cast<std::size_t>(batch), blocks, region_capacity, values, gains);
    changed = true;
  }
  if (out_capacity_ < out_capacity) {
    out_capacity_ = out_capacity;
    const std::size_t bytes = layout().bytes;
    out_ = PinnedBuffer<unsigned char>(bytes);
    dout_ = DeviceBuffer<unsigned char>(bytes);
    changed = true;
  }
  return changed;
}

void ResultBuffers::enqueue_pack(int n, uint32_t blocks, uint32_t pack_regions, bool narrow,
                                 StreamView s) const {
  // Pack into device memory right after the find (a few tens of microseconds on the SMs, which
  // the next find needs whole); the copy engine brings it back while the next batch is searched.
  GLINT_CUDA_CHECK(cudaMemsetAsync(dout_.get(), 0, 2 * sizeof(uint32_t), s.get()));
  PackLaunch pk = regions_.pack(n, blocks, values_, layout(), dout_.get(), out_capacity_);
  pk.chunks = (blocks + pack_regions - 1) / pack_regions;
  if (narrow) {
    pk.out_data16 = reinterpret_cast<int16_t*>(pk.out_data);
    pk.out_data = nullptr;
  }
  launch_pack(pk, 256, s);
}

void ResultBuffers::enqueue_copy(uint64_t clusters, bool narrow, StreamView s) {
  const OutLayout l = layout();
  const auto range = [&](std::size_t from, std::size_t to) {
    if (to > from)
      GLINT_CUDA_CHECK(cudaMemcpyAsync(out_.get() + from, dout_.get() + from, to - from,
                                       cudaMemcpyDeviceToHost, s.get()));
  };
  const std::size_t value_bytes = narrow ? sizeof(int16_t) : sizeof(int32_t);
  range(0, l.x + sizeof(uint16_t) * clusters);  // flags, counts, gain counts, x
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
