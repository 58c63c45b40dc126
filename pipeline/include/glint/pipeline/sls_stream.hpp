#pragma once
// The slsReceiver ZeroMQ stream format (JSON header versions 4 and 5 + raw pixels): parsing for
// the ingest, formatting for `glint sim`. Format: docs/stream-format.md.
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace glint::pipeline {

/// Why a message was rejected. Every kind is counted and logged (rate-limited) by the ingest.
enum class BadInput : uint8_t {
  malformed_json = 0,   ///< the header is not a JSON object
  missing_field,        ///< a required key is absent or has the wrong type
  size_mismatch,        ///< payload size differs from `size` or from shape x bitmode
  wrong_shape,          ///< shape / detshape differ from the configured detector
  unknown_bitmode,      ///< bitmode not 4, 8, 12, 16 or 32
  data_without_header,  ///< a pixel part that is not preceded by a header
  frame_backwards,      ///< frame number not above the port's previous one
  unknown_port,         ///< (row, column) outside the configured detector
  oversize,             ///< a header over kMaxSlsHeaderBytes (refused before parsing)
  out_of_range,         ///< a number that does not fit its field (32 bits; data not 0 or 1)
  frame_jump,           ///< frame number more than ingest.max_frame_jump above the port's previous
  count_
};
inline constexpr std::size_t kBadInputKinds = static_cast<std::size_t>(BadInput::count_);
std::string_view to_string(BadInput kind);

/// The fields of one header that glint uses, plus the ones it passes through.
struct SlsHeader {
  uint32_t jsonversion = 5;
  uint32_t bitmode = 16;                   ///< 4, 8, 12 (EIGER, packed), 16 or 32
  uint64_t file_index = 0;
  std::array<uint32_t, 2> detshape{1, 1};  ///< ports [x, y]
  std::array<uint32_t, 2> shape{0, 0};     ///< this port's pixels [x (cols), y (rows)]
  uint64_t size = 0;                       ///< payload bytes
  uint64_t acq_index = 0;
  uint64_t frame_index = 0;
  double progress = 0;
  std::string fname;
  uint32_t data = 1;                       ///< 0: end of acquisition
  uint32_t complete_image = 1;
  uint64_t frame_number = 0;
  uint64_t exp_length = 0;
  uint64_t packet_number = 0;
  uint64_t det_spec1 = 0;
  uint64_t timestamp = 0;                  ///< 10 MHz ticks
  uint32_t mod_id = 0;
  uint32_t row = 0;                        ///< port position in detshape (y)
  uint32_t column = 0;                     ///< port position in detshape (x)
  uint32_t det_spec2 = 0, det_spec3 = 0, det_spec4 = 0;
  uint32_t det_type = 0;
  uint32_t version = 0;
  uint32_t flip_rows = 0;                  ///< EIGER: this port's rows come bottom to top
  uint32_t quad = 0;                       ///< EIGER quad (detshape [1, 2], port 1 flipped)
  std::map<std::string, std::string> add_json_header;
  std::array<int, 4> rx_roi{-1, -1, -1, -1};

  bool is_end() const { return data == 0; }
  /// The rows of this port's block are sent last row first: slsReceiver marks an EIGER's bottom
  /// half-modules (and a quad's second port) with flipRows, and its consumer flips them for EIGER
  /// only (detType 1).
  bool rows_flipped() const { return flip_rows != 0 && det_type == kDetTypeEiger; }
  /// addJsonHeader marks a dark frame: frameMode "pedestal" or "newPedestal", as MOENCH and
  /// JUNGFRAU processors read it.
  bool marked_dark() const;
  static constexpr uint32_t kDetTypeEiger = 1;  ///< slsDetectorDefs::detectorType EIGER
  bool operator==(const SlsHeader&) const = default;
};

/// Result of parsing: the header, or the reason it was rejected plus a short detail.
struct ParsedHeader {
  std::optional<SlsHeader> header;
  BadInput reason = BadInput::malformed_json;
  std::string detail;
};

/// The largest header accepted. slsReceiver's are about 1 KB; addJsonHeader may add some.
inline constexpr std::size_t kMaxSlsHeaderBytes = 64 * 1024;

/// Parses a header message (simdjson; one reusable parser per thread, no allocation per header
/// once warm except for the pass-through strings: an fname longer than 15 characters and
/// addJsonHeader's entries). Unknown keys are ignored, a key given twice counts with its last
/// value; version 4 and 5 accepted. An integer that does not fit 64 bits makes the header malformed
/// (simdjson); one that does not fit its 32-bit field, or a `data` other than the integer 0 or 1,
/// is out_of_range (never truncated, never an end). A text over kMaxSlsHeaderBytes is refused as
/// oversize without being parsed (the parser's buffers never grow past that).
ParsedHeader parse_sls_header(std::string_view text);

/// The header as slsReceiver 9.x sends it (keys in its order, "}\n" at the end). Version 4 omits
/// rx_roi.
std::string format_sls_header(const SlsHeader& h);
/// The end-of-acquisition message (data 0, other fields zero or empty).
std::string format_sls_end(uint32_t jsonversion = 5);

/// Payload bytes of `pixels` pixels at `bitmode` (4 bits: two pixels per byte, 12 bits: two
/// pixels in three bytes; rounded up).
std::size_t payload_bytes(uint32_t bitmode, std::size_t pixels);
bool is_valid_bitmode(uint32_t bitmode);

/// Widens `n` pixels from the stream's bitmode into uint16, starting at pixel `first_pixel` of
/// the payload `src`: 4, 8 and 12 bits widen, 16 copies (little-endian), 32 saturates at 65535.
/// 4 bits: two pixels per byte, the first in the high nibble. 12 bits (EIGER): pixels 2k and
/// 2k+1 in bytes b0 b1 b2 as the 24-bit little-endian value b0 | b1 << 8 | b2 << 16, pixel 2k
/// in its low 12 bits (as slsDetectorPackage's consumers unpack it). `streaming`: `dst` is read
/// next by a device (pinned staging), not by this CPU: 16-bit pixels are written with
/// non-temporal stores (copy_streaming), which spares the caches and the read of `dst`.
void decode_row(uint32_t bitmode, const std::byte* src, std::size_t first_pixel, std::size_t n,
                uint16_t* dst, bool streaming = false);

/// Copies `bytes` from `src` to `dst` with non-temporal stores where the CPU has them (x86-64),
/// fenced before it returns, so that another thread that synchronises with this one afterwards
/// sees the data; a plain memcpy elsewhere.
void copy_streaming(void* dst, const void* src, std::size_t bytes);

/// Encodes uint16 pixels into the stream's bitmode (the inverse of decode_row; 4, 8, 12 and 32
/// bits as used by the simulator). Values that do not fit are saturated.
void encode_pixels(uint32_t bitmode, std::span<const uint16_t> pixels, std::byte* dst);

}  // namespace glint::pipeline
