// Encoder-only transformers (BERT family): every token of a sequence attends to every other
// (non-causal), positions are absolute embeddings, token-type embeddings mark the second text
// of a pair, and each layer is post-norm:
//   x = LN(tok[t] + pos[p] + type[tt])
//   per layer: x = LN(x + Wo·attn(Wq x, Wk x, Wv x)); x = LN(x + Wdown·gelu(Wup x))
// The hidden states of the last layer are what embeddings pool (engine/embedding.h); a
// reranker (cross-encoder) also has a classification head on the [CLS] state: an optional
// pooler (dense + tanh, GGUF cls.weight/bias — transformers' BertPooler) then the classifier
// (cls.output.weight/bias), EncoderModel::rank; a file with that head and no <arch>.pooling_type
// (llama.cpp's converter writes none) pools "rank".
//
// The engine runs an encoder like a decoder's embedding requests (Engine::submit_embedding),
// with two differences it learns from Model::causal(): a sequence is computed in one forward
// pass, whole (the scheduler never splits it), and nothing is generated. The KV cache is not
// used (its pages are reserved by the engine and never written, so never committed).
// Architectures are one file each under model/arch/ (bert.cpp, nomic_bert.cpp), listed in encoder.cpp.
#pragma once
#include <array>
#include <memory>
#include <mutex>
#include <vector>

#include "model/model.h"
#include "model/noncausal_attention.h"
#include "model/parallel_matmul.h"
#include "model/rope.h"
#include "model/weight_packing.h"
#include "model/weights.h"

namespace edgellm {

// GeluErf: down(gelu(up x + b) ) + b; SwiGlu: down(silu(gate x) * up x) (nomic-bert, no biases)
enum class EncoderActivation { GeluErf, SwiGlu };

// What an encoder architecture is, as data.
struct EncoderArchitecture {
  const char* name;
  EncoderActivation activation;
  // Rotary positions (NEOX halves, <arch>.rope.freq_base) on Q and K instead of a position table;
  // the Q/K/V/output biases are then optional (nomic-bert has none) and Q, K, V may be one fused
  // attn_qkv matrix.
  bool rotary;
  // Completes the config after read_common_config (pooling, eps); may throw ModelFormatError.
  void (*hparams)(const GgufFile& file, ModelConfig& config);
};

// The hparams every encoder architecture shares: <arch>.attention.causal must not be true.
void encoder_hparams(const GgufFile& file, ModelConfig& config);

// nullptr when `name` (general.architecture) is not an encoder architecture.
const EncoderArchitecture* find_encoder_architecture(const std::string& name);
// "bert, nomic-bert"
std::string supported_encoder_architectures();

struct EncoderLayerWeights {
  Matrix wq, wk, wv, wo, up, gate, down;  // gate: SwiGlu only; wq/wk/wv may be row views of attn_qkv
  Vector bq, bk, bv, bo, b_up, b_down;    // optional where the architecture is rotary
  Vector attn_norm_w, attn_norm_b;  // attn_output_norm (after the attention residual)
  Vector out_norm_w, out_norm_b;    // layer_output_norm (after the FFN residual)
  std::array<Matrix*, 7> matrices() { return {&wq, &wk, &wv, &wo, &up, &gate, &down}; }
};

struct EncoderWeights {
  Matrix token_embd, pos_embd, type_embd;  // type_embd optional; pos_embd absent when rotary
  Vector embd_norm_w, embd_norm_b;
  std::vector<EncoderLayerWeights> layers;
  Matrix pooler;                    // cls.weight: optional dense + tanh before the classifier
  Vector b_pooler;
  Matrix classifier;                // cls.output.weight: n_embd -> n_cls_out scores (rerankers)
  Vector b_classifier;
  int32_t n_cls_out = 0;
  std::vector<Matrix*> matrices();  // every matrix (absent ones included, empty)
};

// Binds an encoder's tensors (llama.cpp's names), shapes checked against `c`.
void bind_encoder(const GgufFile& f, WeightLoader& ld, const EncoderArchitecture& arch, const ModelConfig& c,
                  EncoderWeights& w);

class EncoderModel final : public Model {
 public:
  EncoderModel(std::shared_ptr<GgufFile> file, const EncoderArchitecture& arch, ModelConfig config,
               const LoadOptions& opts);
  ~EncoderModel() override;

  // Every sequence in `batch` must be whole (positions 0..n-1, consecutive rows); want_logits
  // is refused (an encoder has no LM head). `kv` is not read or written.
  void forward(const Batch& batch, KVCache& kv, float* logits, float* hidden = nullptr) override;
  void run_tasks(int64_t n_tasks, const std::function<void(int64_t, int)>& fn) override;
  bool causal() const override { return false; }
  int32_t rank_outputs() const override { return w_.n_cls_out; }
  void rank(const float* cls_hidden, float* scores) override;

 private:
  struct Segment {
    int32_t begin, n;
  };
  std::vector<Segment> segments(const Batch& b) const;
  // x = LayerNorm(x + add) * w + b per row (add may be null): the post-norm residual.
  void add_layernorm(float* x, const float* add, const Vector& w, const Vector& b, int64_t rows);
  void matmul(const Matrix& w, const Vector& bias, const MatmulPlan& plan, const float* x, int64_t rows, float* y);
  // q_, k_, v_ = x · Wq/Wk/Wv (+ biases) as one parallel region over the three matrices.
  void qkv(const EncoderLayerWeights& l, const MatmulPlan& plan, const float* x, int64_t rows);

  const EncoderArchitecture& arch_;
  EncoderWeights w_;
  struct Plans {
    MatmulPlan qkv, o, up, gate, down;  // qkv: Q, K and V in one pool region
  };
  std::vector<Plans> plans_;
  MatmulPlan pooler_plan_, classifier_plan_;
  std::vector<std::unique_ptr<float[]>> owned_;
  PackedWeights packed_;
  ActivationQuantizer act_;
  std::vector<float> x_, q_, k_, v_, a_, o_, f_, g_;
  std::vector<float> ones_;  // n_embd ones: the layer norm's mean as a dot
  Rope rope_;  // rotary architectures
  std::vector<float> rope_table_;  // per token: rope_.table_stride() floats
  std::vector<float> scores_;  // per thread: thread_floats_ (an embedding row)
  AttentionScratch attn_scratch_;
  int64_t thread_floats_ = 0;
  int32_t sep_id_ = 102;  // [SEP]: tokens after the first one are token type 1
  std::mutex forward_mutex_;
};

}  // namespace edgellm
