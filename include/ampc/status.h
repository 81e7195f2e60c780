// Error handling shared by the whole project.
//
// Input-dependent failures travel as absl::Status / absl::StatusOr; the two propagation macros
// below are the only way they are forwarded. Broken internal invariants abort through AMPC_CHECK,
// which stays on in release builds and reports file:line.
#pragma once

#include <cstdio>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define AMPC_STATUS_CONCAT_INNER(a, b) a##b
#define AMPC_STATUS_CONCAT(a, b) AMPC_STATUS_CONCAT_INNER(a, b)

// Returns from the enclosing function when `expr` (an absl::Status) is not OK.
#define AMPC_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::absl::Status ampc_status_ = (expr);        \
    if (!ampc_status_.ok()) return ampc_status_; \
  } while (false)

// `lhs = value of expr` when `expr` (an absl::StatusOr) holds a value, else returns its status.
#define AMPC_ASSIGN_OR_RETURN(lhs, expr) \
  AMPC_ASSIGN_OR_RETURN_IMPL(AMPC_STATUS_CONCAT(ampc_statusor_, __LINE__), lhs, expr)
#define AMPC_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return std::move(tmp).status();   \
  lhs = *std::move(tmp)

// Aborts with file:line when an internal invariant does not hold. Never for bad input.
#define AMPC_CHECK(cond)                                                                    \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      std::fprintf(stderr, "%s:%d: internal error: check failed: %s\n", __FILE__, __LINE__, \
                   #cond);                                                                  \
      std::abort();                                                                         \
    }                                                                                       \
  } while (false)
