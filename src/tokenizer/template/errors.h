// tessera jinja: error subtypes: one already carrying its template location, and the one a
// template raises on purpose through raise_exception() (its message is passed on unchanged).
#pragma once

#include "core/error.h"

namespace tessera::jinja {

class LocatedError : public Error {
 public:
  using Error::Error;
};

class RaisedError : public LocatedError {
 public:
  using LocatedError::LocatedError;
};

}  // namespace tessera::jinja
