// The frame assembler fed port parts as the ingest hands them over, interleaved with what the
// run's consumer does (pop, write the image out, release, flush, take the dropped frames).
//
// Input: 4 bytes of detector and queue geometry, then operations, each one byte:
//   0: a message: u16 length + header text, u16 length + payload; parsed with parse_sls_header
//      and checked as the ingest checks it (Ingest::handle) before add_part
//   1: pop (no wait), the image written out in full     2: release the oldest image held
//   3: flush_pending                                     4: take_dropped (u64 limit, or all)
// Invariants: buffers are conserved (free + pending + ready + held = pool), images come out in
// strictly increasing frame-number order, complete + incomplete = images emitted, a complete
// image has every part.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fuzz_util.hpp"
#include "glint/pipeline/frame_assembler.hpp"

using namespace glint;
using namespace glint::pipeline;

namespace {

/// The ingest's checks of a data part (Ingest::handle): the assembler's precondition.
bool acceptable(const SlsHeader& h, const config::DetectorConfig& det, std::size_t payload,
                std::vector<std::optional<uint64_t>>& last_of_port) {
  if (h.is_end() || !is_valid_bitmode(h.bitmode)) return false;
  if (h.detshape[0] != det.ports_x || h.detshape[1] != det.ports_y ||
      h.shape[0] != det.port_cols() || h.shape[1] != det.port_rows())
    return false;
  if (h.row >= det.ports_y || h.column >= det.ports_x) return false;
  const std::size_t expected = payload_bytes(h.bitmode, std::size_t{h.shape[0]} * h.shape[1]);
  if (h.size != expected || payload != expected) return false;
  auto& last = last_of_port[h.row * det.ports_x + h.column];
  if (last && h.frame_number <= *last) return false;
  last = h.frame_number;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  fuzz::ByteReader in(data, size);
  config::DetectorConfig det;
  const uint8_t geometry = in.u8(), port = in.u8();
  det.ports_x = 1 + geometry % 4;
  det.ports_y = 1 + (geometry / 4) % 2;
  det.cols = det.ports_x * (1 + port % 16);
  det.rows = det.ports_y * (1 + port / 16);
  config::IngestConfig ing;
  const uint8_t queue = in.u8(), timing = in.u8();
  ing.queue_frames = queue % 9;
  ing.reorder_frames = timing % 9;
  // Either every pending image is overdue at once, or none becomes so during one input: the
  // result must not depend on the machine's speed.
  ing.part_timeout_ms = (timing & 0x80) ? 0 : 3'600'000;

  FrameAssembler a(det, ing);
  std::vector<std::optional<uint64_t>> last_of_port(det.n_ports());
  std::deque<FramePtr> held;
  std::optional<uint64_t> last_out;
  uint64_t emitted = 0;
  std::vector<uint16_t> image(std::size_t{det.rows} * det.cols);

  auto check = [&] {
    const AssemblerCounters c = a.counters();
    GLINT_FUZZ_CHECK(c.pool == ing.queue_frames);
    GLINT_FUZZ_CHECK(c.free + c.pending + c.ready + held.size() == c.pool);
    GLINT_FUZZ_CHECK(c.frames_complete + c.frames_incomplete == emitted + c.ready);
  };
  while (!in.empty()) {
    switch (in.u8() % 5) {
      case 0: {
        const std::string_view header = in.str16();
        const std::string_view payload = in.str16();
        const ParsedHeader p = parse_sls_header(header);
        if (!p.header || !acceptable(*p.header, det, payload.size(), last_of_port)) break;
        auto owner = std::make_shared<std::string>(payload);
        const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(owner->data()),
                                               owner->size());
        a.add_part(*p.header, PartPayload{owner, bytes, p.header->bitmode});
        break;
      }
      case 1:
        if (FramePtr f = a.pop(std::chrono::milliseconds(0))) {
          GLINT_FUZZ_CHECK(!last_out || f->frame_number > *last_out);
          last_out = f->frame_number;
          GLINT_FUZZ_CHECK(f->parts <= det.n_ports());
          GLINT_FUZZ_CHECK(f->incomplete || f->parts == det.n_ports());
          f->write_to(det, image);
          ++emitted;
          held.push_back(std::move(f));
        }
        break;
      case 2:
        if (!held.empty()) {
          a.release(std::move(held.front()));
          held.pop_front();
        }
        break;
      case 3: a.flush_pending(); break;
      case 4: {
        const uint64_t limit = in.u64();
        const auto dropped = a.take_dropped(limit % 2 ? std::optional<uint64_t>(limit / 2)
                                                      : std::nullopt);
        for (std::size_t i = 1; i < dropped.size(); ++i)
          GLINT_FUZZ_CHECK(dropped[i - 1] < dropped[i]);
        break;
      }
    }
    check();
  }
  a.flush_pending();
  while (FramePtr f = a.pop(std::chrono::milliseconds(0))) {
    GLINT_FUZZ_CHECK(!last_out || f->frame_number > *last_out);
    last_out = f->frame_number;
    ++emitted;
    held.push_back(std::move(f));
  }
  check();
  GLINT_FUZZ_CHECK(a.counters().pending == 0);
  for (auto& f : held) a.release(std::move(f));
  held.clear();
  return 0;
}
