// edgellm._core.Tokenizer / StreamDecoder. encode/decode release the GIL: the C++ tokenizer is
// immutable, so Python threads can tokenize concurrently.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>

#include "bindings.h"
#include "common/errors.h"
#include "tokenizer/tokenizer.h"

namespace py = pybind11;

namespace edgellm::bindings {
namespace {

struct PyStreamDecoder {
  std::shared_ptr<Tokenizer> tok;  // keeps the tokenizer alive as long as the decoder
  StreamDecoder dec;
  PyStreamDecoder(std::shared_ptr<Tokenizer> t, bool skip_special) : tok(std::move(t)), dec(*tok, skip_special) {}
};

int32_t dict_id(const py::dict& d, const char* key, int32_t dflt) {
  if (!d.contains(key) || d[key].is_none()) return dflt;
  return d[key].cast<int32_t>();
}

// A str's UTF-8 bytes (cached in the object; valid while it lives).
std::string_view utf8_view(const py::str& text) {
  Py_ssize_t size = 0;
  const char* data = PyUnicode_AsUTF8AndSize(text.ptr(), &size);
  if (!data) {
    // Lone surrogates cannot be UTF-8: say so instead of a bare UnicodeEncodeError.
    PyErr_Clear();
    throw InvalidRequestError("text to tokenize is not valid Unicode (it contains a lone surrogate)");
  }
  return std::string_view(data, size_t(size));
}

// Test-only construction from a Python dict (e.g. read with gguf.GGUFReader).
std::shared_ptr<Tokenizer> from_vocab(const py::dict& d) {
  Vocab v;
  v.model = d.contains("model") ? d["model"].cast<std::string>() : std::string("llama");
  if (v.model == "llama") v.type = VocabType::Spm;
  else if (v.model == "gpt2") v.type = VocabType::Bpe;
  else throw ModelFormatError("from_vocab: model '" + v.model + "' is not supported (llama, gpt2)");
  if (!d.contains("tokens")) throw ModelFormatError("from_vocab: missing key 'tokens'");
  v.tokens = d["tokens"].cast<std::vector<std::string>>();
  if (d.contains("scores")) v.scores = d["scores"].cast<std::vector<float>>();
  if (d.contains("token_type")) v.types = d["token_type"].cast<std::vector<int32_t>>();
  if (d.contains("merges")) v.merges = d["merges"].cast<std::vector<std::string>>();
  if (d.contains("pre")) v.pre = d["pre"].cast<std::string>();
  if (d.contains("name")) v.name = d["name"].cast<std::string>();
  bool spm = v.type == VocabType::Spm;
  v.bos = dict_id(d, "bos", spm ? 1 : 11);
  v.eos = dict_id(d, "eos", spm ? 2 : 11);
  v.unk = dict_id(d, "unk", spm ? 0 : kNoToken);
  v.pad = dict_id(d, "pad", kNoToken);
  v.eot = dict_id(d, "eot", kNoToken);
  v.eom = dict_id(d, "eom", kNoToken);
  v.add_bos = d.contains("add_bos") ? d["add_bos"].cast<bool>() : spm;
  v.add_eos = d.contains("add_eos") ? d["add_eos"].cast<bool>() : false;
  v.add_space_prefix = d.contains("add_space_prefix") ? d["add_space_prefix"].cast<bool>() : spm;
  if (d.contains("chat_template") && !d["chat_template"].is_none())
    v.chat_template = d["chat_template"].cast<std::string>();
  finalize_vocab(v);
  return std::shared_ptr<Tokenizer>(Tokenizer::create(std::move(v)));
}

}  // namespace

void bind_tokenizer(py::module_& m) {
  py::class_<Tokenizer, std::shared_ptr<Tokenizer>>(m, "Tokenizer",
      "Text <-> token ids with llama.cpp-identical results (SPM and byte-level BPE).")
      .def_static("from_gguf", [](const std::string& path) {
            py::gil_scoped_release nogil;
            return std::shared_ptr<Tokenizer>(Tokenizer::from_gguf(path));
          }, py::arg("path"), "Load the vocabulary of a GGUF model file.")
      .def_static("from_vocab", &from_vocab, py::arg("vocab"),
          "Test helper: build from a dict (model, tokens, scores, token_type, merges, pre, bos, eos, ...).")
      .def("encode", [](const Tokenizer& t, const py::str& text, bool add_special, bool parse_special,
                        const Tokenizer::PlainRanges& plain) {
            std::string_view view = utf8_view(text);
            py::gil_scoped_release nogil;  // `text` stays referenced by the caller, so `view` is valid
            return t.encode(view, add_special, parse_special, plain);
          }, py::arg("text"), py::arg("add_special") = true, py::arg("parse_special") = false,
          py::arg("plain_ranges") = Tokenizer::PlainRanges{},
          "Token ids of text. plain_ranges: UTF-8 byte ranges [begin, end) where control tokens "
          "are not parsed even with parse_special (message content inside a chat prompt).")
      .def("find_control_tokens", [](const Tokenizer& t, const py::str& text) {
            std::string_view view = utf8_view(text);
            py::gil_scoped_release nogil;
            return t.find_control_tokens(view);
          }, py::arg("text"),
          "UTF-8 byte ranges [begin, end) where control-token texts occur (longest match, left to right).")
      .def("decode", [](const Tokenizer& t, const std::vector<int32_t>& ids, bool skip_special) {
            std::string s;
            {
              py::gil_scoped_release nogil;
              s = sanitize_utf8(t.decode(ids, skip_special));
            }
            return py::str(s);
          }, py::arg("ids"), py::arg("skip_special") = false,
          "Text of the ids; invalid UTF-8 (a character cut by the id list) becomes U+FFFD.")
      .def("token_to_piece", [](const Tokenizer& t, int32_t id, bool render_special) {
            return py::bytes(t.token_to_piece(id, render_special));
          }, py::arg("id"), py::arg("special") = true, "Raw bytes a token stands for.")
      .def("token_text", [](const Tokenizer& t, int32_t id) {
            const std::string& s = t.token_text(id);
            return py::reinterpret_steal<py::str>(PyUnicode_DecodeUTF8(s.data(), Py_ssize_t(s.size()), "replace"));
          }, py::arg("id"), "The token's text as stored in the vocabulary.")
      .def("is_eog", [](const Tokenizer& t, int32_t id) { t.check_id(id); return t.is_eog(id); }, py::arg("id"))
      .def_property_readonly("n_vocab", &Tokenizer::n_vocab)
      .def_property_readonly("bos_id", [](const Tokenizer& t) -> py::object {
            return t.bos_id() == kNoToken ? py::object(py::none()) : py::object(py::int_(t.bos_id())); })
      .def_property_readonly("eos_id", [](const Tokenizer& t) -> py::object {
            return t.eos_id() == kNoToken ? py::object(py::none()) : py::object(py::int_(t.eos_id())); })
      .def_property_readonly("eog_ids", [](const Tokenizer& t) { return t.eog_ids(); })
      .def_property_readonly("special_ids", [](const Tokenizer& t) {
            const Vocab& v = t.vocab();
            py::dict d;
            const std::pair<const char*, int32_t> ids[] = {
                {"bos", v.bos}, {"eos", v.eos}, {"unk", v.unk}, {"pad", v.pad}, {"sep", v.sep},
                {"cls", v.cls}, {"mask", v.mask}, {"eot", v.eot}, {"eom", v.eom},
                {"fim_pre", v.fim_pre}, {"fim_suf", v.fim_suf}, {"fim_mid", v.fim_mid},
                {"fim_pad", v.fim_pad}, {"fim_rep", v.fim_rep}, {"fim_sep", v.fim_sep}};
            for (const auto& [name, id] : ids)
              if (id != kNoToken) d[name] = id;
            return d; }, "Named special ids present in this vocabulary.")
      .def_property_readonly("add_bos", [](const Tokenizer& t) { return t.vocab().add_bos; })
      .def_property_readonly("add_eos", [](const Tokenizer& t) { return t.vocab().add_eos; })
      .def_property_readonly("add_space_prefix", [](const Tokenizer& t) { return t.vocab().add_space_prefix; })
      .def_property_readonly("model", [](const Tokenizer& t) { return t.vocab().model; })
      .def_property_readonly("pre", [](const Tokenizer& t) { return t.vocab().pre; })
      .def_property_readonly("arch", [](const Tokenizer& t) { return t.vocab().arch; })
      .def_property_readonly("chat_template", [](const Tokenizer& t) -> py::object {
            const auto& ct = t.vocab().chat_template;
            return ct ? py::object(py::str(*ct)) : py::none(); })
      .def_property_readonly("tokens", [](const Tokenizer& t) {
            py::list out;
            for (const auto& s : t.vocab().tokens)
              out.append(py::reinterpret_steal<py::str>(PyUnicode_DecodeUTF8(s.data(), Py_ssize_t(s.size()), "replace")));
            return out; }, "All token texts (for template detection and tests).")
      .def_property_readonly("token_types", [](const Tokenizer& t) { return t.vocab().types; })
      .def_property_readonly("scores", [](const Tokenizer& t) { return t.vocab().scores; })
      .def_property_readonly("merges", [](const Tokenizer& t) {
            py::list out;
            for (const auto& s : t.vocab().merges)
              out.append(py::reinterpret_steal<py::str>(PyUnicode_DecodeUTF8(s.data(), Py_ssize_t(s.size()), "replace")));
            return out; }, "BPE merges as stored (rank = index); empty for SPM.");

  py::class_<PyStreamDecoder>(m, "StreamDecoder",
      "Feeds token ids one at a time; returns only complete UTF-8 characters.")
      .def(py::init<std::shared_ptr<Tokenizer>, bool>(), py::arg("tokenizer"), py::arg("skip_special") = false)
      .def("push", [](PyStreamDecoder& d, int32_t id) { return py::str(d.dec.push(id)); }, py::arg("id"))
      .def("flush", [](PyStreamDecoder& d) { return py::str(d.dec.flush()); });
}

}  // namespace edgellm::bindings
