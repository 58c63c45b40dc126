#include "glint/jungfrau.hpp"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <system_error>

namespace glint::jungfrau {

GainCounts count_gains(std::span<const uint16_t> frame) {
  uint32_t by_bits[4] = {0, 0, 0, 0};
  for (const uint16_t v : frame) ++by_bits[gain_bits(v)];
  return GainCounts{by_bits[1], by_bits[3], by_bits[2]};
}

void Calibration::validate() const {
  const std::size_t n = kStages * shape.pixels();
  if (shape.pixels() == 0) throw std::invalid_argument("calibration: empty frame shape");
  if (gain.size() != n)
    throw std::invalid_argument("calibration: the gain table holds " + std::to_string(gain.size()) +
                                " values, expected 3 x " + std::to_string(shape.rows) + " x " +
                                std::to_string(shape.cols));
  if (pedestal.size() != n)
    throw std::invalid_argument("calibration: the pedestal table holds " +
                                std::to_string(pedestal.size()) + " values, expected 3 x " +
                                std::to_string(shape.rows) + " x " + std::to_string(shape.cols));
  for (std::size_t k = 0; k < n; ++k)
    if (!(std::isfinite(gain[k]) && gain[k] != 0.0))
      throw std::invalid_argument("calibration: gain of G" + std::to_string(k / shape.pixels()) +
                                  " pixel " + std::to_string(k % shape.pixels()) + " is " +
                                  std::to_string(gain[k]) + " (must be finite and non-zero)");
}

StagePedestal::StagePedestal(FrameShape shape)
    : shape_(shape), sum_(kStages * shape.pixels(), 0), count_(kStages * shape.pixels(), 0) {}

void StagePedestal::add(std::span<const uint16_t> frame) {
  const std::size_t np = shape_.pixels();
  if (frame.size() != np) throw std::invalid_argument("StagePedestal::add: frame size differs");
  for (std::size_t i = 0; i < np; ++i) {
    const std::size_t k = static_cast<std::size_t>(stage(frame[i])) * np + i;
    sum_[k] += adc(frame[i]);
    ++count_[k];
  }
  ++frames_;
}

std::vector<double> StagePedestal::means() const {
  std::vector<double> out(sum_.size(), 0.0);
  for (std::size_t k = 0; k < out.size(); ++k)
    if (count_[k] != 0) out[k] = static_cast<double>(sum_[k]) / static_cast<double>(count_[k]);
  return out;
}

namespace {

std::vector<double> read_doubles(const std::filesystem::path& path, std::size_t arrays_min,
                                 std::size_t arrays_max, std::size_t pixels, const char* what,
                                 std::size_t& arrays) {
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(path, ec);
  if (ec) throw std::runtime_error(std::string(what) + " '" + path.string() + "': " + ec.message());
  const std::size_t array_bytes = pixels * sizeof(double);
  arrays = static_cast<std::size_t>(bytes / array_bytes);
  if (bytes % array_bytes != 0 || arrays < arrays_min || arrays > arrays_max)
    throw std::runtime_error(std::string(what) + " '" + path.string() + "' holds " +
                             std::to_string(bytes) + " bytes; expected " +
                             std::to_string(arrays_min) +
                             (arrays_max != arrays_min ? " or " + std::to_string(arrays_max) : "") +
                             " float64 arrays of " + std::to_string(pixels) + " pixels (" +
                             std::to_string(arrays_min * array_bytes) + " bytes" +
                             (arrays_max != arrays_min
                                  ? " or " + std::to_string(arrays_max * array_bytes) + " bytes"
                                  : "") +
                             ")");
  std::vector<double> out(arrays * pixels);
  std::ifstream in(path, std::ios::binary);
  if (!in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(bytes)))
    throw std::runtime_error(std::string(what) + " '" + path.string() + "': read failed");
  return out;  // little-endian hosts only (glint targets x86-64 and aarch64 little-endian)
}

}  // namespace

std::vector<double> read_gain_file(const std::filesystem::path& path, FrameShape shape,
                                   bool hg0) {
  const std::size_t np = shape.pixels();
  std::size_t arrays = 0;
  std::vector<double> all = read_doubles(path, 3, 6, np, "gain file", arrays);
  if (arrays != 3 && arrays != 6)
    throw std::runtime_error("gain file '" + path.string() + "' holds " + std::to_string(arrays) +
                             " arrays; expected 3 (G0, G1, G2) or 6 (and HG0, HG1, HG2)");
  if (hg0) {
    if (arrays < 4)
      throw std::runtime_error("gain file '" + path.string() +
                               "' has no HG0 array (calibration.hg0 needs 6 arrays)");
    std::copy(all.begin() + 3 * np, all.begin() + 4 * np, all.begin());
  }
  all.resize(kStages * np);
  return all;
}

std::vector<double> read_pedestal_file(const std::filesystem::path& path, FrameShape shape) {
  std::size_t arrays = 0;
  return read_doubles(path, 3, 3, shape.pixels(), "pedestal file", arrays);
}

void write_pedestal_file(const std::filesystem::path& path, std::span<const double> pedestal) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(pedestal.data()),
            static_cast<std::streamsize>(pedestal.size_bytes()));
  out.close();
  if (!out) throw std::runtime_error("pedestal file '" + path.string() + "': write failed");
}

std::shared_ptr<Calibration> load_calibration(FrameShape shape,
                                              const std::filesystem::path& gain_file,
                                              const std::filesystem::path& pedestal_file,
                                              bool hg0) {
  auto cal = std::make_shared<Calibration>();
  cal->shape = shape;
  cal->gain = read_gain_file(gain_file, shape, hg0);
  if (pedestal_file.empty()) {
    cal->pedestal.assign(kStages * shape.pixels(), 0.0);
  } else {
    cal->pedestal = read_pedestal_file(pedestal_file, shape);
    cal->pedestal_from_dark[1] = cal->pedestal_from_dark[2] = false;
  }
  try {
    cal->validate();
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error("gain file '" + gain_file.string() + "': " + e.what());
  }
  return cal;
}

}  // namespace glint::jungfrau
