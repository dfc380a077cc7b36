#include "model/model.h"

#include "common/errors.h"
#include "common/thread_pool.h"
#include "model/architecture.h"
#include "model/decoder.h"

namespace edgellm {

Model::~Model() = default;

std::unique_ptr<Model> Model::load(const std::string& path, const LoadOptions& opts) {
  return load(GgufFile::open(path), opts);
}

std::unique_ptr<Model> Model::load(std::shared_ptr<GgufFile> file, const LoadOptions& opts) {
  if (!file) throw InvalidRequestError("Model::load: no file");
  ModelConfig config;
  const Architecture& arch = read_model_config(*file, config);
  return std::make_unique<DecoderModel>(std::move(file), arch, std::move(config), opts);
}

KVCacheConfig Model::kv_config() const {
  KVCacheConfig k;
  k.n_layers = config_.n_layer;
  k.n_kv_heads = config_.n_head_kv;
  k.head_dim_k = config_.head_dim_k;
  k.head_dim_v = config_.head_dim_v;
  k.layer_window = config_.layer_window;
  return k;
}

}  // namespace edgellm
