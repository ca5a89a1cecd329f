// Status propagation macros in the spirit of absl's status_macros.h, which
// Debian 12's abseil (20220623) does not ship.
#ifndef ASIDE_LIB_STATUS_MACROS_H_
#define ASIDE_LIB_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Returns from the enclosing function when `expr` (an absl::Status) is not OK.
#define ASIDE_RETURN_IF_ERROR(expr)                                   \
  do {                                                                \
    if (::absl::Status aside_status_ = (expr); !aside_status_.ok()) { \
      return aside_status_;                                           \
    }                                                                 \
  } while (false)

#define ASIDE_STATUS_CONCAT_INNER_(a, b) a##b
#define ASIDE_STATUS_CONCAT_(a, b) ASIDE_STATUS_CONCAT_INNER_(a, b)

// Evaluates `rexpr` (an absl::StatusOr<T>); on error returns its status from
// the enclosing function, otherwise moves the value into `lhs`, which may be
// a declaration: ASIDE_ASSIGN_OR_RETURN(auto table, Table::Create(...));
#define ASIDE_ASSIGN_OR_RETURN(lhs, rexpr) \
  ASIDE_ASSIGN_OR_RETURN_IMPL_(            \
      ASIDE_STATUS_CONCAT_(aside_statusor_, __LINE__), lhs, rexpr)

#define ASIDE_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                 \
  if (!statusor.ok()) {                                    \
    return std::move(statusor).status();                   \
  }                                                        \
  lhs = *std::move(statusor)

#endif  // ASIDE_LIB_STATUS_MACROS_H_
