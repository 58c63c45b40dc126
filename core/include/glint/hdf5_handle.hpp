#pragma once
// The one owner of HDF5 identifiers used across glint (run files, frame files, volumes).
// Header-only; include it only where HDF5's headers are available (targets linking HDF5::HDF5).
#include <hdf5.h>

#include <cstdint>
#include <span>
#include <string>
#include <utility>

namespace glint::hdf5 {

/// Move-only owner of an HDF5 identifier, closed with the matching H5?close.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), closer_(o.closer_) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
      closer_ = o.closer_;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  /// Closes now; returns HDF5's status (negative when the close, e.g. its final flush, failed).
  herr_t reset() {
    herr_t status = 0;
    if (id_ >= 0 && closer_ != nullptr) status = closer_(id_);
    id_ = H5I_INVALID_HID;
    return status;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

/// Switches off HDF5's automatic printing of error stacks: glint reports errors itself.
inline void silence_errors() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

/// Opens `path` read-only, also a file a writer still appends to in SWMR mode (or one a crash
/// left so): for SWMR reading where the file allows it, else plainly (a file in an older format,
/// or one this process already holds open without SWMR). Invalid when neither opens; HDF5's
/// error stack then says why.
inline Handle open_read_only(const char* path) {
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
  Handle f(H5Fopen(path, H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, fapl.get()), H5Fclose);
  if (f.valid()) return f;
  fapl.reset();  // now: a call after the last open would clear the error stack it leaves
  H5Eclear2(H5E_DEFAULT);
  return Handle(H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
}

/// HDF5's in-memory type for T (the numbers glint writes as attributes and datasets).
template <class T>
hid_t native_type();
template <> inline hid_t native_type<double>() { return H5T_NATIVE_DOUBLE; }
template <> inline hid_t native_type<float>() { return H5T_NATIVE_FLOAT; }
template <> inline hid_t native_type<long long>() { return H5T_NATIVE_LLONG; }
template <> inline hid_t native_type<uint64_t>() { return H5T_NATIVE_UINT64; }
template <> inline hid_t native_type<uint32_t>() { return H5T_NATIVE_UINT32; }
template <> inline hid_t native_type<uint16_t>() { return H5T_NATIVE_UINT16; }
template <> inline hid_t native_type<uint8_t>() { return H5T_NATIVE_UINT8; }
template <> inline hid_t native_type<int32_t>() { return H5T_NATIVE_INT32; }

/// The text type of glint's attributes: variable-length UTF-8 (what h5py writes for a str).
inline Handle string_type() {
  Handle t(H5Tcopy(H5T_C_S1), H5Tclose);
  if (t.valid()) {
    H5Tset_size(t.get(), H5T_VARIABLE);
    H5Tset_cset(t.get(), H5T_CSET_UTF8);
  }
  return t;
}

/// Writes attribute `name` of obj: one number (a scalar) or several (a 1-D array). False when
/// HDF5 refuses; the caller reports it, naming its file.
template <class T>
bool write_attribute(hid_t obj, const char* name, std::span<const T> values) {
  const hsize_t n = values.size();
  const Handle space(n == 1 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, nullptr),
                     H5Sclose);
  if (!space.valid()) return false;
  const Handle attr(H5Acreate2(obj, name, native_type<T>(), space.get(), H5P_DEFAULT,
                               H5P_DEFAULT),
                    H5Aclose);
  return attr.valid() && H5Awrite(attr.get(), native_type<T>(), values.data()) >= 0;
}
template <class T>
bool write_attribute(hid_t obj, const char* name, T value) {
  return write_attribute<T>(obj, name, std::span<const T>(&value, 1));
}
/// A text attribute (see string_type).
inline bool write_attribute(hid_t obj, const char* name, const std::string& value) {
  const Handle type = string_type();
  const Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  if (!type.valid() || !space.valid()) return false;
  const Handle attr(H5Acreate2(obj, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
                    H5Aclose);
  const char* p = value.c_str();
  return attr.valid() && H5Awrite(attr.get(), type.get(), &p) >= 0;
}

}  // namespace glint::hdf5
