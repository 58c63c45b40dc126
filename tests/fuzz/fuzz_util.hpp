#pragma once
// What the fuzz targets share: a check that aborts (so that libFuzzer records the input), a
// reader of the raw fuzz bytes, and a scratch file for readers that take a path.
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>

/// An invariant of the code under test: a failure is a finding, like a crash.
#define GLINT_FUZZ_CHECK(cond)                                                              \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      std::fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                         \
    }                                                                                       \
  } while (0)

namespace glint::fuzz {

/// Takes fixed-size values and length-prefixed strings off the front of the input; past its end
/// everything reads as zero / empty.
class ByteReader {
 public:
  ByteReader(const uint8_t* data, std::size_t size) : p_(data), n_(size) {}
  bool empty() const { return n_ == 0; }
  std::size_t left() const { return n_; }
  uint8_t u8() { return static_cast<uint8_t>(uint_le(1)); }
  uint16_t u16() { return static_cast<uint16_t>(uint_le(2)); }
  uint32_t u32() { return static_cast<uint32_t>(uint_le(4)); }
  uint64_t u64() { return uint_le(8); }
  /// `n` bytes (fewer at the end of the input).
  std::string_view bytes(std::size_t n) {
    n = std::min(n, n_);
    std::string_view s(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    n_ -= n;
    return s;
  }
  /// A string prefixed with its 16-bit little-endian length.
  std::string_view str16() { return bytes(u16()); }
  std::string_view rest() { return bytes(n_); }

 private:
  uint64_t uint_le(std::size_t width) {
    uint64_t v = 0;
    for (std::size_t i = 0; i < width && n_ > 0; ++i, ++p_, --n_) v |= uint64_t{*p_} << (8 * i);
    return v;
  }
  const uint8_t* p_;
  std::size_t n_;
};

/// A per-process scratch directory under TMPDIR (or /tmp), removed at exit.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/glint-fuzz-XXXXXX";
    if (mkdtemp(templ.data()) == nullptr) {
      std::perror("mkdtemp");
      std::abort();
    }
    static struct Remover {
      std::filesystem::path p;
      ~Remover() {
        std::error_code ec;
        std::filesystem::remove_all(p, ec);
      }
    } remover{templ};
    return std::filesystem::path(templ);
  }();
  return dir;
}

/// Writes `bytes` to a file in the scratch directory and returns its path.
inline std::filesystem::path write_scratch(const std::string& name, std::string_view bytes) {
  const auto path = scratch_dir() / name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() ||
      std::fclose(f) != 0) {
    std::perror(path.c_str());
    std::abort();
  }
  return path;
}

}  // namespace glint::fuzz
