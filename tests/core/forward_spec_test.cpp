// The forward-model text (docs/tv-solver.md) parsed one way for the configuration and glint recon.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "glint/tv/forward_spec.hpp"

namespace {

using glint::tv::ForwardSpec;
using glint::tv::parse_forward_spec;

TEST(ForwardSpec, ParsesTheThreeKinds) {
  EXPECT_EQ(parse_forward_spec("identity").kind, ForwardSpec::Kind::identity);
  const ForwardSpec g = parse_forward_spec("gaussian:1.5,0,2e-1");
  EXPECT_EQ(g.kind, ForwardSpec::Kind::gaussian);
  EXPECT_EQ(g.sigma[0], 1.5);
  EXPECT_EQ(g.sigma[1], 0.0);  // no blur along y
  EXPECT_EQ(g.sigma[2], 0.2);
  const ForwardSpec m = parse_forward_spec("mask:/data/run:1/m.h5:/entry/mask");
  EXPECT_EQ(m.kind, ForwardSpec::Kind::mask);
  EXPECT_EQ(m.file, "/data/run:1/m.h5");
  EXPECT_EQ(m.dataset, "/entry/mask");
}

TEST(ForwardSpec, RefusesWhatIsMalformedNamingIt) {
  for (const char* bad : {"", "blur", "Identity", "gaussian:", "gaussian:1,2", "gaussian:1,2,3,4",
                          "gaussian:1,x,2", "gaussian:1,-1,2", "gaussian:1,nan,2", "gaussian:1,2,",
                          "mask:m.h5", "mask::/m", "mask:m.h5:/", "mask:m.h5:m"}) {
    try {
      (void)parse_forward_spec(bad);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const std::invalid_argument& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("'" + std::string(bad) + "'"), std::string::npos) << m;
      // The allowed forms, named exactly once.
      const auto first = m.find("allowed: identity, gaussian:SX,SY,SZ");
      EXPECT_NE(first, std::string::npos) << m;
      EXPECT_EQ(m.find("allowed:", first + 1), std::string::npos) << m;
    }
  }
}

}  // namespace
