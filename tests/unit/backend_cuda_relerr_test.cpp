// The CUDA conformance suite's error measure (backend_cuda_conformance.h, RelErr) on values a broken
// kernel writes: NaN and stray infinities must fail a tolerance, not vanish from the maximum. Host
// code only, so it runs on every machine (the conformance tests themselves need a GPU).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "unit/backend_cuda_conformance.h"

namespace tessera::cuda_conformance {
namespace {

TEST(CudaConformanceRelErr, MeasuresTheLargestDifferenceAgainstTheLargestValue) {
  EXPECT_DOUBLE_EQ(RelErr({1.0f, 2.0f, -4.0f}, {1.0f, 2.5f, -4.0f}), 0.5 / 4.0);
  EXPECT_DOUBLE_EQ(RelErr({3.0f}, {3.0f}), 0.0);
}

TEST(CudaConformanceRelErr, NanInTheResultIsAnInfiniteError) {
  EXPECT_EQ(RelErr({1.0f, NAN, 2.0f}, {1.0f, 1.5f, 2.0f}), INFINITY);
  EXPECT_EQ(RelErr({NAN, NAN}, {1.0f, 2.0f}), INFINITY);  // all NaN: the old max kept 0
  EXPECT_EQ(RelErr({1.0f, 2.0f, NAN}, {1.0f, 2.0f, 1.0f}), INFINITY);  // NaN last, after finite differences
}

TEST(CudaConformanceRelErr, InfinitiesCountOnlyWhereTheyDiffer) {
  EXPECT_EQ(RelErr({INFINITY, 1.0f}, {1.0f, 1.0f}), INFINITY);
  EXPECT_EQ(RelErr({-INFINITY, 1.0f}, {INFINITY, 1.0f}), INFINITY);
  // The same infinity in both is no error, and the reference's infinity does not scale the others.
  EXPECT_DOUBLE_EQ(RelErr({-INFINITY, 1.0f, 2.0f}, {-INFINITY, 1.0f, 1.0f}), 1.0 / 1.0);
  EXPECT_EQ(RelErr({1.0f}, {NAN}), INFINITY);  // a NaN reference is never a pass
}

}  // namespace
}  // namespace tessera::cuda_conformance
