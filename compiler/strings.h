// String building for messages. (Debian's abseil predates std::string_view support in StrCat,
// so ampc concatenates through fmt, which takes every type the messages use.)
#pragma once

#include <iterator>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "fmt/format.h"
#include "fmt/ranges.h"

// absl::string_view (a distinct type in Debian's abseil, e.g. Status::message()) and
// absl::Status print like their std counterparts.
template <>
struct fmt::formatter<absl::string_view> : fmt::formatter<std::string_view> {
  template <typename Context>
  auto format(absl::string_view text, Context& ctx) const {
    return fmt::formatter<std::string_view>::format(std::string_view(text.data(), text.size()),
                                                    ctx);
  }
};
template <>
struct fmt::formatter<absl::Status> : fmt::formatter<std::string_view> {
  template <typename Context>
  auto format(const absl::Status& status, Context& ctx) const {
    return fmt::formatter<std::string_view>::format(status.ToString(), ctx);
  }
};

namespace ampc {

// Concatenates the text forms of `parts`: str_cat("node '", name, "' has ", n, " inputs").
template <typename... Parts>
std::string str_cat(const Parts&... parts) {
  std::string out;
  (fmt::format_to(std::back_inserter(out), "{}", parts), ...);
  return out;
}

// Joins the text forms of a range's elements with `separator`.
template <typename Range>
std::string str_join(const Range& range, std::string_view separator) {
  return fmt::format("{}", fmt::join(range, separator));
}

}  // namespace ampc
