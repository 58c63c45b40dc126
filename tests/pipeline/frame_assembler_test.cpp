#include <gtest/gtest.h>

#include <thread>

#include "glint/pipeline/frame_assembler.hpp"

using namespace glint;
using namespace glint::pipeline;
using namespace std::chrono_literals;

namespace {

config::DetectorConfig det_2x2() {
  config::DetectorConfig d;
  d.rows = 4;
  d.cols = 6;
  d.ports_x = 2;
  d.ports_y = 2;
  return d;
}

config::IngestConfig ingest(uint32_t queue, uint32_t reorder = 8, uint32_t timeout_ms = 10000) {
  config::IngestConfig i;
  i.queue_frames = queue;
  i.reorder_frames = reorder;
  i.part_timeout_ms = timeout_ms;
  return i;
}

/// A 16-bit part of a 2x2-port 4x6 detector whose pixels are value + index.
void add(FrameAssembler& a, uint64_t fn, uint32_t row, uint32_t col, uint16_t value, uint32_t complete = 1) {
  SlsHeader h;
  h.bitmode = 16;
  h.detshape = {2, 2};
  h.shape = {3, 2};
  h.size = 12;
  h.frame_number = fn;
  h.timestamp = fn * 10;
  h.row = row;
  h.column = col;
  h.complete_image = complete;
  auto px = std::make_shared<std::vector<uint16_t>>(6);
  for (int i = 0; i < 6; ++i) (*px)[i] = static_cast<uint16_t>(value + i);
  const auto bytes = std::as_bytes(std::span<const uint16_t>(*px));
  a.add_part(h, PartPayload{px, bytes, 16});
}

}  // namespace

TEST(FrameAssembler, PlacesPartsByRowAndColumnInAnyOrder) {
  FrameAssembler a(det_2x2(), ingest(4));
  add(a, 5, 1, 1, 400);
  add(a, 5, 0, 0, 100);
  EXPECT_EQ(a.pop(0ms), nullptr);  // not complete yet
  add(a, 5, 1, 0, 300);
  add(a, 5, 0, 1, 200);
  auto f = a.pop(0ms);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->frame_number, 5u);
  EXPECT_EQ(f->timestamp, 50u);
  EXPECT_FALSE(f->incomplete);
  // Port (row r, column c) holds rows 2r..2r+1 and columns 3c..3c+2.
  const std::vector<uint16_t> expect{100, 101, 102, 200, 201, 202,  //
                                     103, 104, 105, 203, 204, 205,  //
                                     300, 301, 302, 400, 401, 402,  //
                                     303, 304, 305, 403, 404, 405};
  std::vector<uint16_t> image(24, 0xFFFF);
  f->write_to(det_2x2(), image);
  EXPECT_EQ(image, expect);
  a.release(std::move(f));
  EXPECT_EQ(a.counters().free, 4u);
  EXPECT_EQ(a.counters().frames_complete, 1u);
}

TEST(FrameAssembler, EmitsInFrameNumberOrder) {
  FrameAssembler a(det_2x2(), ingest(8));
  // Each port sends its frames in order (the ingest refuses anything else); frames 2 and 3 are
  // both under way, and 2 leaves first, 3 only once its last part is in.
  for (uint32_t p = 0; p < 3; ++p) {
    add(a, 2, p / 2, p % 2, 2);
    add(a, 3, p / 2, p % 2, 3);
  }
  EXPECT_EQ(a.pop(0ms), nullptr);
  add(a, 2, 1, 1, 2);
  auto f1 = a.pop(0ms);
  ASSERT_TRUE(f1);
  EXPECT_EQ(f1->frame_number, 2u);
  EXPECT_FALSE(f1->incomplete);
  EXPECT_EQ(a.pop(0ms), nullptr);
  add(a, 3, 1, 1, 3);
  auto f2 = a.pop(0ms);
  ASSERT_TRUE(f2);
  EXPECT_EQ(f2->frame_number, 3u);
  EXPECT_FALSE(f2->incomplete);
}

TEST(FrameAssembler, AnImageWhoseMissingPortsHaveMovedOnIsIncompleteAtOnce) {
  // Frame 2 got only port 0's part; ports 1-3 have sent frame 3 since: their parts of frame 2
  // will never come (each port's frames arrive in order), so 2 leaves now, not at a timeout.
  FrameAssembler a(det_2x2(), ingest(8));
  add(a, 2, 0, 0, 2);
  for (uint32_t p = 1; p < 4; ++p) add(a, 3, p / 2, p % 2, 3);
  auto f = a.pop(0ms);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->frame_number, 2u);
  EXPECT_TRUE(f->incomplete);
  EXPECT_EQ(f->parts, 1u);
  EXPECT_EQ(a.pop(0ms), nullptr);  // 3 waits for port 0, which is behind and not stalled
  add(a, 3, 0, 0, 3);
  EXPECT_EQ(a.pop(0ms)->frame_number, 3u);
  EXPECT_EQ(a.counters().frames_incomplete, 1u);
  EXPECT_EQ(a.counters().late_parts, 0u);
}

TEST(FrameAssembler, MissingPartBecomesIncompleteAfterReorderWindow) {
  FrameAssembler a(det_2x2(), ingest(8, /*reorder=*/2));
  add(a, 1, 0, 0, 1);  // frame 1 never gets its other parts
  for (uint64_t fn = 2; fn <= 3; ++fn)
    for (uint32_t p = 0; p < 4; ++p) add(a, fn, p / 2, p % 2, 1);
  auto f = a.pop(0ms);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->frame_number, 1u);
  EXPECT_TRUE(f->incomplete);
  EXPECT_EQ(f->parts, 1u);
  // The part that arrived is in place, the missing ones are zeros.
  std::vector<uint16_t> image(24, 0xFFFF);
  f->write_to(det_2x2(), image);
  EXPECT_EQ(image[0], 1);
  EXPECT_EQ(image[4], 0);
  EXPECT_EQ(image[23], 0);
  // A late part of frame 1 is counted, not assembled.
  add(a, 1, 1, 1, 9);
  EXPECT_EQ(a.counters().late_parts, 1u);
  EXPECT_EQ(a.pop(0ms)->frame_number, 2u);
  EXPECT_EQ(a.pop(0ms)->frame_number, 3u);
  EXPECT_EQ(a.counters().frames_incomplete, 1u);
  EXPECT_EQ(a.counters().frames_complete, 2u);
}

TEST(FrameAssembler, MissingPartBecomesIncompleteAfterTimeout) {
  FrameAssembler a(det_2x2(), ingest(8, 100, /*timeout_ms=*/30));
  add(a, 7, 0, 0, 1);
  const auto t0 = std::chrono::steady_clock::now();
  auto f = a.pop(2000ms);
  ASSERT_NE(f, nullptr);
  EXPECT_TRUE(f->incomplete);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 25ms);
}

TEST(FrameAssembler, ALaggingPortThatKeepsMovingIsWaitedForBeyondTheTimeout) {
  // Port 0 runs behind the others by more than the part timeout but keeps delivering: none of
  // its parts is thrown away, every image completes.
  FrameAssembler a(det_2x2(), ingest(16, 16, /*timeout_ms=*/200));
  for (uint64_t fn = 1; fn <= 6; ++fn)
    for (uint32_t p = 1; p < 4; ++p) add(a, fn, p / 2, p % 2, 1);
  add(a, 1, 0, 0, 1);
  std::thread lagging([&] {  // frame 6's part comes 400 ms after the others'
    for (uint64_t fn = 2; fn <= 6; ++fn) {
      std::this_thread::sleep_for(80ms);
      add(a, fn, 0, 0, 1);
    }
  });
  for (uint64_t fn = 1; fn <= 6; ++fn) {
    auto f = a.pop(2000ms);
    ASSERT_TRUE(f) << fn;
    EXPECT_EQ(f->frame_number, fn);
    EXPECT_FALSE(f->incomplete) << fn;
    a.release(std::move(f));
  }
  lagging.join();
  EXPECT_EQ(a.counters().frames_complete, 6u);
  EXPECT_EQ(a.counters().frames_incomplete, 0u);
  EXPECT_EQ(a.counters().late_parts, 0u);
}

TEST(FrameAssembler, AStalledPortIsGivenUpAfterTheTimeout) {
  FrameAssembler a(det_2x2(), ingest(16, 16, /*timeout_ms=*/100));
  for (uint64_t fn = 1; fn <= 4; ++fn)
    for (uint32_t p = 1; p < 4; ++p) add(a, fn, p / 2, p % 2, 1);
  add(a, 1, 0, 0, 1);
  add(a, 2, 0, 0, 1);  // and then nothing more from port 0
  const auto t0 = std::chrono::steady_clock::now();
  for (uint64_t fn = 1; fn <= 4; ++fn) {
    auto f = a.pop(2000ms);
    ASSERT_TRUE(f) << fn;
    EXPECT_EQ(f->frame_number, fn);
    EXPECT_EQ(f->incomplete, fn > 2) << fn;
    EXPECT_EQ(f->parts, fn > 2 ? 3u : 4u);
  }
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 95ms);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1000ms);  // not the absent-port wait
}

TEST(FrameAssembler, CompleteImageZeroFlagsIncomplete) {
  FrameAssembler a(det_2x2(), ingest(4));
  for (uint32_t p = 0; p < 4; ++p) add(a, 1, p / 2, p % 2, 1, p == 2 ? 0 : 1);
  auto f = a.pop(0ms);
  ASSERT_NE(f, nullptr);
  EXPECT_TRUE(f->incomplete);
  EXPECT_EQ(f->parts, 4u);
}

TEST(FrameAssembler, DropsWhenBuffersRunOutAndRemembersWhich) {
  FrameAssembler a(det_2x2(), ingest(/*queue=*/2));
  for (uint64_t fn = 10; fn < 15; ++fn)
    for (uint32_t p = 0; p < 4; ++p) add(a, fn, p / 2, p % 2, 1);
  const auto c = a.counters();
  EXPECT_EQ(c.frames_dropped, 3u);
  EXPECT_EQ(c.free, 0u);
  EXPECT_EQ(c.ready, 2u);
  EXPECT_EQ(a.take_dropped(13), (std::vector<uint64_t>{12}));
  EXPECT_EQ(a.take_dropped(std::nullopt), (std::vector<uint64_t>{13, 14}));
  auto f = a.pop(0ms);
  EXPECT_EQ(f->frame_number, 10u);
  a.release(std::move(f));
  // With a buffer back, later frames are assembled again.
  for (uint32_t p = 0; p < 4; ++p) add(a, 15, p / 2, p % 2, 1);
  EXPECT_EQ(a.pop(0ms)->frame_number, 11u);
  EXPECT_EQ(a.pop(0ms)->frame_number, 15u);
}

TEST(FrameAssembler, FlushPendingEmitsEverythingAsIncomplete) {
  FrameAssembler a(det_2x2(), ingest(4));
  add(a, 1, 0, 0, 1);
  add(a, 2, 0, 1, 1);
  a.flush_pending();
  auto f1 = a.pop(0ms);
  auto f2 = a.pop(0ms);
  ASSERT_TRUE(f1 && f2);
  EXPECT_TRUE(f1->incomplete && f2->incomplete);
  EXPECT_EQ(a.pop(0ms), nullptr);
}

TEST(FrameAssembler, WakeEndsAWaitingPopAtOnce) {
  FrameAssembler a(det_2x2(), ingest(4));
  const auto t0 = std::chrono::steady_clock::now();
  std::thread waker([&] {
    std::this_thread::sleep_for(20ms);
    a.wake();
  });
  EXPECT_EQ(a.pop(10s), nullptr);
  waker.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);  // not the 10 s timeout
  // A wake while images are queued waits for the queue to run dry: the images come first.
  add(a, 7, 0, 0, 1);
  add(a, 7, 0, 1, 1);
  add(a, 7, 1, 0, 1);
  add(a, 7, 1, 1, 1);
  a.wake();
  auto f = a.pop(10s);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->frame_number, 7u);
  const auto t1 = std::chrono::steady_clock::now();
  EXPECT_EQ(a.pop(10s), nullptr);
  EXPECT_LT(std::chrono::steady_clock::now() - t1, 5s);
  a.release(std::move(f));
}

namespace {

/// A part of the 2x2-port 4x6 detector as EIGER sends it: rows [first, second] of the block on
/// the wire in that order, with flipRows and detType as given.
void add_eiger(FrameAssembler& a, uint64_t fn, uint32_t row, uint32_t col, uint32_t flip_rows,
               uint32_t det_type, std::vector<uint16_t> px, uint32_t bitmode = 16,
               const char* frame_mode = nullptr) {
  SlsHeader h;
  h.bitmode = bitmode;
  h.detshape = {2, 2};
  h.shape = {3, 2};
  h.frame_number = fn;
  h.row = row;
  h.column = col;
  h.flip_rows = flip_rows;
  h.det_type = det_type;
  if (frame_mode) h.add_json_header["frameMode"] = frame_mode;
  auto bytes = std::make_shared<std::vector<std::byte>>(payload_bytes(bitmode, px.size()));
  encode_pixels(bitmode, px, bytes->data());
  h.size = bytes->size();
  a.add_part(h, PartPayload{bytes, std::span<const std::byte>(*bytes), bitmode});
}

}  // namespace

TEST(FrameAssembler, FlippedRowsAreWrittenBottomUpForEiger) {
  FrameAssembler a(det_2x2(), ingest(4));
  // Top half-module as it is; the bottom one (row 1) sends its last row first, with flipRows.
  add_eiger(a, 1, 0, 0, 0, 1, {1, 2, 3, 4, 5, 6});
  add_eiger(a, 1, 0, 1, 0, 1, {11, 12, 13, 14, 15, 16});
  add_eiger(a, 1, 1, 0, 1, 1, {24, 25, 26, 21, 22, 23});
  add_eiger(a, 1, 1, 1, 1, 1, {34, 35, 36, 31, 32, 33});
  auto f = a.pop(0ms);
  ASSERT_NE(f, nullptr);
  std::vector<uint16_t> image(24, 0xFFFF);
  f->write_to(det_2x2(), image);
  EXPECT_EQ(image, (std::vector<uint16_t>{1, 2, 3, 11, 12, 13,     //
                                          4, 5, 6, 14, 15, 16,     //
                                          21, 22, 23, 31, 32, 33,  //
                                          24, 25, 26, 34, 35, 36}));
  a.release(std::move(f));
  // The sls consumer flips EIGER only: flipRows from another detector type is left alone.
  add_eiger(a, 2, 0, 0, 0, 3, {1, 2, 3, 4, 5, 6});
  add_eiger(a, 2, 0, 1, 0, 3, {11, 12, 13, 14, 15, 16});
  add_eiger(a, 2, 1, 0, 1, 3, {24, 25, 26, 21, 22, 23});
  add_eiger(a, 2, 1, 1, 1, 3, {34, 35, 36, 31, 32, 33});
  f = a.pop(0ms);
  ASSERT_NE(f, nullptr);
  f->write_to(det_2x2(), image);
  EXPECT_EQ(image, (std::vector<uint16_t>{1, 2, 3, 11, 12, 13,     //
                                          4, 5, 6, 14, 15, 16,     //
                                          24, 25, 26, 34, 35, 36,  //
                                          21, 22, 23, 31, 32, 33}));
  EXPECT_FALSE(f->dark_marked);
  a.release(std::move(f));
}

TEST(FrameAssembler, TwelveBitFlippedPartsAndDarkMarkers) {
  FrameAssembler a(det_2x2(), ingest(4));
  // 12-bit packed parts (rows of 3 pixels: a row starts mid-byte), one flipped, one marked dark.
  add_eiger(a, 7, 0, 0, 0, 1, {4095, 1, 2, 3, 4, 5}, 12);
  add_eiger(a, 7, 0, 1, 0, 1, {100, 200, 300, 400, 500, 600}, 12, "pedestal");
  add_eiger(a, 7, 1, 0, 1, 1, {3000, 3001, 3002, 2000, 2001, 2002}, 12);
  add_eiger(a, 7, 1, 1, 0, 1, {7, 8, 9, 10, 11, 12}, 12, "frame");
  auto f = a.pop(0ms);
  ASSERT_NE(f, nullptr);
  EXPECT_TRUE(f->dark_marked);
  std::vector<uint16_t> image(24, 0xFFFF);
  f->write_to(det_2x2(), image);
  EXPECT_EQ(image, (std::vector<uint16_t>{4095, 1, 2, 100, 200, 300,   //
                                          3, 4, 5, 400, 500, 600,      //
                                          2000, 2001, 2002, 7, 8, 9,   //
                                          3000, 3001, 3002, 10, 11, 12}));
  a.release(std::move(f));
  // A slot taken again starts unmarked.
  for (uint32_t p = 0; p < 4; ++p) add_eiger(a, 8, p / 2, p % 2, 0, 1, {1, 2, 3, 4, 5, 6}, 12);
  f = a.pop(0ms);
  ASSERT_NE(f, nullptr);
  EXPECT_FALSE(f->dark_marked);
  a.release(std::move(f));
}

TEST(FrameAssembler, StreamedWritesOfImagesAndModulesEqualCachedOnes) {
  // 2x2 ports: rows of a port are parts of image rows (row by row).
  FrameAssembler a(det_2x2(), ingest(4));
  for (uint32_t r = 0; r < 2; ++r)
    for (uint32_t c = 0; c < 2; ++c) add(a, 1, r, c, static_cast<uint16_t>(100 * (2 * r + c + 1)));
  auto f = a.pop(0ms);
  ASSERT_NE(f, nullptr);
  std::vector<uint16_t> cached(24, 0xFFFF), streamed(24, 0xFFFF);
  f->write_to(det_2x2(), cached, false);
  f->write_to(det_2x2(), streamed, true);
  EXPECT_EQ(streamed, cached);
  EXPECT_EQ(cached[3], 200);  // port (0, 1) starts at column 3
  // A module of the bottom row of ports, and a column of ports as wide as the module: in the
  // second, each port's rows are whole rows of the module (one run of pixels).
  const ModuleRegion bottom{2, 0, {2, 6}};
  std::vector<uint16_t> m_cached(12, 0xFFFF), m_streamed(12, 0xFFFF);
  f->write_region(det_2x2(), bottom, m_cached, false);
  f->write_region(det_2x2(), bottom, m_streamed, true);
  EXPECT_EQ(m_streamed, m_cached);
  EXPECT_EQ(m_cached, (std::vector<uint16_t>{300, 301, 302, 400, 401, 402,  //
                                             303, 304, 305, 403, 404, 405}));
  a.release(std::move(f));

  config::DetectorConfig tall;  // 1 x 2 ports of 2 x 3: modules [1, 2]
  tall.rows = 4;
  tall.cols = 3;
  tall.ports_x = 1;
  tall.ports_y = 2;
  FrameAssembler b(tall, ingest(4));
  for (uint32_t r = 0; r < 2; ++r) {
    SlsHeader h;
    h.bitmode = 16;
    h.detshape = {1, 2};
    h.shape = {3, 2};
    h.size = 12;
    h.frame_number = 1;
    h.row = r;
    auto px = std::make_shared<std::vector<uint16_t>>(6);
    for (int i = 0; i < 6; ++i) (*px)[i] = static_cast<uint16_t>(10 * (r + 1) + i);
    b.add_part(h, PartPayload{px, std::as_bytes(std::span<const uint16_t>(*px)), 16});
  }
  auto g = b.pop(0ms);
  ASSERT_NE(g, nullptr);
  std::vector<uint16_t> top(6), low(6), whole(12);
  g->write_region(tall, ModuleRegion{0, 0, {2, 3}}, top, true);
  g->write_region(tall, ModuleRegion{2, 0, {2, 3}}, low, true);
  g->write_to(tall, whole, true);
  EXPECT_EQ(top, (std::vector<uint16_t>{10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(low, (std::vector<uint16_t>{20, 21, 22, 23, 24, 25}));
  EXPECT_EQ(whole, (std::vector<uint16_t>{10, 11, 12, 13, 14, 15, 20, 21, 22, 23, 24, 25}));
  b.release(std::move(g));
}
