#pragma once
// Watches the storage a run file lives on: the space that guarantees a clean close, and the
// file's identity (the directory still there, the path still naming the file being written).
// RunFileWriter runs the check after each flush and between flushes
// (RunFileWriter::check_storage, every kCheckInterval during a run).
//
// The space is claimed, not just observed: each check keeps the file's blocks allocated up to
// its end plus the reserve (fallocate with FALLOC_FL_KEEP_SIZE: blocks beyond the end, the
// size HDF5 sees unchanged). HDF5 appends at its end of allocation and writes metadata below
// it, so until the next check its writes land in blocks already allocated, and another process
// filling the disk cannot make them fail. When the reserve can no longer be claimed (ENOSPC)
// the run ends (disk_low), its close covered by what was claimed before. On a file system
// without fallocate (EOPNOTSUPP) the check falls back to comparing the free space (statvfs)
// with the reserve, and a write can still fail when the disk fills between two checks.
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>

struct stat;

namespace glint::pipeline {

/// What a storage check found.
struct StorageCheck {
  enum class Result {
    ok,
    disk_low,  ///< the reserve could not be claimed (or, without fallocate, free space fell
               ///< below it): end the run now, cleanly
    lost,      ///< the file or its directory was removed or replaced: end the run with an error
  };
  Result result = Result::ok;
  std::string message;         ///< for disk_low and lost: names the file and what happened
  /// Available to glint (statvfs f_bavail * f_frsize) besides what the file has claimed.
  uint64_t free_bytes = 0;
  uint64_t reserve_bytes = 0;  ///< the space claimed (or needed free) beyond the file's end
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

  /// `fd` is an open descriptor of `file` (the writer's own); the guard keeps a duplicate of
  /// it, so that the claim can be renewed and released after the writer closed its own.
  /// `chunk_slack`: bytes HDF5 may allocate beyond the data (a new chunk for every extendible
  /// dataset), kept in the reserve.
  StorageGuard(std::filesystem::path file, int fd, uint64_t chunk_slack);
  ~StorageGuard();
  StorageGuard(const StorageGuard&) = delete;
  StorageGuard& operator=(const StorageGuard&) = delete;

  /// Checks the file's identity and claims the reserve beyond its end (see above). `pending`
  /// bytes were handed to HDF5 since the last flush (they reach the disk at the latest when the
  /// file is closed); `appended` is the total handed to it so far.
  StorageCheck check(uint64_t pending, uint64_t appended);

  /// The reserve with `pending` bytes not yet flushed: kMetadataReserve + the chunk slack +
  /// pending + kGrowthFactor x the most written between two checks so far (by the data handed
  /// over or by the file's growth on disk, whichever is larger).
  uint64_t reserve(uint64_t pending) const {
    return kMetadataReserve + chunk_slack_ + pending + kGrowthFactor * max_growth_;
  }

  /// Whether the reserve is claimed with fallocate (false once the file system refused it with
  /// EOPNOTSUPP: the free space is then only compared with the reserve).
  bool preallocates() const { return preallocate_; }

  /// Claims kMetadataReserve beyond the file's end again (HDF5 truncates the file at close,
  /// freeing what was claimed beyond it): called before the file is reopened for its end
  /// attributes. False when it could not be claimed.
  bool claim_for_reopen();

  /// Gives back the blocks claimed beyond the file's end (the file keeps its size): called
  /// once the file is closed, or given up.
  void release_reserve();

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
  bool preallocate_ = true;     ///< false once fallocate was refused (EOPNOTSUPP)
  uint64_t claimed_end_ = 0;    ///< every block below this offset is allocated (claimed)
  uint64_t claimed_most_ = 0;   ///< the highest end claimed (released at close)

  /// Claims blocks up to `end` for the file as `st` describes it; false with errno on failure.
  bool claim(const struct stat& st, uint64_t end);
};

}  // namespace glint::pipeline
