#pragma once
// A real small file system for storage-fault tests: a tmpfs of a given size mounted on a fresh
// directory (needs CAP_SYS_ADMIN; tests skip with the reason where mounting is not permitted),
// and a filler file that leaves a chosen amount of it free.
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace glint::testing {

class TmpfsMount {
 public:
  TmpfsMount(std::filesystem::path dir, uint64_t bytes) : dir_(std::move(dir)) {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    const std::string opts = "size=" + std::to_string(bytes);
    if (::mount("tmpfs", dir_.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, opts.c_str()) == 0)
      mounted_ = true;
    else
      why_ = std::string("mounting a tmpfs is not permitted here: ") + std::strerror(errno);
  }
  ~TmpfsMount() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  TmpfsMount(const TmpfsMount&) = delete;
  TmpfsMount& operator=(const TmpfsMount&) = delete;

  bool mounted() const { return mounted_; }
  const std::string& why_not() const { return why_; }
  const std::filesystem::path& dir() const { return dir_; }

  uint64_t free_bytes() const {
    struct statvfs v {};
    ::statvfs(dir_.c_str(), &v);
    return uint64_t(v.f_bavail) * v.f_frsize;
  }

  /// Writes (or extends) `name` until `left` bytes are free (as close as the page size allows);
  /// left = 0 fills the file system completely.
  void fill_to(uint64_t left, const std::string& name = "filler") const {
    std::ofstream out(dir_ / name, std::ios::binary | std::ios::app);
    const std::vector<char> block(4096, 'f');
    while (free_bytes() > left) {
      const uint64_t n = std::min<uint64_t>(block.size(), free_bytes() - left);
      out.write(block.data(), static_cast<std::streamsize>(n));
      out.flush();
      if (!out) break;  // full
    }
  }

 private:
  std::filesystem::path dir_;
  bool mounted_ = false;
  std::string why_;
};

}  // namespace glint::testing
