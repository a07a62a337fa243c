#include "sluice/status.h"

namespace sluice {

const char* error_code_name(ErrorCode code) {
    switch (code) {
        case ErrorCode::kOk: return "ok";
        case ErrorCode::kInvalidArgument: return "invalid argument";
        case ErrorCode::kNotFound: return "not found";
        case ErrorCode::kCorrupt: return "corrupt";
        case ErrorCode::kUnsupported: return "unsupported";
        case ErrorCode::kIo: return "io error";
        case ErrorCode::kOutOfMemory: return "out of memory";
        case ErrorCode::kCancelled: return "cancelled";
        case ErrorCode::kInternal: return "internal error";
    }
    return "unknown";
}

}  // namespace sluice
