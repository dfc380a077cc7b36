#include "model/model.h"

#include "common/errors.h"
#include "common/thread_pool.h"
#include "model/architecture.h"
#include "model/decoder.h"
#include "model/encoder.h"

namespace edgellm {

Model::~Model() = default;

std::unique_ptr<Model> Model::load(const std::string& path, const LoadOptions& opts) {
  opts.progress.report(0, "open");
  std::shared_ptr<GgufFile> file = GgufFile::open(path);
  opts.progress.report(kLoadOpenEnd, "open");
  return load(std::move(file), opts);
}

std::unique_ptr<Model> Model::load(std::shared_ptr<GgufFile> file, const LoadOptions& opts) {
  if (!file) throw InvalidRequestError("Model::load: no file");
  ModelConfig config;
  if (const EncoderArchitecture* enc = find_encoder_architecture(file->get_string("general.architecture"))) {
    config = read_common_config(*file);
    enc->hparams(*file, config);
    const GgufFile& ef = *file;
    auto model = std::make_unique<EncoderModel>(std::move(file), *enc, std::move(config), opts);
    ef.check_unchanged();
    return model;
  }
  const Architecture& arch = read_model_config(*file, config);
  const GgufFile& f = *file;
  auto model = std::make_unique<DecoderModel>(std::move(file), arch, std::move(config), opts);
  f.check_unchanged();  // rewritten while loading (packing read zeros for its faulted pages)
  return model;
}

void Model::rank(const float*, float*) {
  throw InvalidRequestError("this model has no classification head: it does not rank");
}

KVCacheConfig kv_config_for(const ModelConfig& c) {
  KVCacheConfig k;
  k.n_layers = c.n_layer;
  k.n_kv_heads = c.n_head_kv;
  k.head_dim_k = c.head_dim_k;
  k.head_dim_v = c.head_dim_v;
  k.layer_window = c.layer_window;
  return k;
}

KVCacheConfig Model::kv_config() const { return kv_config_for(config_); }

std::shared_ptr<const LoraAdapter> Model::load_lora(const std::string& path) {
  throw InvalidRequestError(path + ": this model (" + file_->find_string("general.architecture").value_or("?") +
                            ") does not take LoRA adapters");
}

}  // namespace edgellm
