#pragma once
// Watches the storage a run file lives on: free space against a reserve that guarantees a clean
// close, and the file's identity (the directory still there, the path still naming the file
// being written). RunFileWriter runs the check after each flush and between flushes
// (RunFileWriter::check_storage, every kCheckInterval during a run).
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>

namespace glint::pipeline {

/// What a storage check found.
struct StorageCheck {
  enum class Result {
    ok,
    disk_low,  ///< free space fell below the reserve: end the run now, cleanly
    lost,      ///< the file or its directory was removed or replaced: end the run with an error
  };
  Result result = Result::ok;
  std::string message;         ///< for disk_low and lost: names the file and what happened
  uint64_t free_bytes = 0;     ///< available to glint (statvfs f_bavail * f_frsize)
  uint64_t reserve_bytes = 0;  ///< the run ends once free_bytes falls below this
};

class StorageGuard {
 public:
  /// Space kept free for the metadata HDF5 writes at the last flush and at close (object
  /// headers, chunk indices, the end attributes).
  static constexpr uint64_t kMetadataReserve = uint64_t{1} << 20;
  /// The most data written between two checks is counted this many times in the reserve (the
  /// rate may rise, and the check that sees the space low must still leave room).
  static constexpr uint64_t kGrowthFactor = 3;
  /// How often a run checks between flushes.
  static constexpr std::chrono::milliseconds kCheckInterval{100};

  /// `fd` is an open descriptor of `file` (the writer's own); it is not closed here.
  /// `chunk_slack`: bytes HDF5 may allocate beyond the data (a new chunk for every extendible
  /// dataset), kept in the reserve.
  StorageGuard(std::filesystem::path file, int fd, uint64_t chunk_slack);

  /// Checks the file's identity and the free space against the reserve. `pending` bytes were
  /// handed to HDF5 since the last flush (they reach the disk at the latest when the file is
  /// closed); `appended` is the total handed to it so far.
  StorageCheck check(uint64_t pending, uint64_t appended);

  /// The reserve with `pending` bytes not yet flushed: kMetadataReserve + the chunk slack +
  /// pending + kGrowthFactor x the most written between two checks so far (by the data handed
  /// over or by the file's growth on disk, whichever is larger).
  uint64_t reserve(uint64_t pending) const {
    return kMetadataReserve + chunk_slack_ + pending + kGrowthFactor * max_growth_;
  }

  /// True while the path still names the file the guard was made for (same device and inode):
  /// checked before the file is reopened by its path at close.
  bool still_names_file() const;

  /// Free bytes for unprivileged writers on the file system holding `path`. Throws OutputError
  /// naming the path when it cannot be queried.
  static uint64_t free_bytes(const std::filesystem::path& path);

 private:
  std::filesystem::path file_;
  int fd_;
  uint64_t chunk_slack_;
  uint64_t dev_ = 0, ino_ = 0;
  uint64_t last_size_ = 0;      ///< bytes allocated to the file at the last check
  uint64_t last_appended_ = 0;  ///< bytes handed over at the last check
  uint64_t max_growth_ = 0;     ///< the most written between two checks
};

}  // namespace glint::pipeline
