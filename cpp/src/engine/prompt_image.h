// Images in a prompt (vision input): a run of placeholder positions whose input embeddings are
// given (the vision encoder's output, model/vision/) instead of read from the token table.
//
// In a sequence's `tokens` an image's positions hold key tokens, not its placeholder id: negative
// values derived from a hash of the image's pixels (image_key_token), so the prefix cache, its
// persistent store and the slots, which key pages by tokens, tell images apart and a second request
// about the same image reuses its KV. The scheduler puts the placeholder id and the embedding row
// into the batch (Batch::set_image_row), and keeps each image block inside one chunk: where the
// model's image tokens attend to each other bidirectionally (Gemma 3:
// ModelConfig::image_blocks_bidirectional) every key of the block must be written by the same
// forward pass; elsewhere they attend causally, as text.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

namespace edgellm {

struct PromptImage {
  int32_t pos = 0;       // first prompt position of the block
  int32_t n_tokens = 0;  // positions [pos, pos + n_tokens)
  uint64_t hash = 0;     // of the pixels the embeddings came from (the cache key)
  int32_t token = 0;     // the placeholder id the prompt has at those positions
  bool bidirectional = false;  // the block attends both ways (set by the engine from the model)
  // M-RoPE (Qwen2-VL): the block is rows x cols tokens (row-major); 0: positions as text.
  int32_t rows = 0, cols = 0;
  std::shared_ptr<const std::vector<float>> embd;  // n_tokens rows of the model's n_embd
  int32_t last() const { return pos + n_tokens - 1; }
};

// The key token of position j of an image with pixel hash h: always negative, so never a real id.
int32_t image_key_token(uint64_t hash, int32_t j);

// M-RoPE positions (t, h, w) of prompt or generated position p (transformers' get_rope_index):
// every grid image before p moves what follows back by its n_tokens - max(rows, cols); inside one,
// (s, s + row, s + col) with s its first position so moved.
void mrope_position(const std::vector<PromptImage>& images, int32_t p, int32_t* out);
bool has_grid(const std::vector<PromptImage>& images);

// The image holding position p, or null (images sorted by pos).
const PromptImage* image_at(const std::vector<PromptImage>& images, int32_t p);

// A chunk of k tokens from position `start` cut or grown so that no image block is split: a chunk
// ending inside a block ends before it instead, or — when the block began at or before `start` —
// takes the whole rest of the block if `budget` allows. 0: nothing can be scheduled within budget.
int32_t fit_image_chunk(const std::vector<PromptImage>& images, int32_t start, int32_t k, int32_t budget);

}  // namespace edgellm
