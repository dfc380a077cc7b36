// _core.VisionEncoder: a projector (mmproj) file loaded for encoding images (model/vision/).
// encode() releases the GIL; the pixels are a normalised float32 [3, size, size] array.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <mutex>

#include "bindings.h"
#include "model/vision/vision_encoder.h"

namespace py = pybind11;

namespace edgellm::bindings {
namespace {

struct PyVisionEncoder {
  std::unique_ptr<VisionEncoder> enc;
  std::mutex mu;  // one image at a time (the encoder's scratch and pool)
};

}  // namespace

void bind_vision(py::module_& m) {
  py::class_<PyVisionEncoder>(m, "VisionEncoder")
      .def(py::init([](const std::string& path, int n_threads) {
             auto p = std::make_unique<PyVisionEncoder>();
             {
               py::gil_scoped_release nogil;
               p->enc = load_vision_encoder(path, n_threads);
             }
             return p;
           }),
           py::arg("path"), py::arg("n_threads") = 0,
           "Loads a projector GGUF (llama.cpp's convert_hf_to_gguf.py --mmproj layout). ModelFormatError names what "
           "is wrong (not a clip file, unsupported projector type, a missing or misshapen tensor).")
      .def_property_readonly("projector", [](PyVisionEncoder& p) { return p.enc->config().projector; })
      .def_property_readonly("image_size", [](PyVisionEncoder& p) { return p.enc->config().image_size; })
      .def_property_readonly("patch_size", [](PyVisionEncoder& p) { return p.enc->config().patch_size; })
      .def_property_readonly("preproc_image_size", [](PyVisionEncoder& p) { return p.enc->config().preproc_image_size; })
      .def_property_readonly("n_tokens", [](PyVisionEncoder& p) { return p.enc->config().n_tokens(); })
      .def_property_readonly("n_embd_text", [](PyVisionEncoder& p) { return p.enc->config().n_embd_text; })
      .def_property_readonly("image_mean", [](PyVisionEncoder& p) {
        const float* v = p.enc->config().image_mean;
        return std::vector<float>(v, v + 3);
      })
      .def_property_readonly("image_std", [](PyVisionEncoder& p) {
        const float* v = p.enc->config().image_std;
        return std::vector<float>(v, v + 3);
      })
      .def(
          "encode",
          [](PyVisionEncoder& p, py::array_t<float, py::array::c_style | py::array::forcecast> pixels) {
            const VisionConfig& c = p.enc->config();
            if (pixels.ndim() != 3 || pixels.shape(0) != 3 || pixels.shape(1) > 65536 || pixels.shape(2) > 65536)
              throw InvalidRequestError("pixels must be a [3, height, width] array");
            const int h = static_cast<int>(pixels.shape(1)), w = static_cast<int>(pixels.shape(2));
            const int64_t n = p.enc->n_tokens_for(h, w);
            py::array_t<float> out({static_cast<py::ssize_t>(n), static_cast<py::ssize_t>(c.n_embd_text)});
            const float* src = pixels.data();
            float* dst = out.mutable_data();
            {
              py::gil_scoped_release nogil;
              std::lock_guard<std::mutex> lock(p.mu);
              p.enc->encode(src, h, w, dst);
            }
            return out;
          },
          py::arg("pixels"), "The image's soft tokens: float32 [n_tokens, n_embd_text] (the text model's input embeddings).");
}

}  // namespace edgellm::bindings
