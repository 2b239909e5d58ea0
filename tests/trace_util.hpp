// Test helpers that look at the primitives ops bind (internal headers).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "transforms/trace.hpp"

namespace tessera::testing {

// Records the rule text and the parameters of every primitive bound while it
// is the innermost trace, then runs the primitive eagerly.
class RuleRecorder : public detail::Trace {
 public:
  std::vector<std::string> rules, params;
  std::vector<Array> process(const detail::PrimitivePtr& prim, const std::vector<Array>& args) override {
    rules.push_back(prim->rule(detail::abstract_of(args)).str());
    params.push_back(std::string(prim->name()) + " " + prim->params());
    return detail::eval_eager(detail::ExecContext::whole(), *prim, args);
  }
};

// The rule text and "name params" of the primitives `f` binds.
template <class F>
RuleRecorder record_rules(F&& f) {
  RuleRecorder rec;
  {
    detail::TraceScope scope(&rec);
    f();
  }
  return rec;
}

// The rule and parameters of the first primitive `f` binds; with `only`, it
// must bind exactly one.
template <class F>
std::pair<std::string, std::string> rule_of(F&& f, bool only = true) {
  const RuleRecorder rec = record_rules(f);
  if (only) {
    EXPECT_EQ(rec.rules.size(), 1u);
  }
  EXPECT_FALSE(rec.rules.empty());
  return rec.rules.empty() ? std::pair<std::string, std::string>{} : std::pair{rec.rules[0], rec.params[0]};
}

}  // namespace tessera::testing
