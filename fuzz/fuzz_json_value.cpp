// JSON value parser (the schema reader). The input is JSON text. A document that parses must
// dump to compact JSON that parses again to a document dumping identically (idempotence), and
// json_quote of any bytes that are valid UTF-8 must parse back to those bytes.
#include "fuzz_util.h"
#include "grammar/json_value.h"

using namespace edgellm;
using namespace edgellm::grammar;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (fuzz::valid_utf8(text)) {
    const std::string q = json_quote(text);
    JsonValue s;
    try {
      s = parse_json(q, "quoted");
    } catch (const InvalidRequestError& e) {
      std::fprintf(stderr, "json_quote output does not parse: %s\n", e.what());
      std::abort();
    }
    FUZZ_CHECK(s.is_string() && s.text == text);
  }
  JsonValue v;
  try {
    v = parse_json(text, "input");
  } catch (const InvalidRequestError&) {
    return 0;
  }
  const std::string d1 = v.dump();
  JsonValue v2;
  try {
    v2 = parse_json(d1, "dump");
  } catch (const InvalidRequestError& e) {
    std::fprintf(stderr, "dump does not parse: %s\n%s\n", e.what(), d1.c_str());
    std::abort();
  }
  FUZZ_CHECK(v2.dump() == d1);
  FUZZ_CHECK(v2.type == v.type);
  return 0;
}
