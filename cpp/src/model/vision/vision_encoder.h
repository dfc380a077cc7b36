// Vision encoders: the projector ("mmproj") GGUF that llama.cpp's `convert_hf_to_gguf.py --mmproj`
// writes (clip.* metadata, v.* tower and mm.* projector tensors; llama.cpp tools/mtmd/clip.cpp),
// turned into the text model's input embeddings for one image (one tile of it, for the families
// that split images). One projector type per file under model/vision/ (gemma3.cpp: SigLIP + Gemma 3's
// pooled, normed projection; idefics3.cpp: SigLIP + SmolVLM's pixel shuffle and connector; the
// shared SigLIP tower in siglip.cpp); read_vision_config and load_vision_encoder dispatch on
// clip.projector_type.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "gguf/gguf_file.h"

namespace edgellm {

struct VisionConfig {
  std::string projector;         // clip.projector_type
  int image_size = 0;            // the square the image (Idefics3: each tile) is resized to
  int patch_size = 0;
  int n_embd = 0, n_ff = 0, n_layer = 0, n_head = 0;  // the tower
  float eps = 1e-6f;             // its layer norms (and Gemma 3's soft-embedding norm)
  float image_mean[3] = {0.5f, 0.5f, 0.5f}, image_std[3] = {0.5f, 0.5f, 0.5f};
  int n_embd_text = 0;           // clip.vision.projection_dim: the text model's width
  // Gemma 3: patches pooled scale x scale into one soft token (default 4); Idefics3: scale x scale
  // patches shuffled into one token (default 2)
  int scale_factor = 4;
  int preproc_image_size = 0;    // Idefics3: the longest edge images are resized to before tiling
  int n_wa_pattern = 0;          // Qwen2.5-VL: every n-th block attends fully, the others in windows
  int window_size = 112;         // Qwen2.5-VL: the windows' side in pixels
  int patches_side() const { return image_size / patch_size; }
  int n_patches() const { return patches_side() * patches_side(); }
  int n_tokens() const;          // soft tokens one image becomes
};

// The projector file's config, every key checked (ModelFormatError naming it): not a clip file,
// no vision encoder, an unsupported projector type, sizes that do not divide.
VisionConfig read_vision_config(const GgufFile& file);
// "gemma3, idefics3, qwen2.5vl_merger"
std::string supported_projectors();

class VisionEncoder {
 public:
  virtual ~VisionEncoder() = default;
  const VisionConfig& config() const { return config_; }
  const GgufFile& file() const { return *file_; }
  // Tokens an image of height x width pixels becomes; InvalidRequestError for a size the encoder
  // does not take (Gemma 3, Idefics3: image_size squares; Qwen2.5-VL: multiples of patch x merge).
  virtual int64_t n_tokens_for(int height, int width) const;
  // pixels: [3][height][width], already normalised (mean / std); out: n_tokens_for(height, width)
  // rows of n_embd_text floats. One image at a time on the encoder's threads; not reentrant.
  virtual void encode(const float* pixels, int height, int width, float* out) = 0;

 protected:
  std::shared_ptr<GgufFile> file_;
  VisionConfig config_;
};

// Opens and binds `path` (n_threads 0: physical cores).
std::unique_ptr<VisionEncoder> load_vision_encoder(const std::string& path, int n_threads);

}  // namespace edgellm
