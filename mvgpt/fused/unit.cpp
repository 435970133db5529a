#include <mvgpt/fused/unit.h>

namespace mvgpt::fused {

#define MVGPT_FUSED_UNIT(name) Unit name##_unit();
#include <mvgpt/fused/units.def>
#undef MVGPT_FUSED_UNIT

const std::vector<Unit>& units() {
  static const std::vector<Unit> all = {
#define MVGPT_FUSED_UNIT(name) name##_unit(),
#include <mvgpt/fused/units.def>
#undef MVGPT_FUSED_UNIT
  };
  return all;
}

}  // namespace mvgpt::fused
