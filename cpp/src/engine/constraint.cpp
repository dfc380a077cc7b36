#include "engine/constraint.h"

#include <mutex>

#include "common/errors.h"

namespace edgellm {
namespace {
std::mutex& factory_mutex() {
  static std::mutex m;
  return m;
}
ConstraintFactory& factory_slot() {
  static ConstraintFactory f;
  return f;
}
}  // namespace

TokenConstraint::~TokenConstraint() = default;

void register_constraint_factory(ConstraintFactory factory) {
  std::lock_guard<std::mutex> lock(factory_mutex());
  factory_slot() = std::move(factory);
}

bool has_constraint_factory() {
  std::lock_guard<std::mutex> lock(factory_mutex());
  return static_cast<bool>(factory_slot());
}

std::unique_ptr<TokenConstraint> make_constraint(const ConstraintSpec& spec) {
  ConstraintFactory f;
  {
    std::lock_guard<std::mutex> lock(factory_mutex());
    f = factory_slot();
  }
  if (!f)
    throw InvalidRequestError(
        "constrained decoding (json_schema / grammar / regex / response_format) is not available: "
        "no constraint factory is registered");
  auto c = f(spec);
  if (!c) throw InvalidRequestError("the constraint factory could not build a constraint for this request");
  return c;
}

}  // namespace edgellm
