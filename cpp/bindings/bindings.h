#pragma once
#include <pybind11/pybind11.h>

namespace edgellm::bindings {
void bind_gguf(pybind11::module_& m);       // bind_gguf.cpp: ModelFile
void bind_quant(pybind11::module_& m);      // bind_quant.cpp: block formats (tests, quantize CLI)
void bind_tokenizer(pybind11::module_& m);  // bind_tokenizer.cpp
void bind_model(pybind11::module_& m);      // bind_model.cpp
void bind_engine(pybind11::module_& m);     // bind_engine.cpp: LLM engine, sampling
void bind_kernels(pybind11::module_& m);    // bind_kernels.cpp: kernel tables (tests)
void bind_grammar(pybind11::module_& m);
void bind_cuda(pybind11::module_& m);      // bind_cuda.cpp: CUDA status, GPU kernel test surface    // bind_grammar.cpp: constrained decoding (factory + test surface)
}  // namespace edgellm::bindings
