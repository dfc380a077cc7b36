#include "model/vision/vision_encoder.h"

#include <cmath>

#include "common/errors.h"

namespace edgellm {

std::unique_ptr<VisionEncoder> make_gemma3_vision(std::shared_ptr<GgufFile> file, VisionConfig config, int n_threads);
std::unique_ptr<VisionEncoder> make_idefics3_vision(std::shared_ptr<GgufFile> file, VisionConfig config,
                                                    int n_threads);
std::unique_ptr<VisionEncoder> make_qwen25vl_vision(std::shared_ptr<GgufFile> file, VisionConfig config,
                                                    int n_threads);

namespace {

int read_size(const GgufFile& f, const char* key, int lo, int hi) {
  const std::optional<uint32_t> v = f.find_u32(key);
  if (!v) throw ModelFormatError(f.path() + ": projector file has no key " + key);
  if (*v < static_cast<uint32_t>(lo) || *v > static_cast<uint32_t>(hi))
    throw ModelFormatError(f.path() + ": key " + key + " = " + std::to_string(*v) + " is outside [" + std::to_string(lo) +
                           ", " + std::to_string(hi) + "]");
  return static_cast<int>(*v);
}

void read_triple(const GgufFile& f, const char* key, float* out) {
  const GgufValue* v = f.find(key);
  if (!v) return;  // the defaults (0.5, SigLIP's)
  if (!v->is_array() || v->array_len != 3 || !v->array_data)
    throw ModelFormatError(f.path() + ": key " + key + " must be an array of 3 numbers");
  for (int i = 0; i < 3; ++i) {
    out[i] = static_cast<float>(v->array_number(static_cast<uint64_t>(i)));
    if (!std::isfinite(out[i])) throw ModelFormatError(f.path() + ": key " + key + " has a non-finite value");
  }
}

}  // namespace

int VisionConfig::n_tokens() const {
  const int side = patches_side() / scale_factor;
  return side * side;
}

std::string supported_projectors() { return "gemma3, idefics3, qwen2.5vl_merger"; }

int64_t VisionEncoder::n_tokens_for(int height, int width) const {
  const int s = config_.image_size;
  if (height != s || width != s)
    throw InvalidRequestError("pixels must be a [3, " + std::to_string(s) + ", " + std::to_string(s) + "] array, not [3, " +
                              std::to_string(height) + ", " + std::to_string(width) + "]");
  return config_.n_tokens();
}

VisionConfig read_vision_config(const GgufFile& f) {
  const std::optional<std::string> arch = f.find_string("general.architecture");
  if (!arch || *arch != "clip")
    throw ModelFormatError(f.path() + ": not a projector (mmproj) file: general.architecture is '" + arch.value_or("") +
                           "', expected 'clip'");
  if (!f.find_bool("clip.has_vision_encoder").value_or(false))
    throw ModelFormatError(f.path() + ": projector file has no vision encoder (clip.has_vision_encoder)");
  VisionConfig c;
  c.projector = f.find_string("clip.projector_type").value_or("");
  if (c.projector != "gemma3" && c.projector != "idefics3" && c.projector != "qwen2.5vl_merger")
    throw ModelFormatError(f.path() + ": projector type '" + c.projector + "' is not supported (supported: " +
                           supported_projectors() + ")");
  c.image_size = read_size(f, "clip.vision.image_size", 1, 8192);
  c.patch_size = read_size(f, "clip.vision.patch_size", 1, 1024);
  c.n_embd = read_size(f, "clip.vision.embedding_length", 1, 1 << 16);
  c.n_ff = read_size(f, "clip.vision.feed_forward_length", 1, 1 << 18);
  c.n_layer = read_size(f, "clip.vision.block_count", 1, 1024);
  c.n_head = read_size(f, "clip.vision.attention.head_count", 1, 1024);
  c.n_embd_text = read_size(f, "clip.vision.projection_dim", 1, 1 << 18);
  c.eps = f.find_f32("clip.vision.attention.layer_norm_epsilon").value_or(1e-6f);
  if (!(c.eps > 0.0f && c.eps < 1.0f))
    throw ModelFormatError(f.path() + ": key clip.vision.attention.layer_norm_epsilon is out of range");
  read_triple(f, "clip.vision.image_mean", c.image_mean);
  read_triple(f, "clip.vision.image_std", c.image_std);
  for (float s : c.image_std)
    if (!(s > 0.0f)) throw ModelFormatError(f.path() + ": key clip.vision.image_std must be positive");
  if (c.image_size % c.patch_size != 0)
    throw ModelFormatError(f.path() + ": image size " + std::to_string(c.image_size) + " is not a multiple of the patch size " +
                           std::to_string(c.patch_size));
  if (c.n_embd % c.n_head != 0)
    throw ModelFormatError(f.path() + ": vision width " + std::to_string(c.n_embd) + " is not a multiple of its " +
                           std::to_string(c.n_head) + " heads");
  if (c.n_patches() > 65536) throw ModelFormatError(f.path() + ": more than 65536 patches per image");
  // Gemma 3: written only when not 4 (llama.cpp's converter); Idefics3: always written (default 2)
  c.scale_factor = c.projector == "gemma3" ? 4 : 2;
  if (f.find("clip.vision.projector.scale_factor"))
    c.scale_factor = read_size(f, "clip.vision.projector.scale_factor", 1, 1024);
  if (c.projector == "qwen2.5vl_merger") {  // the merge (2 x 2 patches a token) and the window pattern
    if (f.find("clip.vision.spatial_merge_size")) c.scale_factor = read_size(f, "clip.vision.spatial_merge_size", 1, 16);
    c.n_wa_pattern = read_size(f, "clip.vision.n_wa_pattern", 0, 1024);
    if (f.find("clip.vision.window_size")) c.window_size = read_size(f, "clip.vision.window_size", 1, 4096);
    if ((c.n_embd / c.n_head) % 4 != 0)
      throw ModelFormatError(f.path() + ": vision head size " + std::to_string(c.n_embd / c.n_head) +
                             " is not a multiple of 4 (2-D rotary halves)");
  }
  c.preproc_image_size = 4 * c.image_size;  // transformers' SmolVLM default: 4 tiles a side
  if (f.find("clip.vision.preproc_image_size"))
    c.preproc_image_size = read_size(f, "clip.vision.preproc_image_size", 1, 16384);
  if (c.patches_side() % c.scale_factor != 0)
    throw ModelFormatError(f.path() + ": " + std::to_string(c.patches_side()) + " patches a side do not pool by " +
                           std::to_string(c.scale_factor));
  return c;
}

std::unique_ptr<VisionEncoder> load_vision_encoder(const std::string& path, int n_threads) {
  std::shared_ptr<GgufFile> file = GgufFile::open(path);
  VisionConfig c = read_vision_config(*file);
  if (c.projector == "idefics3") return make_idefics3_vision(std::move(file), std::move(c), n_threads);
  if (c.projector == "qwen2.5vl_merger") return make_qwen25vl_vision(std::move(file), std::move(c), n_threads);
  return make_gemma3_vision(std::move(file), std::move(c), n_threads);
}

}  // namespace edgellm
