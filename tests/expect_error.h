// tessera tests: asserting that a call throws tessera::Error of a given kind whose message names
// every expected part (the file, the tensor, the key...).
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include "core/error.h"

namespace tessera::testing {

template <typename F>
void ExpectError(F&& f, ErrorKind kind, std::initializer_list<std::string> parts) {
  try {
    f();
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_EQ(static_cast<int>(e.kind()), static_cast<int>(kind)) << msg;
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    return;
  }
  ADD_FAILURE() << "expected an Error";
}

}  // namespace tessera::testing
