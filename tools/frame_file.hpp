#pragma once
// Detector frames stored as one (N, H, W) uint16 HDF5 dataset: the input of `glint find`, the
// output of `glint synth`.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>

#include "glint/frame.hpp"

namespace glint::tools {

/// Bad input: a missing file or dataset, a wrong type or shape. The message names the file, the
/// dataset and what was expected.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Frames of `shape` in about 64 MiB, at least one: the unit in which the tools read and write
/// frame files, so that memory stays bounded for any frame size.
inline uint64_t frames_per_chunk(FrameShape shape) {
  return std::max<uint64_t>(1, (64ull << 20) / (sizeof(uint16_t) * shape.pixels()));
}

class FrameFileReader {
 public:
  /// Opens `dataset` in `path`. Throws InputError unless it is a 3-dimensional dataset of
  /// unsigned 16-bit integers.
  FrameFileReader(const std::filesystem::path& path, const std::string& dataset);
  ~FrameFileReader();
  FrameFileReader(const FrameFileReader&) = delete;
  FrameFileReader& operator=(const FrameFileReader&) = delete;

  uint64_t frames() const { return frames_; }
  FrameShape shape() const { return shape_; }

  /// Reads frames [first, first + count) into `out` (count whole frames). Throws
  /// std::runtime_error naming the file on a read failure.
  void read(uint64_t first, uint64_t count, std::span<uint16_t> out);

 private:
  struct Handles;
  std::unique_ptr<Handles> h_;
  std::string where_;
  uint64_t frames_ = 0;
  FrameShape shape_{};
};

class FrameFileWriter {
 public:
  /// Creates `path` with an (frames, rows, cols) uint16 dataset `dataset`, chunked by frame.
  /// Refuses an existing file unless `overwrite`. Throws std::runtime_error naming the file.
  FrameFileWriter(const std::filesystem::path& path, const std::string& dataset,
                  uint64_t frames, FrameShape shape, bool overwrite);
  ~FrameFileWriter();
  FrameFileWriter(const FrameFileWriter&) = delete;
  FrameFileWriter& operator=(const FrameFileWriter&) = delete;

  /// Writes frames [first, first + count) from `frames` (count whole frames).
  void write(uint64_t first, uint64_t count, std::span<const uint16_t> frames);
  /// Attaches an unsigned integer attribute to the dataset (e.g. the number of dark frames).
  void set_attribute(const std::string& name, uint64_t value);
  /// Flushes and closes; throws on failure. Idempotent.
  void close();

 private:
  struct Handles;
  std::unique_ptr<Handles> h_;
  std::string where_;
  uint64_t frames_ = 0;
  FrameShape shape_{};
};

}  // namespace glint::tools
