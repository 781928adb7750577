// defines: parse_json_input, the one parser of user-supplied JSON files (--config, model specs),
// and quote_input, the one way an error message quotes a piece of the user's input.
#pragma once

#include <cstddef>
#include <istream>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace mirror {

/// Note [Hostile input]: a file can nest arrays 100,000 deep (the parser is iterative, but
/// everything that walks the result recurses) or hold a megabyte where a number belongs. JSON
/// input is refused past kMaxJsonDepth levels, and messages quote at most kMaxQuotedInput
/// characters of what they found.
inline constexpr int kMaxJsonDepth = 256;
inline constexpr std::size_t kMaxQuotedInput = 200;

/// Parses all of `in` as one JSON value. `what` names the input in messages, e.g.
/// "--config run.json". DataError for invalid JSON (nlohmann's reason, quoted input cut to
/// kMaxQuotedInput) and for nesting deeper than kMaxJsonDepth (naming the byte offset).
nlohmann::json parse_json_input(std::istream& in, const std::string& what);
nlohmann::json parse_json_input(std::string_view text, const std::string& what);

/// `text` when it is at most `max` characters, else its first `max` characters followed by
/// "... (N characters in all)"; control characters (NUL included) are shown as \xHH.
std::string quote_input(std::string_view text, std::size_t max = kMaxQuotedInput);

}  // namespace mirror
