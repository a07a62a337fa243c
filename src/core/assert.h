// SLUICE_ASSERT: invariants that only a bug in sluice can break. Input errors never reach here;
// they are reported through Status (include/sluice/status.h). Active in every build type,
// because a silently broken invariant in an inference engine produces plausible garbage.
#pragma once

#include <cstdio>
#include <cstdlib>

#define SLUICE_ASSERT(cond)                                                                            \
    do {                                                                                               \
        if (!(cond)) {                                                                                 \
            std::fprintf(stderr, "sluice: assertion failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
            std::abort();                                                                              \
        }                                                                                              \
    } while (0)
