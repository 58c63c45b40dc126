#pragma once
// The frames of a simulated detector as the HDF5 frame file `glint find` reads: the same images
// a glintd run on `glint sim`'s stream gets, for comparing the two.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "glint/pipeline/stream_simulator.hpp"

namespace glint::testing {

/// `frames` (n x rows x cols) as the uint16 dataset /data of a new file `path`.
inline void write_frames(const std::string& path, std::span<const uint16_t> frames, uint64_t n,
                         uint32_t rows, uint32_t cols) {
  const hsize_t dims[3] = {n, rows, cols};
  ASSERT_EQ(frames.size(), n * rows * cols);
  const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  const hid_t space = H5Screate_simple(3, dims, nullptr);
  const hid_t ds =
      H5Dcreate2(f, "data", H5T_STD_U16LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(H5Dwrite(ds, H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, frames.data()), 0);
  H5Dclose(ds);
  H5Sclose(space);
  H5Fclose(f);
}

/// Frames [0, n) of `source` as an n x rows x cols uint16 dataset /data in a new file `path`.
inline void write_sim_frames(const std::string& path, const pipeline::SimImageSource& source,
                             uint64_t n, uint32_t rows, uint32_t cols) {
  const std::size_t pixels = std::size_t{rows} * cols;
  std::vector<uint16_t> frames(n * pixels);
  for (uint64_t i = 0; i < n; ++i)
    source.fill(i, std::span<uint16_t>(frames).subspan(i * pixels, pixels));
  write_frames(path, frames, n, rows, cols);
}

}  // namespace glint::testing
