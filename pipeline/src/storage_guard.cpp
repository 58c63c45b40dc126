#include "glint/pipeline/storage_guard.hpp"

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "glint/pipeline/run_file.hpp"

namespace glint::pipeline {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

uint64_t allocated_bytes(const struct stat& st) { return uint64_t(st.st_blocks) * 512; }

}  // namespace

uint64_t StorageGuard::free_bytes(const std::filesystem::path& path) {
  struct statvfs vfs {};
  if (statvfs(path.c_str(), &vfs) != 0)
    throw OutputError(fmt::format("{}: cannot query free space: {}", path.string(),
                                  std::strerror(errno)));
  return uint64_t(vfs.f_bavail) * vfs.f_frsize;
}

StorageGuard::StorageGuard(std::filesystem::path file, int fd, uint64_t chunk_slack)
    : file_(std::move(file)), fd_(fd), chunk_slack_(chunk_slack) {
  struct stat st {};
  if (fstat(fd_, &st) != 0)
    throw OutputError(fmt::format("{}: fstat: {}", file_.string(), std::strerror(errno)));
  dev_ = st.st_dev;
  ino_ = st.st_ino;
  last_size_ = allocated_bytes(st);
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

  const uint64_t size = allocated_bytes(own);
  const uint64_t grown = size > last_size_ ? size - last_size_ : 0;
  const uint64_t handed = appended > last_appended_ ? appended - last_appended_ : 0;
  max_growth_ = std::max({max_growth_, grown, handed});
  last_size_ = size;
  last_appended_ = appended;
  out.free_bytes = free_bytes(dir);
  out.reserve_bytes = reserve(pending);
  if (out.free_bytes < out.reserve_bytes) {
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
