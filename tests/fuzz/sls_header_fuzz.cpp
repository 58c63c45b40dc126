// The slsReceiver stream header parser: any bytes on a data socket reach parse_sls_header.
// Beyond not crashing: a header it accepts has data 0 or 1, formats (as `glint sim` sends it) into
// a header that parses again, and formatting is a fixed point after one round.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_util.hpp"
#include "glint/pipeline/sls_stream.hpp"

using namespace glint::pipeline;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const ParsedHeader p = parse_sls_header(text);
  if (!p.header) {
    GLINT_FUZZ_CHECK(p.reason != BadInput::count_);
    GLINT_FUZZ_CHECK(!p.detail.empty());
    GLINT_FUZZ_CHECK(!to_string(p.reason).empty());
    return 0;
  }
  // data is 0 or 1 and nothing else: a wider number is never truncated into either.
  GLINT_FUZZ_CHECK(p.header->data <= 1);
  const std::string once = format_sls_header(*p.header);
  const ParsedHeader again = parse_sls_header(once);
  GLINT_FUZZ_CHECK(again.header.has_value());
  const std::string twice = format_sls_header(*again.header);
  GLINT_FUZZ_CHECK(once == twice);
  const ParsedHeader third = parse_sls_header(twice);
  GLINT_FUZZ_CHECK(third.header.has_value() && *third.header == *again.header);
  // The payload size the ingest will compare with: the arithmetic must not overflow silently.
  const SlsHeader& h = *p.header;
  if (!h.is_end() && is_valid_bitmode(h.bitmode)) {
    const std::size_t pixels = std::size_t{h.shape[0]} * h.shape[1];
    const std::size_t bytes = payload_bytes(h.bitmode, pixels);
    GLINT_FUZZ_CHECK(h.bitmode == 4    ? bytes == (pixels + 1) / 2
                     : h.bitmode == 12 ? bytes == (pixels * 3 + 1) / 2
                                       : bytes / (h.bitmode / 8) == pixels);
  }
  return 0;
}
