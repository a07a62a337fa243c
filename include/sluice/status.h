// Errors that cross module boundaries: Status (success or a message) and Expected<T>
// (a value or a Status).
//
// Contract: a Status message names the place and shows expected vs actual, prefixed by the
// module in brackets, e.g. "[safetensors] tensor 'x': expected BF16 [512,2048], got F32".
// Library code never exits or aborts on bad input; it returns one of these. SLUICE_ASSERT
// (src/core/assert.h) is for broken invariants only.
//
// Thread safety: plain values, copyable and movable; no shared state.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "sluice/export.h"

namespace sluice {

enum class ErrorCode {
    kOk = 0,
    kInvalidArgument,  // the caller passed something malformed
    kNotFound,         // a file, tensor or key is missing
    kCorrupt,          // a file exists but its contents are wrong (bad header, checksum, size)
    kUnsupported,      // well-formed input that sluice does not handle (model type, quant mode)
    kIo,               // the OS refused a read, write, open or map
    kOutOfMemory,      // a budget or an allocation could not be met
    kCancelled,        // stopped on request
    kInternal,         // a bug in sluice
};

SLUICE_API const char* error_code_name(ErrorCode code);

class [[nodiscard]] SLUICE_API Status {
 public:
    Status() = default;
    Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

    static Status ok() { return {}; }

    bool is_ok() const { return code_ == ErrorCode::kOk; }
    explicit operator bool() const { return is_ok(); }
    ErrorCode code() const { return code_; }
    const std::string& message() const { return message_; }

    // Prefixes context to the message: "<context>: <message>". Used when an error passes up
    // through a layer that knows more (the file name, the tensor name).
    Status with_context(const std::string& context) const {
        if (is_ok()) return *this;
        return Status(code_, context + ": " + message_);
    }

 private:
    ErrorCode code_ = ErrorCode::kOk;
    std::string message_;
};

// Builds an error Status; a thin helper so call sites read as one line.
inline Status error(ErrorCode code, std::string message) {
    return Status(code, std::move(message));
}

template <typename T>
class [[nodiscard]] Expected {
 public:
    Expected(T value) : value_(std::move(value)) {}         // NOLINT: implicit by design
    Expected(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
        if (status_.is_ok()) status_ = Status(ErrorCode::kInternal, "Expected built from an ok Status");
    }

    bool has_value() const { return value_.has_value(); }
    explicit operator bool() const { return has_value(); }

    // Precondition for the accessors below: has_value(). Checked: a violation aborts, since it is
    // a bug in the caller, never a consequence of input.
    T& value() & {
        check();
        return *value_;
    }
    const T& value() const& {
        check();
        return *value_;
    }
    T&& value() && {
        check();
        return std::move(*value_);
    }
    T& operator*() & { return value(); }
    const T& operator*() const& { return value(); }
    T* operator->() { return &value(); }
    const T* operator->() const { return &value(); }

    const Status& status() const { return status_; }

 private:
    void check() const {
        if (!value_) std::abort();
    }
    std::optional<T> value_;
    Status status_;
};

}  // namespace sluice

#define SLUICE_CONCAT_INNER_(a, b) a##b
#define SLUICE_CONCAT_(a, b) SLUICE_CONCAT_INNER_(a, b)

// Propagates a failed Status from an expression returning Status. (A __COUNTER__-unique name,
// so the macro can nest inside lambdas passed to itself.)
#define SLUICE_RETURN_IF_ERROR(expr) \
    SLUICE_RETURN_IF_ERROR_IMPL_(SLUICE_CONCAT_(sluice_status_, __COUNTER__), expr)
#define SLUICE_RETURN_IF_ERROR_IMPL_(tmp, expr) \
    do {                                        \
        ::sluice::Status tmp = (expr);          \
        if (!tmp.is_ok()) return tmp;           \
    } while (0)

// `SLUICE_ASSIGN_OR_RETURN(auto x, make_x());` binds the value or returns the error.
#define SLUICE_ASSIGN_OR_RETURN(lhs, expr) \
    SLUICE_ASSIGN_OR_RETURN_IMPL_(SLUICE_CONCAT_(sluice_expected_, __COUNTER__), lhs, expr)
#define SLUICE_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
    auto tmp = (expr);                                \
    if (!tmp.has_value()) return tmp.status();        \
    lhs = std::move(tmp).value()
