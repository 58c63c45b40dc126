// The .clust reader (aare's ClusterFile format): any file handed to `glint` or to analysis.
// Input: one byte choosing the cluster size (1, 3, 5, 7, 9 or an invalid one), then the file.
// A file it accepts must hold exactly the records it announced: writing the table back with
// ClustWriter gives the same bytes.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "fuzz_util.hpp"
#include "glint/clust_file.hpp"

using namespace glint;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  fuzz::ByteReader in(data, size);
  static constexpr int kSizes[] = {1, 3, 5, 7, 9, 0, 2, -3};
  const int cluster_size = kSizes[in.u8() % 8];
  const std::string bytes(in.rest());
  const auto path = fuzz::write_scratch("input.clust", bytes);
  ClusterTable table(1);
  try {
    table = read_clust(path, cluster_size);
  } catch (const std::invalid_argument&) {
    GLINT_FUZZ_CHECK(cluster_size <= 0 || cluster_size % 2 == 0);
    return 0;
  } catch (const std::runtime_error& e) {
    GLINT_FUZZ_CHECK(std::string(e.what()).find(path.string()) != std::string::npos);
    return 0;
  }
  GLINT_FUZZ_CHECK(cluster_size > 0 && cluster_size % 2 == 1);
  const auto out = fuzz::scratch_dir() / "output.clust";
  {
    ClustWriter w(out, cluster_size);
    w.write(table);
    w.close();
  }
  std::string again;
  if (std::FILE* f = std::fopen(out.c_str(), "rb")) {
    char buf[4096];
    std::size_t got;
    while ((got = std::fread(buf, 1, sizeof buf, f)) > 0) again.append(buf, got);
    std::fclose(f);
  }
  GLINT_FUZZ_CHECK(again == bytes);
  return 0;
}
