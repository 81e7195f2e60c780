#include "compiler/text_ir_syntax.h"

#include <charconv>
#include <cmath>

#include "compiler/strings.h"

namespace ampc::text_ir {
namespace {

bool is_alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}
bool is_name_char(char c) {
  return is_alnum(c) || c == '_' || c == '.' || c == ':' || c == '/' || c == '-';
}
bool is_word_char(char c) { return is_alnum(c) || c == '_' || c == '.' || c == '+' || c == '-'; }
bool is_punct(char c) { return std::string_view("()[]{}<>,=:").find(c) != std::string_view::npos; }
bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A character as messages show it: itself when printable, else \xHH.
std::string show_char(char c) {
  const auto byte = static_cast<unsigned char>(c);
  if (byte >= 0x20 && byte < 0x7f) return std::string(1, c);
  return fmt::format("\\x{:02x}", byte);
}

std::string with_float_marker(std::string text) {
  if (text.find_first_of(".en") == std::string::npos) text += ".0";
  return text;
}

template <typename F>
std::optional<F> parse_float(std::string_view word) {
  if (!word.empty() && word[0] == '+') {
    word.remove_prefix(1);
    if (!word.empty() && word[0] == '-') return std::nullopt;
  }
  F value = 0;
  auto [end, error] = std::from_chars(word.data(), word.data() + word.size(), value);
  if (error != std::errc() || end != word.data() + word.size()) return std::nullopt;
  return value;
}

class Lexer {
 public:
  explicit Lexer(std::string_view text) : text_(text) {}

  absl::StatusOr<std::vector<Token>> run() {
    std::vector<Token> tokens;
    bool line_start = true;
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '\n') {
        ++pos_;
        ++line_;
        line_begin_ = pos_;
        line_start = true;
        continue;
      }
      if (is_blank(c)) {
        ++pos_;
        continue;
      }
      if (line_start && (c == '#' || text_.substr(pos_, 2) == "//")) {
        skip_to_line_end();
        continue;
      }
      line_start = false;
      Token token{TokenKind::kEnd, "", line_, column()};
      if (c == '#') {
        token.kind = TokenKind::kComment;
        const size_t begin = ++pos_;
        skip_to_line_end();
        token.text = std::string(text_.substr(begin, pos_ - begin));
      } else if (c == '"') {
        token.kind = TokenKind::kString;
        AMPC_RETURN_IF_ERROR(read_string(&token.text));
      } else if (c == '%') {
        token.kind = TokenKind::kValue;
        AMPC_RETURN_IF_ERROR(read_value_name(&token.text));
      } else if (is_word_char(c)) {
        token.kind = TokenKind::kWord;
        const size_t begin = pos_;
        while (pos_ < text_.size() && is_word_char(text_[pos_])) ++pos_;
        token.text = std::string(text_.substr(begin, pos_ - begin));
      } else if (is_punct(c)) {
        token.kind = TokenKind::kPunct;
        token.text = std::string(1, c);
        ++pos_;
      } else {
        return error(str_cat("unexpected character '", show_char(c), "'"));
      }
      tokens.push_back(std::move(token));
    }
    tokens.push_back(Token{TokenKind::kEnd, "", line_, column()});
    return tokens;
  }

 private:
  int column() const { return static_cast<int>(pos_ - line_begin_) + 1; }
  absl::Status error(std::string_view message) const {
    return absl::InvalidArgumentError(str_cat(position(line_, column()), message));
  }
  void skip_to_line_end() {
    while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
  }

  absl::Status read_string(std::string* out) {
    if (std::optional<std::string> problem = read_quoted(text_, &pos_, out)) return error(*problem);
    return absl::OkStatus();
  }

  absl::Status read_value_name(std::string* out) {
    ++pos_;  // '%'
    if (pos_ < text_.size() && text_[pos_] == '"') return read_string(out);
    const size_t begin = pos_;
    while (pos_ < text_.size() && is_name_char(text_[pos_])) ++pos_;
    // A trailing ':' belongs to the declaration `%x: type`, not to the name.
    while (pos_ > begin && text_[pos_ - 1] == ':') --pos_;
    if (pos_ == begin) {
      return error(str_cat("expected a value name after '%' but found ",
                           pos_ < text_.size() ? str_cat("'", show_char(text_[pos_]), "'")
                                               : std::string("end of input")));
    }
    *out = std::string(text_.substr(begin, pos_ - begin));
    return absl::OkStatus();
  }

  std::string_view text_;
  size_t pos_ = 0;
  size_t line_begin_ = 0;
  int line_ = 1;
};

}  // namespace

bool is_bare_value_name(std::string_view name) {
  if (name.empty() || name.back() == ':') return false;
  for (char c : name) {
    if (!is_name_char(c)) return false;
  }
  return true;
}

bool is_bare_word(std::string_view text) {
  if (text.empty()) return false;
  for (char c : text) {
    if (!is_word_char(c)) return false;
  }
  return true;
}

std::string quote(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        // Bytes from 0x80 up pass through, so UTF-8 text stays readable.
        if (byte < 0x20 || byte == 0x7f) {
          out += fmt::format("\\x{:02x}", byte);
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

bool is_int_literal(std::string_view word) {
  size_t i = !word.empty() && (word[0] == '-' || word[0] == '+') ? 1 : 0;
  if (i == word.size()) return false;
  for (; i < word.size(); ++i) {
    if (word[i] < '0' || word[i] > '9') return false;
  }
  return true;
}

std::optional<int64_t> parse_int(std::string_view word) {
  if (!is_int_literal(word)) return std::nullopt;
  if (word[0] == '+') word.remove_prefix(1);
  int64_t value = 0;
  auto [end, error] = std::from_chars(word.data(), word.data() + word.size(), value);
  if (error != std::errc() || end != word.data() + word.size()) return std::nullopt;
  return value;
}

std::optional<float> parse_f32(std::string_view word) { return parse_float<float>(word); }
std::optional<double> parse_f64(std::string_view word) { return parse_float<double>(word); }

std::string format_f32(float value) {
  if (std::isnan(value)) return "nan";
  return with_float_marker(fmt::format("{}", value));
}

std::string format_f64(double value) {
  if (std::isnan(value)) return "nan";
  return with_float_marker(fmt::format("{}", value));
}

std::string position(int line, int column) {
  return str_cat("line ", line, ", column ", column, ": ");
}

std::string describe(const Token& token) {
  switch (token.kind) {
    case TokenKind::kEnd:
      return "end of input";
    case TokenKind::kValue:
      return str_cat("'%", is_bare_value_name(token.text) ? token.text : quote(token.text), "'");
    case TokenKind::kString:
      return str_cat("'", quote(token.text), "'");
    case TokenKind::kComment:
      return str_cat("'#", token.text, "'");
    default:
      return str_cat("'", token.text, "'");
  }
}

absl::StatusOr<std::vector<Token>> tokenize(std::string_view text) { return Lexer(text).run(); }

std::string format_precision(const PrecisionDecision& decision) {
  std::string text = decision.compute ? std::string(dtype_name(*decision.compute)) : "-";
  if (decision.accumulate) text += str_cat(" (acc ", dtype_name(*decision.accumulate), ")");
  if (decision.reason.empty()) return text;
  // A reason is the rest of the line, trimmed; quote it when that would lose something.
  const std::string& reason = decision.reason;
  bool needs_quotes = reason.front() == '"' || reason.front() == ' ' || reason.back() == ' ';
  for (char c : reason) {
    const auto byte = static_cast<unsigned char>(c);
    needs_quotes |= byte < 0x20 || byte == 0x7f;
  }
  return str_cat(text, ": ", needs_quotes ? quote(reason) : reason);
}

// `# f16 (acc f32): allow-list MatMul`; the compute dtype may be '-', the other parts omitted.
absl::Status parse_precision(const Token& comment, PrecisionDecision* decision) {
  const std::string_view text = comment.text;
  size_t i = 0;
  auto error = [&](std::string_view message) {
    return absl::InvalidArgumentError(
        str_cat(position(comment.line, comment.column + 1 + static_cast<int>(i)), message));
  };
  auto fail = [&](std::string_view expected_what) {
    const std::string found =
        i < text.size() ? str_cat("'", text.substr(i), "'") : std::string("end of line");
    return error(str_cat("expected ", expected_what, " but found ", found));
  };
  auto skip_blanks = [&] {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t' || text[i] == '\r')) ++i;
  };
  auto read_dtype = [&](std::optional<DType>* out, bool allow_dash) -> bool {
    size_t end = i;
    while (end < text.size() && std::string_view(" \t\r():").find(text[end]) == text.npos) ++end;
    const std::string_view word = text.substr(i, end - i);
    if (allow_dash && word == "-") {
      i = end;
      return true;
    }
    *out = parse_dtype(word);
    if (*out) i = end;
    return out->has_value();
  };
  skip_blanks();
  if (!read_dtype(&decision->compute, true)) {
    return fail("a precision decision '# DTYPE|- (acc DTYPE): REASON'");
  }
  skip_blanks();
  if (i < text.size() && text[i] == '(') {
    ++i;
    skip_blanks();
    if (text.substr(i, 3) != "acc") return fail("'acc'");
    i += 3;
    skip_blanks();
    if (!read_dtype(&decision->accumulate, false)) return fail("an accumulate dtype");
    skip_blanks();
    if (i >= text.size() || text[i] != ')') return fail("')'");
    ++i;
    skip_blanks();
  }
  if (i == text.size()) return absl::OkStatus();
  if (text[i] != ':') return fail("':' and the reason");
  ++i;
  skip_blanks();
  size_t end = text.size();
  while (end > i && (text[end - 1] == ' ' || text[end - 1] == '\t' || text[end - 1] == '\r')) --end;
  if (i < end && text[i] == '"') {
    if (std::optional<std::string> problem = read_quoted(text, &i, &decision->reason)) {
      return error(*problem);
    }
    if (i != end) return fail("the end of the line after the quoted reason");
    return absl::OkStatus();
  }
  decision->reason = std::string(text.substr(i, end - i));
  return absl::OkStatus();
}

std::optional<std::string> read_quoted(std::string_view text, size_t* pos, std::string* out) {
  out->clear();
  const size_t open = (*pos)++;
  while (*pos < text.size()) {
    const char c = text[*pos];
    if (c == '"') {
      ++*pos;
      return std::nullopt;
    }
    if (c == '\n') break;
    if (c != '\\') {
      *out += c;
      ++*pos;
      continue;
    }
    const char escape = *pos + 1 < text.size() ? text[*pos + 1] : '\0';
    switch (escape) {
      case '"':
      case '\\':
        *out += escape;
        break;
      case 'n':
        *out += '\n';
        break;
      case 't':
        *out += '\t';
        break;
      case 'r':
        *out += '\r';
        break;
      case 'x': {
        const int high = *pos + 2 < text.size() ? hex_digit(text[*pos + 2]) : -1;
        const int low = *pos + 3 < text.size() ? hex_digit(text[*pos + 3]) : -1;
        if (high < 0 || low < 0) return "expected two hex digits after '\\x'";
        *out += static_cast<char>(high * 16 + low);
        *pos += 2;
        break;
      }
      default:
        return str_cat("unknown escape '\\", show_char(escape), "' in string");
    }
    *pos += 2;
  }
  *pos = open;  // an unterminated string is reported where it starts
  return std::string("unterminated string (expected a closing '\"' on the same line)");
}

}  // namespace ampc::text_ir
