#pragma once
// Watches the storage a run file lives on: free space against a reserve that guarantees a clean
// close, and the file's identity (the directory still there, the path still naming the file
// being written). RunFileWriter runs the check after each flush.
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
  /// headers, chunk indices, the end attributes); the data since the last flush comes on top.
  static constexpr uint64_t kMetadataReserve = uint64_t{1} << 20;
  /// Growth of the file between two checks is counted this many times in the reserve (the rate
  /// may rise between two flushes, and the check that sees it low must still leave room).
  static constexpr uint64_t kGrowthFactor = 3;

  /// `fd` is an open descriptor of `file` (the writer's own); it is not closed here.
  StorageGuard(std::filesystem::path file, int fd);

  /// Checks free space and the file's identity; called after each flush.
  StorageCheck check();

  /// The reserve now: kMetadataReserve + kGrowthFactor x the largest growth of the file
  /// between two checks so far.
  uint64_t reserve() const { return kMetadataReserve + kGrowthFactor * max_growth_; }

  /// True while the path still names the file the guard was made for (same device and inode):
  /// checked before the file is reopened by its path at close.
  bool still_names_file() const;

  /// Free bytes for unprivileged writers on the file system holding `path`. Throws OutputError
  /// naming the path when it cannot be queried.
  static uint64_t free_bytes(const std::filesystem::path& path);

 private:
  std::filesystem::path file_;
  int fd_;
  uint64_t dev_ = 0, ino_ = 0;
  uint64_t last_size_ = 0;   ///< bytes allocated to the file at the last check
  uint64_t max_growth_ = 0;  ///< largest growth between two checks
};

}  // namespace glint::pipeline
