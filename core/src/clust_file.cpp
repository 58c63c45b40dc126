#include "glint/clust_file.hpp"

#include <bit>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace glint {
namespace {

static_assert(std::endian::native == std::endian::little,
              ".clust I/O assumes a little-endian host");

std::string describe_errno() { return std::strerror(errno); }

}  // namespace

ClustWriter::ClustWriter(const std::filesystem::path& path, int cluster_size)
    : path_(path), cluster_size_(cluster_size) {
  file_ = std::fopen(path.c_str(), "wb");
  if (file_ == nullptr)
    throw std::runtime_error("cannot create cluster file '" + path.string() +
                             "': " + describe_errno());
}

ClustWriter::ClustWriter(ClustWriter&& o) noexcept
    : path_(std::move(o.path_)), cluster_size_(o.cluster_size_),
      file_(std::exchange(o.file_, nullptr)), frames_(o.frames_), clusters_(o.clusters_) {}

ClustWriter& ClustWriter::operator=(ClustWriter&& o) noexcept {
  if (this != &o) {
    if (file_ != nullptr) std::fclose(file_);
    path_ = std::move(o.path_);
    cluster_size_ = o.cluster_size_;
    file_ = std::exchange(o.file_, nullptr);
    frames_ = o.frames_;
    clusters_ = o.clusters_;
  }
  return *this;
}

ClustWriter::~ClustWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void ClustWriter::write(const ClusterTable& table) {
  if (file_ == nullptr) throw std::logic_error("ClustWriter::write after close");
  if (table.cluster_size() != cluster_size_)
    throw std::invalid_argument("cluster file '" + path_.string() + "' holds clusters of size " +
                                std::to_string(cluster_size_) + ", not " +
                                std::to_string(table.cluster_size()));
  const std::size_t nv = table.values_per_cluster();
  const std::size_t record = 4 + 4 * nv;
  std::vector<unsigned char> buf;
  for (const FrameRecord& fr : table.frames()) {
    buf.resize(8 + record * fr.n_clusters);
    const auto frame_number = static_cast<int32_t>(static_cast<uint32_t>(fr.frame_number));
    const uint32_t n = fr.n_clusters;
    std::memcpy(buf.data(), &frame_number, 4);
    std::memcpy(buf.data() + 4, &n, 4);
    unsigned char* p = buf.data() + 8;
    for (uint32_t k = 0; k < n; ++k, p += record) {
      const std::size_t c = fr.first_cluster + k;
      const uint16_t x = table.x()[c], y = table.y()[c];
      std::memcpy(p, &x, 2);
      std::memcpy(p + 2, &y, 2);
      std::memcpy(p + 4, table.cluster_data(c).data(), 4 * nv);
    }
    if (std::fwrite(buf.data(), 1, buf.size(), file_) != buf.size())
      throw std::runtime_error("cannot write cluster file '" + path_.string() +
                               "': " + describe_errno());
    ++frames_;
    clusters_ += n;
  }
}

void ClustWriter::close() {
  if (file_ == nullptr) return;
  const bool ok = std::fflush(file_) == 0;
  const int err = errno;
  const bool closed = std::fclose(file_) == 0;
  file_ = nullptr;
  if (!ok || !closed)
    throw std::runtime_error("cannot write cluster file '" + path_.string() +
                             "': " + std::strerror(ok ? errno : err));
}

ClusterTable read_clust(const std::filesystem::path& path, int cluster_size) {
  if (cluster_size <= 0 || cluster_size % 2 == 0)
    throw std::invalid_argument("cluster size must be odd and positive");
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr)
    throw std::runtime_error("cannot open cluster file '" + path.string() +
                             "': " + describe_errno());
  std::vector<unsigned char> bytes;
  unsigned char chunk[1 << 16];
  std::size_t got;
  while ((got = std::fread(chunk, 1, sizeof chunk, f)) > 0) bytes.insert(bytes.end(), chunk, chunk + got);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) throw std::runtime_error("cannot read cluster file '" + path.string() + "'");

  ClusterTable table(cluster_size);
  const std::size_t nv = table.values_per_cluster();
  const std::size_t record = 4 + 4 * nv;
  std::vector<int32_t> values(nv);
  std::size_t off = 0;
  while (off < bytes.size()) {
    if (bytes.size() - off < 8)
      throw std::runtime_error("cluster file '" + path.string() + "' is truncated at byte " +
                               std::to_string(off) + " (incomplete frame header)");
    int32_t frame_number;
    uint32_t n;
    std::memcpy(&frame_number, bytes.data() + off, 4);
    std::memcpy(&n, bytes.data() + off + 4, 4);
    off += 8;
    if ((bytes.size() - off) / record < n)
      throw std::runtime_error("cluster file '" + path.string() + "' is truncated at byte " +
                               std::to_string(off) + ": frame " + std::to_string(frame_number) +
                               " announces " + std::to_string(n) + " clusters of size " +
                               std::to_string(cluster_size));
    table.begin_frame(static_cast<uint64_t>(static_cast<int64_t>(frame_number)));
    for (uint32_t k = 0; k < n; ++k, off += record) {
      uint16_t x, y;
      std::memcpy(&x, bytes.data() + off, 2);
      std::memcpy(&y, bytes.data() + off + 2, 2);
      std::memcpy(values.data(), bytes.data() + off + 4, 4 * nv);
      table.add_cluster(x, y, values);
    }
  }
  return table;
}

}  // namespace glint
