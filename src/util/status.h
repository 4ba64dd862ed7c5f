// Two kinds of error: QVL_CHECK aborts on a broken invariant (a bug); Status/Result carry a failure a
// user can cause (bad file, bad argument) up to the edge with what, where, expected and got.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace qvl {

// A user-visible failure. The message is one line: what failed, where, what was expected, what was got,
// and where possible a hint the user can act on.
class Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status Error(std::string message) { return Status(std::move(message)); }

  bool ok() const { return !message_.has_value(); }
  const std::string& message() const {
    static const std::string kEmpty;
    return message_ ? *message_ : kEmpty;
  }
  // Prefix the message with context, e.g. the file being read: "photo.jpg: truncated JPEG data".
  Status with_context(const std::string& context) const {
    if (ok()) return *this;
    return Status(context + ": " + *message_);
  }

 private:
  explicit Status(std::string message) : message_(std::move(message)) {}
  std::optional<std::string> message_;
};

// A value or the Status that explains why there is none.
template <class T>
class Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    if (std::get<Status>(v_).ok()) std::abort();  // a Result built from an OK status has no value: a bug
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

// Prints where and aborts. Out of line (util/status.cpp): an inline copy emitted by a kernel file compiled
// for AVX-512 could be the one the linker keeps for every caller.
[[noreturn]] void check_failed(const char* expr, const char* file, int line, const char* msg);

}  // namespace qvl

// Abort with file:line when an invariant is broken. Never use for input a user controls.
#define QVL_CHECK(cond) \
  do { if (!(cond)) ::qvl::check_failed(#cond, __FILE__, __LINE__, ""); } while (0)
#define QVL_CHECK_MSG(cond, msg) \
  do { if (!(cond)) ::qvl::check_failed(#cond, __FILE__, __LINE__, (msg)); } while (0)

// Propagate a failed Status / Result from the current function.
#define QVL_RETURN_IF_ERROR(expr)           \
  do {                                      \
    ::qvl::Status qvl_status_ = (expr);     \
    if (!qvl_status_.ok()) return qvl_status_; \
  } while (0)

#define QVL_CONCAT_INNER_(a, b) a##b
#define QVL_CONCAT_(a, b) QVL_CONCAT_INNER_(a, b)
#define QVL_ASSIGN_OR_RETURN(lhs, expr) QVL_ASSIGN_OR_RETURN_IMPL_(QVL_CONCAT_(qvl_result_, __LINE__), lhs, expr)
#define QVL_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()
