// Built without CUDA: asking for the GPU products' accumulator says so.
#include <stdexcept>

#include "glint/gpu/products_accumulator.hpp"

namespace glint::gpu {

struct ProductsAccumulator::Impl {};

namespace {
[[noreturn]] void unbuilt() {
  throw std::runtime_error("the GPU products accumulator is not built into this glint (built "
                           "without CUDA)");
}
}  // namespace

ProductsAccumulator::ProductsAccumulator(const products::ProductSettings&, int, unsigned) {
  unbuilt();
}
ProductsAccumulator::~ProductsAccumulator() = default;
const products::ProductSettings& ProductsAccumulator::settings() const { unbuilt(); }
void ProductsAccumulator::add(const ClusterTable&, uint64_t) { unbuilt(); }
void ProductsAccumulator::flush() { unbuilt(); }
uint64_t ProductsAccumulator::batches_done() const { unbuilt(); }
products::ProductSums ProductsAccumulator::sums(bool) const { unbuilt(); }
std::vector<uint32_t> ProductsAccumulator::take_slice(uint64_t) { unbuilt(); }
double ProductsAccumulator::wait_seconds() const { unbuilt(); }
double ProductsAccumulator::copy_seconds() const { unbuilt(); }

}  // namespace glint::gpu
