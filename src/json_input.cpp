// parse_json_input and quote_input (Note [Hostile input], json_input.h).
#include "mirror/json_input.h"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <set>
#include <vector>

#include "mirror/error.h"

namespace mirror {
namespace {

using json = nlohmann::json;

/// Thrown by the parser callback; caught below to name the depth with the position.
struct TooDeep {};

json parse_bounded(std::string_view text, const std::string& what) {
  // The keys of each open object: a repeated key would otherwise keep its last value silently.
  std::vector<std::set<std::string>> keys;
  const json::parser_callback_t limit = [&](int depth, json::parse_event_t event, json& parsed) {
    // A container opening at `depth` (containers around it) is level depth + 1.
    const bool opens =
        event == json::parse_event_t::object_start || event == json::parse_event_t::array_start;
    if (opens && depth + 1 > kMaxJsonDepth) throw TooDeep{};
    if (event == json::parse_event_t::object_start) keys.emplace_back();
    if (event == json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
    if (event == json::parse_event_t::key && !keys.empty() &&
        !keys.back().insert(parsed.get<std::string>()).second) {
      throw DataError(what + ": the key '" + quote_input(parsed.get<std::string>()) +
                      "' appears twice in one object; give each key once");
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), limit);
  } catch (const TooDeep&) {
    // Where: the first byte past the limit, found by counting brackets (strings skipped).
    int depth = 0;
    bool in_string = false, escaped = false;
    std::size_t at = 0;
    for (; at < text.size(); ++at) {
      const char c = text[at];
      if (in_string) {
        if (escaped) {
          escaped = false;
        } else if (c == '\\') {
          escaped = true;
        } else if (c == '"') {
          in_string = false;
        }
        continue;
      }
      if (c == '"') in_string = true;
      if (c == '[' || c == '{') ++depth;
      if (c == ']' || c == '}') --depth;
      if (depth > kMaxJsonDepth) break;
    }
    throw DataError(what + ": JSON nested more than " + std::to_string(kMaxJsonDepth) +
                    " levels deep (level " + std::to_string(kMaxJsonDepth + 1) + " opens at byte " +
                    std::to_string(at) + "); no model or config needs that: check the file");
  } catch (const json::exception& e) {
    throw DataError(what + " is not valid JSON: " + quote_input(e.what()));
  }
}

}  // namespace

json parse_json_input(std::string_view text, const std::string& what) {
  return parse_bounded(text, what);
}

json parse_json_input(std::istream& in, const std::string& what) {
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  MIRROR_CHECK(!in.bad(), DataError, what + ": reading the file failed");
  return parse_bounded(text, what);
}

std::string quote_input(std::string_view text, std::size_t max) {
  std::string out;
  const std::size_t n = std::min(text.size(), max);
  for (std::size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 && c != '\t') {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02X", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (text.size() > max) out += "... (" + std::to_string(text.size()) + " characters in all)";
  return out;
}

}  // namespace mirror
