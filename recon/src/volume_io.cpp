#include "glint/recon/volume_io.hpp"

#include <hdf5.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>
#include <utility>
#include <stdexcept>

#include <fmt/format.h>

#include "glint/hdf5_handle.hpp"

namespace glint::recon {

namespace {

using Hid = hdf5::Handle;

/// "NAME[I]" -> (NAME, I): one volume of an (n, Z, Y, X) stack, e.g. a run file's
/// /entry/reconstruction/input[3].
std::pair<std::string, std::optional<unsigned long long>> split_index(const std::string& dataset) {
  const auto open = dataset.rfind('[');
  if (dataset.empty() || dataset.back() != ']' || open == std::string::npos || open == 0)
    return {dataset, std::nullopt};
  const std::string digits = dataset.substr(open + 1, dataset.size() - open - 2);
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos ||
      digits.size() > 18)
    return {dataset, std::nullopt};
  return {dataset.substr(0, open), std::stoull(digits)};
}

Volume read3(const std::string& file, const std::string& spec, bool floats_only) {
  hdf5::silence_errors();
  if (!std::filesystem::exists(file))
    throw std::runtime_error(fmt::format("{}: no such file", file));
  Hid f = hdf5::open_read_only(file.c_str());
  if (!f.valid()) throw std::runtime_error(fmt::format("{}: not an HDF5 file", file));
  // A literal name wins over the NAME[I] reading.
  auto [dataset, index] = split_index(spec);
  if (index && H5Lexists(f.get(), spec.c_str(), H5P_DEFAULT) > 0) {
    dataset = spec;
    index.reset();
  }
  if (H5Lexists(f.get(), dataset.c_str(), H5P_DEFAULT) <= 0)
    throw std::runtime_error(fmt::format("{}: no dataset {}", file, dataset));
  Hid ds(H5Dopen2(f.get(), dataset.c_str(), H5P_DEFAULT), H5Dclose);
  if (!ds.valid()) throw std::runtime_error(fmt::format("{}: {} is not a dataset", file, dataset));
  Hid type(H5Dget_type(ds.get()), H5Tclose);
  const H5T_class_t cls = H5Tget_class(type.get());
  const std::size_t size = H5Tget_size(type.get());
  if (floats_only && !(cls == H5T_FLOAT && (size == 4 || size == 8)))
    throw std::runtime_error(
        fmt::format("{}:{}: expected float32 or float64 values", file, dataset));
  if (!floats_only && cls != H5T_FLOAT && cls != H5T_INTEGER)
    throw std::runtime_error(fmt::format("{}:{}: expected numbers", file, dataset));
  Hid space(H5Dget_space(ds.get()), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank != (index ? 4 : 3))
    throw std::runtime_error(
        index ? fmt::format("{}:{}: [{}] selects a volume of an (n, Z, Y, X) dataset, rank is {}",
                            file, dataset, *index, rank)
              : fmt::format("{}:{}: expected a 3D (Z, Y, X) dataset (or NAME[I] for one volume "
                            "of an (n, Z, Y, X) one), rank is {}",
                            file, dataset, rank));
  hsize_t all[4] = {1, 0, 0, 0};
  H5Sget_simple_extent_dims(space.get(), index ? all : all + 1, nullptr);
  const hsize_t* dims = all + 1;
  if (index && *index >= all[0])
    throw std::runtime_error(
        fmt::format("{}:{}: volume {} asked for, the dataset holds {}", file, dataset, *index, all[0]));
  if (dims[0] > (1u << 20) || dims[1] > (1u << 20) || dims[2] > (1u << 20))
    throw std::runtime_error(fmt::format("{}:{}: dimensions too large", file, dataset));
  Volume v;
  v.dims = tv::Dims{int(dims[2]), int(dims[1]), int(dims[0])};
  v.data.resize(v.dims.voxels());
  herr_t rc;
  if (index) {
    const hsize_t start[4] = {*index, 0, 0, 0}, count[4] = {1, dims[0], dims[1], dims[2]};
    Hid mem(H5Screate_simple(4, count, nullptr), H5Sclose);
    rc = H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start, nullptr, count, nullptr);
    if (rc >= 0)
      rc = H5Dread(ds.get(), H5T_NATIVE_FLOAT, mem.get(), space.get(), H5P_DEFAULT, v.data.data());
  } else {
    rc = H5Dread(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data.data());
  }
  if (rc < 0) throw std::runtime_error(fmt::format("{}:{}: read failed", file, spec));
  if (index) {
    // Slices never written (a partial volume: NaN fill) at the end are left out.
    const std::size_t plane = std::size_t(v.dims.nx) * v.dims.ny;
    int nz = v.dims.nz;
    while (nz > 0 && std::all_of(v.data.begin() + std::ptrdiff_t((nz - 1) * plane),
                                 v.data.begin() + std::ptrdiff_t(nz * plane),
                                 [](float x) { return std::isnan(x); }))
      --nz;
    if (nz == 0)
      throw std::runtime_error(fmt::format("{}:{}: volume {} was never written", file, dataset, *index));
    v.dims.nz = nz;
    v.data.resize(std::size_t(nz) * plane);
  }
  return v;
}

/// Writes one attribute of dataset `where` in `file`; throws when HDF5 refuses.
void attribute(hid_t obj, const std::string& name, const Attribute& a, const std::string& file,
               const std::string& where) {
  const bool ok = std::visit(
      [&](const auto& v) { return glint::hdf5::write_attribute(obj, name.c_str(), v); }, a);
  if (!ok)
    throw std::runtime_error(fmt::format("{}: cannot write attribute {} of {}", file, name, where));
}

}  // namespace

Volume read_volume(const std::string& file, const std::string& dataset) {
  return read3(file, dataset, true);
}
Volume read_array3(const std::string& file, const std::string& dataset) {
  return read3(file, dataset, false);
}

void write_volumes(const std::string& file, const std::vector<DatasetOut>& datasets) {
  hdf5::silence_errors();
  Hid f(H5Fcreate(file.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
  if (!f.valid()) throw std::runtime_error(fmt::format("{}: cannot create the file", file));
  for (const auto& d : datasets) {
    const tv::Dims& v = d.volume->dims;
    const hsize_t dims[3] = {hsize_t(v.nz), hsize_t(v.ny), hsize_t(v.nx)};
    Hid space(H5Screate_simple(3, dims, nullptr), H5Sclose);
    Hid lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
    H5Pset_create_intermediate_group(lcpl.get(), 1);
    Hid ds(H5Dcreate2(f.get(), d.name.c_str(), H5T_IEEE_F32LE, space.get(), lcpl.get(),
                      H5P_DEFAULT, H5P_DEFAULT),
           H5Dclose);
    if (!ds.valid()) throw std::runtime_error(fmt::format("{}: cannot create {}", file, d.name));
    if (H5Dwrite(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                 d.volume->data.data()) < 0)
      throw std::runtime_error(fmt::format("{}: writing {} failed", file, d.name));
    for (const auto& [k, a] : d.attributes) attribute(ds.get(), k, a, file, d.name);
  }
}

}  // namespace glint::recon
