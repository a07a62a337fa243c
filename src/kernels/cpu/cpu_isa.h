// Diagnostic control of the CPU kernel dispatch, for tests and benchmarks only.
//
// The dispatched kernels (kernels.h) pick the best instruction set once, from the CPU's features.
// Tests override that choice to run every implementation built into the binary on this CPU and
// compare each with the reference. Not for production use: switching while kernels run on other
// threads is a data race on which table they read (each call reads the choice once, so it is
// benign, but results would mix implementations).
#pragma once

#include <string>
#include <vector>

namespace sluice::kernels::testing {

// The ISAs built into this binary that this CPU can run, best last ("portable", "avx2", "avx512").
std::vector<std::string> supported_isas();

// Makes the dispatched kernels use `isa` (one of supported_isas()); "" restores the automatic
// choice. Returns false (and changes nothing) for an unknown or unsupported name.
bool force_isa(const std::string& isa);

}  // namespace sluice::kernels::testing
