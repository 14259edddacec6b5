// A minimal JSON parser for tests that check the CLI's --json output
// (RFC 8259 values; \u escapes are kept as-is, enough for validation).
#pragma once
#include <cctype>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace json_mini {

struct Value {
  enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
  bool b = false;
  double num = 0.0;
  std::string str;
  std::vector<Value> arr;
  std::vector<std::pair<std::string, Value>> obj;  // in document order

  // The member named `key`, or nullptr (also when this is not an object).
  const Value* get(const std::string& key) const {
    for (const auto& [k, v] : obj)
      if (k == key) return &v;
    return nullptr;
  }
  // The member named `key`, or a null value when there is none.
  const Value& operator[](const std::string& key) const {
    static const Value none;
    const Value* v = get(key);
    return v ? *v : none;
  }
};

class Parser {
 public:
  explicit Parser(const std::string& text) : s_(text) {}

  // Parses exactly one value; only whitespace may follow it.
  Value parse_document() {
    Value v = value();
    skip_ws();
    if (i_ != s_.size()) fail("trailing characters after the JSON value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("JSON parse error at offset " + std::to_string(i_) + ": " + what);
  }
  void skip_ws() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  char peek() {
    skip_ws();
    if (i_ >= s_.size()) fail("unexpected end of input");
    return s_[i_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  bool literal(const char* word) {
    const std::string w = word;
    if (s_.compare(i_, w.size(), w) != 0) return false;
    i_ += w.size();
    return true;
  }

  Value value() {
    Value v;
    const char c = peek();
    if (c == '{') {
      v.kind = Value::Object;
      ++i_;
      if (peek() == '}') return ++i_, v;
      for (;;) {
        if (peek() != '"') fail("expected a string key");
        std::string key = string();
        expect(':');
        v.obj.emplace_back(std::move(key), value());
        if (peek() == ',') {
          ++i_;
          continue;
        }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.kind = Value::Array;
      ++i_;
      if (peek() == ']') return ++i_, v;
      for (;;) {
        v.arr.push_back(value());
        if (peek() == ',') {
          ++i_;
          continue;
        }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.kind = Value::String;
      v.str = string();
      return v;
    }
    if (literal("true")) {
      v.kind = Value::Bool;
      v.b = true;
      return v;
    }
    if (literal("false")) {
      v.kind = Value::Bool;
      return v;
    }
    if (literal("null")) return v;
    if (c == '-' || std::isdigit(static_cast<unsigned char>(c))) {
      const char* begin = s_.c_str() + i_;
      char* end = nullptr;
      v.kind = Value::Number;
      v.num = std::strtod(begin, &end);
      if (end == begin) fail("bad number");
      i_ += static_cast<size_t>(end - begin);
      return v;
    }
    fail(std::string("unexpected character '") + c + "'");
  }

  std::string string() {
    expect('"');
    std::string out;
    while (i_ < s_.size() && s_[i_] != '"') {
      char c = s_[i_++];
      if (static_cast<unsigned char>(c) < 0x20) fail("control character inside a string");
      if (c == '\\') {
        if (i_ >= s_.size()) fail("unterminated escape");
        const char e = s_[i_++];
        switch (e) {
          case 'n': out += '\n'; break;
          case 't': out += '\t'; break;
          case 'r': out += '\r'; break;
          case 'b': out += '\b'; break;
          case 'f': out += '\f'; break;
          case 'u': out += "\\u"; break;  // kept escaped
          case '"':
          case '\\':
          case '/': out += e; break;
          default: fail(std::string("bad escape \\") + e);
        }
        continue;
      }
      out += c;
    }
    if (i_ >= s_.size()) fail("unterminated string");
    ++i_;
    return out;
  }

  const std::string& s_;
  size_t i_ = 0;
};

inline Value parse(const std::string& text) { return Parser(text).parse_document(); }

}  // namespace json_mini
