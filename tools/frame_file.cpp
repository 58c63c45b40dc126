#include "frame_file.hpp"

#include <hdf5.h>

#include <array>
#include <system_error>

#include <fmt/format.h>

#include "glint/hdf5_handle.hpp"

namespace glint::tools {
namespace {

using Id = hdf5::Handle;

/// The selection of frames [first, first + count) of an (N, rows, cols) dataset, and the
/// matching memory space of `count` whole frames.
struct FrameSlab {
  Id file, memory;
  bool selected = false;
  FrameSlab(hid_t dataset, uint64_t first, uint64_t count, FrameShape shape)
      : file(H5Dget_space(dataset), H5Sclose) {
    const std::array<hsize_t, 3> start{first, 0, 0}, size{count, shape.rows, shape.cols};
    memory = Id(H5Screate_simple(3, size.data(), nullptr), H5Sclose);
    selected = file.valid() && memory.valid() &&
               H5Sselect_hyperslab(file.get(), H5S_SELECT_SET, start.data(), nullptr,
                                   size.data(), nullptr) >= 0;
  }
  bool valid() const { return selected; }
};

std::string describe_type(hid_t type) {
  switch (H5Tget_class(type)) {
    case H5T_INTEGER:
      return fmt::format("{}int{}", H5Tget_sign(type) == H5T_SGN_NONE ? "u" : "",
                         8 * H5Tget_size(type));
    case H5T_FLOAT: return fmt::format("float{}", 8 * H5Tget_size(type));
    case H5T_STRING: return "string";
    case H5T_COMPOUND: return "compound";
    default: return "a non-numeric type";
  }
}

}  // namespace

struct FrameFileReader::Handles {
  Id file, dataset;
};

FrameFileReader::FrameFileReader(const std::filesystem::path& path, const std::string& dataset)
    : h_(std::make_unique<Handles>()), where_(fmt::format("'{}' in {}", dataset, path.string())) {
  hdf5::silence_errors();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw InputError(fmt::format("input file {} does not exist", path.string()));
  if (H5Fis_hdf5(path.c_str()) <= 0)
    throw InputError(fmt::format("input file {} is not an HDF5 file", path.string()));
  h_->file = Id(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!h_->file.valid()) throw InputError(fmt::format("cannot open input file {}", path.string()));
  if (H5Lexists(h_->file.get(), dataset.c_str(), H5P_DEFAULT) <= 0)
    throw InputError(fmt::format("input file {} has no dataset '{}'", path.string(), dataset));
  h_->dataset = Id(H5Dopen2(h_->file.get(), dataset.c_str(), H5P_DEFAULT), H5Dclose);
  if (!h_->dataset.valid())
    throw InputError(fmt::format("'{}' in {} is not a dataset", dataset, path.string()));
  const Id type(H5Dget_type(h_->dataset.get()), H5Tclose);
  if (H5Tget_class(type.get()) != H5T_INTEGER || H5Tget_size(type.get()) != 2 ||
      H5Tget_sign(type.get()) != H5T_SGN_NONE)
    throw InputError(fmt::format("dataset {} holds {}, expected uint16 frames", where_,
                                 describe_type(type.get())));
  const Id space(H5Dget_space(h_->dataset.get()), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank != 3)
    throw InputError(fmt::format("dataset {} has {} dimensions, expected 3 (frames, rows, columns)",
                                 where_, rank));
  std::array<hsize_t, 3> dims{};
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  if (dims[1] == 0 || dims[2] == 0 || dims[1] > 65536 || dims[2] > 65536)
    throw InputError(fmt::format("dataset {} has frames of {} x {} pixels (1 to 65536 each way)",
                                 where_, dims[1], dims[2]));
  frames_ = dims[0];
  shape_ = FrameShape{static_cast<uint32_t>(dims[1]), static_cast<uint32_t>(dims[2])};
}

FrameFileReader::~FrameFileReader() = default;

void FrameFileReader::read(uint64_t first, uint64_t count, std::span<uint16_t> out) {
  if (first + count > frames_ || out.size() != count * shape_.pixels())
    throw std::out_of_range(fmt::format("read of frames {}..{} beyond dataset {}", first,
                                        first + count, where_));
  if (count == 0) return;
  const FrameSlab slab(h_->dataset.get(), first, count, shape_);
  if (!slab.valid() || H5Dread(h_->dataset.get(), H5T_NATIVE_UINT16, slab.memory.get(),
                               slab.file.get(), H5P_DEFAULT, out.data()) < 0)
    throw std::runtime_error(
        fmt::format("cannot read frames {}..{} of dataset {}", first, first + count, where_));
}

struct FrameFileWriter::Handles {
  Id file, dataset;
};

FrameFileWriter::FrameFileWriter(const std::filesystem::path& path, const std::string& dataset,
                                 uint64_t frames, FrameShape shape, bool overwrite)
    : h_(std::make_unique<Handles>()), where_(fmt::format("'{}' in {}", dataset, path.string())),
      frames_(frames), shape_(shape) {
  hdf5::silence_errors();
  std::error_code ec;
  if (!overwrite && std::filesystem::exists(path, ec))
    throw std::runtime_error(
        fmt::format("{} exists already (use --overwrite to replace it)", path.string()));
  h_->file = Id(H5Fcreate(path.c_str(), overwrite ? H5F_ACC_TRUNC : H5F_ACC_EXCL, H5P_DEFAULT,
                          H5P_DEFAULT),
                H5Fclose);
  if (!h_->file.valid())
    throw std::runtime_error(fmt::format("cannot create {} (directory missing or not writable?)",
                                         path.string()));
  const std::array<hsize_t, 3> dims{frames, shape.rows, shape.cols};
  const std::array<hsize_t, 3> chunk{1, shape.rows, shape.cols};
  const Id space(H5Screate_simple(3, dims.data(), nullptr), H5Sclose);
  const Id dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  if (frames > 0) H5Pset_chunk(dcpl.get(), 3, chunk.data());
  const Id lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  h_->dataset = Id(H5Dcreate2(h_->file.get(), dataset.c_str(), H5T_STD_U16LE, space.get(),
                              lcpl.get(), dcpl.get(), H5P_DEFAULT),
                   H5Dclose);
  if (!h_->dataset.valid())
    throw std::runtime_error(fmt::format("cannot create dataset {}", where_));
}

FrameFileWriter::~FrameFileWriter() = default;

void FrameFileWriter::write(uint64_t first, uint64_t count, std::span<const uint16_t> frames) {
  if (!h_->dataset.valid()) throw std::logic_error("FrameFileWriter::write after close");
  if (first + count > frames_ || frames.size() != count * shape_.pixels())
    throw std::out_of_range(fmt::format("write of frames {}..{} beyond dataset {}", first,
                                        first + count, where_));
  if (count == 0) return;
  const FrameSlab slab(h_->dataset.get(), first, count, shape_);
  if (!slab.valid() || H5Dwrite(h_->dataset.get(), H5T_NATIVE_UINT16, slab.memory.get(),
                                slab.file.get(), H5P_DEFAULT, frames.data()) < 0)
    throw std::runtime_error(fmt::format("cannot write frames {}..{} of dataset {} (disk full?)",
                                         first, first + count, where_));
}

void FrameFileWriter::set_attribute(const std::string& name, uint64_t value) {
  if (!glint::hdf5::write_attribute<uint64_t>(h_->dataset.get(), name.c_str(), value))
    throw std::runtime_error(fmt::format("cannot write attribute {} of dataset {}", name, where_));
}

void FrameFileWriter::close() {
  if (!h_->file.valid()) return;
  const bool ok = h_->dataset.reset() >= 0 && H5Fflush(h_->file.get(), H5F_SCOPE_LOCAL) >= 0;
  const bool closed = h_->file.reset() >= 0;
  if (!ok || !closed)
    throw std::runtime_error(fmt::format("cannot finish writing {} (disk full?)", where_));
}

}  // namespace glint::tools
