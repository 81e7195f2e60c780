// The lexical layer of the text IR, shared by its printer (text_ir.cc) and parser
// (text_ir_parser.cc): which names print bare, how strings and floats are spelled, and the
// tokenizer. Keeping both directions here is what makes print -> parse -> print an identity.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ampc/status.h"
#include "compiler/ir.h"

namespace ampc::text_ir {

// A value name prints bare after '%' when it is non-empty, made of [A-Za-z0-9_.:/-] and does not
// end in ':' (so `%x: f32[4]` reads as the name `x`); otherwise it is quoted.
bool is_bare_value_name(std::string_view name);
// A word is a run of [A-Za-z0-9_.+-]: numbers, dtypes, keywords, op names, graph names, domains
// and attribute names. True when `text` reads back as exactly one word.
bool is_bare_word(std::string_view text);
// The text between double quotes with C escapes (\" \\ \n \t \r \xHH), quotes included.
std::string quote(std::string_view text);

// Shortest text that reads back as the same value, always with '.', 'e', "inf" or "nan" so it
// cannot be taken for an integer. NaN prints as "nan" (sign and payload are not kept).
std::string format_f32(float value);
std::string format_f64(double value);

// Numbers as words spell them. An int literal is an optional sign and decimal digits; parse_int
// fails when it is out of range of int64. parse_f32/parse_f64 read any float text from_chars
// reads (1, -2.5, 1e-05, inf, -inf, nan) and fail when it is out of range of the type.
bool is_int_literal(std::string_view word);
std::optional<int64_t> parse_int(std::string_view word);
std::optional<float> parse_f32(std::string_view word);
std::optional<double> parse_f64(std::string_view word);

enum class TokenKind {
  kWord,     // see is_bare_word
  kValue,    // %name or %"name"; text is the name
  kString,   // "..."; text is the decoded string
  kPunct,    // one of ( ) [ ] { } < > , = :
  kComment,  // '#' after something else on its line; text is the rest of the line
  kEnd,
};

struct Token {
  TokenKind kind = TokenKind::kEnd;
  std::string text;
  int line = 1;
  int column = 1;
};

// "line 3, column 7: " — the prefix of every parse error.
std::string position(int line, int column);
// How a token is named in "but found ..." messages: 'text' (with % or quotes restored) or
// "end of input".
std::string describe(const Token& token);

// Splits `text` into tokens, ending with a kEnd token. Lines whose first non-blank characters are
// '#' or '//' are dropped; a '#' later on a line becomes one kComment token.
absl::StatusOr<std::vector<Token>> tokenize(std::string_view text);

// The precision comment of a node line, without its '#': `f16 (acc f32): allow-list MatMul`,
// `-: reason` when there is no compute dtype. The reason is quoted when trimming the line would
// change it (leading or trailing blanks, control characters, a leading '"').
std::string format_precision(const PrecisionDecision& decision);
// Reads a kComment token's text back into `decision`; errors point into the comment.
absl::Status parse_precision(const Token& comment, PrecisionDecision* decision);

// Decodes the quoted string that starts at text[*pos] (a '"'), advancing *pos past the closing
// quote. On failure returns what is wrong, with *pos at the offending character (the opening
// quote when the string is unterminated).
std::optional<std::string> read_quoted(std::string_view text, size_t* pos, std::string* out);

}  // namespace ampc::text_ir
