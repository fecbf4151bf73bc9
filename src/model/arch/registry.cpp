// tessera model: family -> architecture lookup (see arch.h).
#include "core/error.h"
#include "model/arch/arch.h"

namespace tessera {

const ArchSpec& ArchFor(ModelFamily family) {
  for (const ArchSpec* a : {&Qwen3MoeArch(), &Qwen3NextArch(), &Qwen35MoeArch(), &DiffusionGemmaArch()})
    if (a->family == family) return *a;
  Fail(ErrorKind::kUnsupported, "no architecture registered for family {}", FamilyName(family));
}

}  // namespace tessera
