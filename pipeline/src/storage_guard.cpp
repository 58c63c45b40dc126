#include "glint/pipeline/storage_guard.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "glint/log.hpp"
#include "glint/pipeline/run_file.hpp"

namespace glint::pipeline {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

/// How much the file holds: its blocks, or its size where blocks are claimed beyond it.
uint64_t held_bytes(const struct stat& st, bool preallocated) {
  return preallocated ? uint64_t(st.st_size) : uint64_t(st.st_blocks) * 512;
}

}  // namespace

uint64_t StorageGuard::free_bytes(const std::filesystem::path& path) {
  struct statvfs vfs {};
  if (statvfs(path.c_str(), &vfs) != 0)
    throw OutputError(fmt::format("{}: cannot query free space: {}", path.string(),
                                  std::strerror(errno)));
  return uint64_t(vfs.f_bavail) * vfs.f_frsize;
}

StorageGuard::StorageGuard(std::filesystem::path file, int fd, uint64_t chunk_slack)
    : file_(std::move(file)), fd_(::fcntl(fd, F_DUPFD_CLOEXEC, 0)), chunk_slack_(chunk_slack) {
  struct stat st {};
  if (fd_ < 0 || fstat(fd_, &st) != 0) {
    const std::string why = std::strerror(errno);
    if (fd_ >= 0) ::close(fd_);
    throw OutputError(fmt::format("{}: fstat: {}", file_.string(), why));
  }
  dev_ = st.st_dev;
  ino_ = st.st_ino;
  // What the file holds at creation (the pedestal images) and its first reserve: the writes
  // before the first check land in claimed blocks too. Short of space, the first check says so.
  if (!claim(st, uint64_t(st.st_size) + reserve(0)) && errno == EOPNOTSUPP) preallocate_ = false;
  last_size_ = held_bytes(st, preallocate_);
}

bool StorageGuard::claim(const struct stat& st, uint64_t end) {
  if (!preallocate_) return false;
  // Below the end of the last claim every block is allocated, unless the file was truncated
  // since (HDF5 truncates it to its end of allocation at a flush, which frees the blocks beyond)
  // or written beyond the claim: then from the first hole (SEEK_HOLE; the end of file where
  // there is none below it).
  uint64_t from = claimed_end_;
  if (uint64_t(st.st_blocks) * 512 < claimed_end_ || uint64_t(st.st_size) > claimed_end_) {
    const off_t hole = ::lseek(fd_, 0, SEEK_HOLE);
    claimed_end_ = from = std::min<uint64_t>(from, hole >= 0 ? uint64_t(hole) : 0);
  }
  if (end <= from) return true;
  const int rc = ::fallocate(fd_, FALLOC_FL_KEEP_SIZE, off_t(from), off_t(end - from));
  if (rc != 0) {
    if (errno == EOPNOTSUPP) {
      const int saved = errno;
      log::warn("{}: its file system cannot preallocate (fallocate: {}); free space is only "
                "checked, and a disk filled between two checks can make a write fail",
                file_.string(), std::strerror(saved));
      preallocate_ = false;
      errno = saved;
    }
    return false;
  }
  claimed_end_ = end;
  claimed_most_ = std::max(claimed_most_, end);
  return true;
}

StorageGuard::~StorageGuard() { ::close(fd_); }

bool StorageGuard::claim_for_reopen() {
  struct stat st {};
  return fstat(fd_, &st) == 0 && claim(st, uint64_t(st.st_size) + kMetadataReserve);
}

void StorageGuard::release_reserve() {
  if (claimed_most_ == 0) return;
  const int fd = fd_;
  struct stat st {};
  if (fstat(fd, &st) == 0) {
    const uint64_t block = st.st_blksize > 0 ? uint64_t(st.st_blksize) : 4096;
    const uint64_t from = (uint64_t(st.st_size) + block - 1) / block * block;
    // Punching the tail frees it on tmpfs and xfs; a truncate to the same size does on ext4
    // (which punches nothing beyond the end of file).
    if (claimed_most_ > from &&
        ::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off_t(from),
                    off_t(claimed_most_ - from)) != 0 &&
        errno != EOPNOTSUPP)
      log::warn("{}: releasing the space kept beyond its end: {}", file_.string(),
                std::strerror(errno));
    if (::ftruncate(fd, st.st_size) != 0)
      log::warn("{}: releasing the space kept beyond its end: {}", file_.string(),
                std::strerror(errno));
  }
  claimed_end_ = claimed_most_ = 0;
}

bool StorageGuard::still_names_file() const {
  struct stat st {};
  return stat(file_.c_str(), &st) == 0 && uint64_t(st.st_dev) == dev_ &&
         uint64_t(st.st_ino) == ino_;
}

StorageCheck StorageGuard::check(uint64_t pending, uint64_t appended) {
  StorageCheck out;
  auto lost = [&](std::string what) {
    out.result = StorageCheck::Result::lost;
    out.message = fmt::format("{}: {}; the run ends", file_.string(), what);
    return out;
  };
  struct stat own {};
  if (fstat(fd_, &own) != 0) return lost(fmt::format("fstat: {}", std::strerror(errno)));
  const std::filesystem::path dir = file_.parent_path().empty() ? "." : file_.parent_path();
  struct stat named {};
  if (stat(dir.c_str(), &named) != 0)
    return lost(fmt::format("the output directory {} is gone ({}), and the data written with it",
                            dir.string(), std::strerror(errno)));
  if (stat(file_.c_str(), &named) != 0)
    return lost(fmt::format("the file was deleted ({}), and the data written with it",
                            std::strerror(errno)));
  if (uint64_t(named.st_dev) != dev_ || uint64_t(named.st_ino) != ino_ || own.st_nlink == 0)
    return lost("the path now names another file (the file being written was renamed or replaced)");

  const uint64_t size = held_bytes(own, preallocate_);
  const uint64_t grown = size > last_size_ ? size - last_size_ : 0;
  const uint64_t handed = appended > last_appended_ ? appended - last_appended_ : 0;
  max_growth_ = std::max({max_growth_, grown, handed});
  last_size_ = size;
  last_appended_ = appended;
  out.reserve_bytes = reserve(pending);
  const bool claimed = claim(own, uint64_t(own.st_size) + out.reserve_bytes);
  const int claim_errno = errno;
  out.free_bytes = free_bytes(dir);
  if (!claimed && preallocate_ && claim_errno != ENOSPC) {
    // Neither claimed nor short of space (EIO, EFBIG, ...): the reserve cannot be kept.
    out.result = StorageCheck::Result::disk_low;
    out.message = fmt::format("{}: the {:.1f} MiB kept for a clean close cannot be reserved: {}",
                              file_.string(), out.reserve_bytes / kMiB,
                              std::strerror(claim_errno));
  } else if (preallocate_ ? !claimed : out.free_bytes < out.reserve_bytes) {
    out.result = StorageCheck::Result::disk_low;
    out.message = fmt::format(
        "{}: {:.1f} MiB free on its file system, below the {:.1f} MiB kept for a clean close "
        "({:.1f} MiB not flushed yet, at most {:.1f} MiB written between two checks)",
        file_.string(), out.free_bytes / kMiB, out.reserve_bytes / kMiB, pending / kMiB,
        max_growth_ / kMiB);
  }
  return out;
}

}  // namespace glint::pipeline
