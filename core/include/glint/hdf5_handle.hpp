#pragma once
// The one owner of HDF5 identifiers used across glint (run files, frame files, volumes).
// Header-only; include it only where HDF5's headers are available (targets linking HDF5::HDF5).
#include <hdf5.h>

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

}  // namespace glint::hdf5
